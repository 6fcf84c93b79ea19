"""The computer-algebra ("verified") pair generator: the experiment's control (paper,
Appendix A of arXiv 2609.31927, "The verified arm (CAS), in detail"). No LLM anywhere: positives are proved equivalent to their
source and negatives refuted by a stored numeric counterexample.

Public API:

* :data:`GENERATOR_VERSION`: bumped whenever the output would change.
* :func:`generate_for_problem` ``(source_id, text, *, seed) -> dict``: one problem, pure
  and deterministic.
* :func:`run_generator` ``(problems, *, out_path, seed, timeout_s, memory_mb, workers,
  progress=True) -> dict``: worker processes with a wall-clock limit and a memory cap that
  never outlive the parent, resumable (failures are retried when the limits change),
  byte-identical final file.
* :func:`parse_segment` / :func:`try_parse`: the whitelist LaTeX grammar (never
  ``eval``/``sympify``/``parse_expr``), :func:`normalize_latex`, :func:`find_spans`.
* :func:`check_equivalent`, :func:`find_counterexample`: the rules shared by the
  generator and ``recipematch cas check`` (exact rational arithmetic for rational
  relations, floating point confirmed at 50 digits otherwise, same domain required).
* :func:`aggregate_census`, :func:`metrics_from_summary`: the census and the flat
  metrics a stage writes under ``metrics/``.

Modules: ``spans`` (math spans and segments), ``normalize`` (LaTeX normaliser),
``grammar`` (parser, printer), ``compile`` (numeric evaluation: float, exact, 50 digits),
``relations`` (relations, unknowns, sample points), ``equivalence`` (the test of
positives), ``conditions`` (where a relation is defined), ``counterexamples`` and
``targeted`` (the refutation of negatives), ``domains`` (declared/implied domains),
``transforms`` (edits), ``generator`` (one problem), ``runner`` (many problems),
``isolation`` (worker processes tied to their parent, one-shot isolated calls), ``cli`` (``recipematch cas parse|check``, each in a worker under a
wall-clock limit).
"""

from recipematch.cas.counterexamples import find_counterexample
from recipematch.cas.domains import Domain
from recipematch.cas.equivalence import check_equivalent
from recipematch.cas.generator import GENERATOR_VERSION, generate_for_problem
from recipematch.cas.grammar import ParseError, Parsed, parse_segment, try_parse
from recipematch.cas.normalize import normalize_latex
from recipematch.cas.relations import Rel
from recipematch.cas.runner import aggregate_census, metrics_from_summary, run_generator
from recipematch.cas.spans import find_spans, split_segments

__all__ = [
    "GENERATOR_VERSION",
    "generate_for_problem",
    "run_generator",
    "aggregate_census",
    "metrics_from_summary",
    "parse_segment",
    "try_parse",
    "ParseError",
    "Parsed",
    "normalize_latex",
    "find_spans",
    "split_segments",
    "check_equivalent",
    "find_counterexample",
    "Domain",
    "Rel",
]
