"""recipematch: measure recipe-matching in LLM-built retrieval benchmarks.

Rebuilds the experiments of "Recipe-Matching, Not Equivalence" (arXiv 2609.31927).
The library never reads ``params.yaml``, environment variables or fixed paths; the thin
entry points in ``stages/`` and the ``recipematch`` command line wire it to DVC.
"""

__version__ = "0.1.0"
