"""The paper's rules in one place: open this module to find what the experiment means.

Everything here is a rule of "Recipe-Matching, Not Equivalence" (arXiv 2609.31927), with
the section or table it comes from. Stage code and the library read these names; nothing
else restates them.

* **Cells and arms** (Section 3; Tables 1, 9, 11–12): a cell is positives × negatives ×
  negative volume; the named arms are cells (:data:`NAMED_ARMS`).
* **Which prompts carry near-misses** (Section 3, Appendix F): D1–D3 and the unrelated
  near-miss prompt ask for one positive and up to three near-misses; D4 and D5 ask for
  positives only (:data:`NEAR_MISS_PROMPTS`, :func:`negatives_for_prompt`).
* **The contrasts the report shows** (Table 1): recipe − verified, recipe − reference, and
  the cell under test against both (:data:`CONTRASTS`); each gap also enters a
  difference-in-differences against the real-duplicate side (Section 4, Appendix A).
* **Evaluation roles and scoring rules** (Section 3, Appendix A, Table 5): what a declared
  evaluation's ``role`` and ``rule`` mean (:data:`EVAL_ROLES`, :data:`EVAL_RULES`).
"""

from __future__ import annotations

from dataclasses import dataclass

from recipematch.errors import RecipematchError

#: Generators of positives and the pair-file key each reads (paper Tables 11–12).
POSITIVES = {"cas": "cas", "d1": "d1_recipe", "d2": "d2_paraphrase", "d3": "d3_style", "d4": "d4_restatement",
             "d5": "d5_survey", "bt": "bt", "bt3": "bt3"}
#: Negatives and the pair-file key they come from (``none`` attaches nothing).
NEGATIVES = {"none": None, "cas": "cas", "recipe": "d1_recipe", "unrelated": "unrelated_negatives"}
VOLUMES = ("matched", "full")


@dataclass(frozen=True)
class CellSpec:
    """One cell of the factorial.

    Raises:
        ValueError: an unknown positives, negatives or volume value.
    """

    positives: str
    negatives: str
    volume: str = "full"

    def __post_init__(self) -> None:
        if self.positives not in POSITIVES:
            raise RecipematchError(f"unknown positives={self.positives!r}; choose from {sorted(POSITIVES)}")
        if self.negatives not in NEGATIVES:
            raise RecipematchError(f"unknown negatives={self.negatives!r}; choose from {sorted(NEGATIVES)}")
        if self.volume not in VOLUMES:
            raise RecipematchError(f"unknown volume={self.volume!r}; choose from {VOLUMES}")

    @property
    def name(self) -> str:
        """``<positives>x<negatives>``, plus ``-<volume>`` where the volume matters (LLM
        negatives attached to other positives), e.g. ``d4xnone``, ``d4xrecipe-matched``."""
        base = f"{self.positives}x{self.negatives}"
        if self.negatives in ("none", "cas") or self._own:
            return base
        return f"{base}-{self.volume}"

    @property
    def _own(self) -> bool:
        return POSITIVES[self.positives] == NEGATIVES[self.negatives]

    def inputs(self) -> list[str]:
        """Pair-file keys this cell reads (the reference's CAS file for ``matched``)."""
        keys = [POSITIVES[self.positives]]
        neg = NEGATIVES[self.negatives]
        if neg and neg not in keys:
            keys.append(neg)
        if self.volume == "matched" and neg not in (None, "cas") and not self._own:
            for k in (POSITIVES["d4"], "cas"):
                if k not in keys:
                    keys.append(k)
        return keys


NAMED_ARMS: dict[str, CellSpec] = {
    # Table 1 (the headline arms) and Table 9's D4
    "verified": CellSpec("cas", "cas"),
    "recipe": CellSpec("d1", "recipe"),
    "reference": CellSpec("d4", "cas"),
    "d4": CellSpec("d4", "none"),
    # Table 12: the 2 x 2
    "cas_alone": CellSpec("cas", "none"),
    # Table 12: D4 positives with LLM-written near-misses
    "d4_recipe_matched": CellSpec("d4", "recipe", "matched"),
    "d4_recipe_full": CellSpec("d4", "recipe", "full"),
    "d4_unrelated_matched": CellSpec("d4", "unrelated", "matched"),
    "d4_unrelated_full": CellSpec("d4", "unrelated", "full"),
    # Table 12: swapping the positives
    "cas_recipe": CellSpec("cas", "recipe", "full"),
    "bt_cas": CellSpec("bt", "cas"),
    "bt3_cas": CellSpec("bt3", "cas"),
    # Table 12: a second recipe-free prompt
    "d5": CellSpec("d5", "none"),
    "d5_cas": CellSpec("d5", "cas"),
    # Table 12: the remaining cells of the grid (LLM near-misses at the recipe arm's volume)
    "cas_unrelated": CellSpec("cas", "unrelated", "full"),
    "bt": CellSpec("bt", "none"),
    "bt_unrelated": CellSpec("bt", "unrelated", "full"),
    "bt_recipe": CellSpec("bt", "recipe", "full"),
    "d1_alone": CellSpec("d1", "none"),
    "d1_cas": CellSpec("d1", "cas"),
    "d1_unrelated": CellSpec("d1", "unrelated", "full"),
}
"""Named cells (paper Tables 1, 9 and 12). Any of these names can be listed in ``arms``."""


#: Exclusion-list versions (Appendix B): v1 = the gate the headline arms used (whitespace-
#: normalised text match + the duplicate evaluation's ids); v2 = corrected (also strips the
#: OCR "Problem:" header and image placeholders, unions the corpus's internal duplicates).
#: There is no "off".
GATE_VERSIONS = ("v1", "v2")

#: Prompts whose answers carry near-misses (Section 3: D1–D3 ask for 1 positive and up to 3
#: near-misses; the unrelated near-miss prompt writes near-misses; D4 and D5 ask for
#: positives only).
NEAR_MISS_PROMPTS = frozenset({"d1_recipe", "d2_paraphrase", "d3_style", "unrelated_negatives"})
#: Every LLM prompt of the ladder (Table 9), by pair-file key.
LLM_PROMPTS = ("d1_recipe", "d2_paraphrase", "d3_style", "d4_restatement", "d5_survey", "unrelated_negatives")


def negatives_for_prompt(prompt: str, n_neg: int) -> int:
    """How many near-misses a request under ``prompt`` asks for: ``n_neg`` for a prompt in
    :data:`NEAR_MISS_PROMPTS`, else 0 (D4, D5: positives only; Section 3)."""
    return n_neg if prompt in NEAR_MISS_PROMPTS else 0


#: The gaps the report shows, as (arm, minus arm) (Table 1: recipe − verified and
#: recipe − reference; the cell under test is set against the same two; reference −
#: verified separates positives from negatives). A contrast is computed when both arms run.
CONTRASTS = (("recipe", "verified"), ("recipe", "reference"), ("cell", "verified"), ("cell", "reference"),
             ("reference", "verified"))

#: What an evaluation's ``role`` means (Section 3; Table 6 for in-family scores).
EVAL_ROLES = {
    "benchmark": "LLM-built: gold documents written by a generator under the benchmark's recipe",
    "real": "no generator wrote it (real duplicates, human-written pairs): the ability the benchmark claims",
    "in_family": "built by an arm's own generator (e.g. the CAS near-miss probe); not read as evidence",
}
#: Scoring rules (Section 3, Appendix A). ``plain``: rank of the best gold among all documents
#: (own entry masked); ``crosslingual_strict``: only golds whose language tag differs from
#: the query's count (``unknown`` counts as another language); a query without one is a miss.
EVAL_RULES = ("plain", "crosslingual_strict")
