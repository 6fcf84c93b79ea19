"""Loaders of benchmarks no one in the project built (the paper, Section 6 and Appendix D):
each reads a local copy (nothing downloads) and writes BEIR folders with a MANIFEST."""
