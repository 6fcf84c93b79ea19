"""Paraphrase depth lives in :mod:`recipematch.depth` (it is not LLM-specific: the CAS arm
and the pair-file metrics use it too); re-exported here."""

from recipematch.depth import char3_jaccard, char_ngrams, mean_char3_jaccard

__all__ = ["char_ngrams", "char3_jaccard", "mean_char3_jaccard"]
