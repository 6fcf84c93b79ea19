"""The paper's rules in one place: open this module to find what the experiment means.

Everything here is a rule of "Recipe-Matching, Not Equivalence" (arXiv 2609.31927), with
the section or table it comes from. Stage code and the library read these names; nothing
else restates them.

* **Cells and arms** (Section 3; Tables 1, 9, 11–12): a cell is positives × negatives ×
  negative volume; the named arms are cells (:data:`NAMED_ARMS`).
* **Which prompts carry near-misses** (Section 3, Appendix F): D1–D3 and the unrelated
  near-miss prompt ask for one positive and up to three near-misses; D4 and D5 ask for
  positives only (:data:`NEAR_MISS_PROMPTS`, :func:`negatives_for_prompt`).
* **Own-prompt negatives** (Table 9): a prompt that writes near-misses trains on its own
  (``negatives: own``), so every rung of the prompt ladder is one cell (:data:`LADDER`).
* **Contrasts** (Table 1; Tables 9 and 12): the gaps are declared in ``params.yaml``
  (``contrasts``, each ``"arm - arm"``, read by :func:`parse_contrast`); each gap also enters
  a difference-in-differences against the real-duplicate side (Section 4, Appendix A).
* **Evaluation roles and scoring rules** (Section 3, Appendix A, Table 5): what a declared
  evaluation's ``role`` and ``rule`` mean (:data:`EVAL_ROLES`; the rules in one registry,
  :data:`recipematch.metrics.SCORING_RULES`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from recipematch.errors import RecipematchError, short_repr

#: The MELD attack's row sets (Section 6, Appendix D), each a pair-file key written by the
#: ``attack@<key>`` stage from released (or regenerated) rows: ``meld9`` on MELD's own nine
#: framing pairs, ``meld_heldout`` on 27 other field pairs none of whose names match a MELD
#: subfield, ``meld9alt`` under the rewritten prompt, ``meld9altm`` the same prompt with meld9's
#: procedure matched. Each row carries three same-framing statements as negatives.
MELD_ATTACKS = ("meld9", "meld_heldout", "meld9alt", "meld9altm")
#: The system prompt each MELD row set was generated under (Appendix D; the user turns,
#: ``meld_generate.user_first`` / ``user_later``, are shared): the reconstructed procedure, or
#: the rewritten-prompt control.
MELD_ATTACK_SYSTEM = {"meld9": "meld_generate", "meld_heldout": "meld_generate", "meld9alt": "meld_altprompt",
                      "meld9altm": "meld_altprompt"}
#: The SABER-Math attack's row sets (Section 6, Appendix D), written by the ``attack@<key>``
#: stage from released rows: ``saber_summary``, the summary channel (anchor = a source problem,
#: positive = its core-idea summary, negatives = other problems' summaries), and
#: ``saber_document``, the document channel built from the same summaries by SABER-Math's own
#: relevance rule (anchor = a source problem, positive = another problem whose summary's word
#: Jaccard with the anchor's exceeds 0.211, negatives = problems at or below it); the release
#: has no document-channel rows.
SABER_ATTACKS = ("saber_summary", "saber_document")
#: the prompt the summaries were written under: SABER-Math's core-idea prompt, byte for byte (Appendix F)
SABER_ATTACK_PROMPT = "saber_core_idea"
#: the ``channel`` value of a summary-channel row in the release
SABER_ATTACK_CHANNEL = "saber_summary"
#: the model that wrote the released summaries (Appendix D: Qwen3-32B-AWQ in place of SABER-Math's GPT-OSS-120B)
SABER_ATTACK_MODEL = "Qwen/Qwen3-32B-AWQ"
#: every attack row set a params ``attacks`` entry may name
ATTACKS = MELD_ATTACKS + SABER_ATTACKS
#: Generators of positives and the pair-file key each reads (paper Tables 11–12; the MELD
#: attack's row sets, Appendix D).
POSITIVES = {"cas": "cas", "d1": "d1_recipe", "d2": "d2_paraphrase", "d3": "d3_style", "d4": "d4_restatement",
             "d5": "d5_survey", "bt": "bt", "bt3": "bt3", **{k: k for k in ATTACKS}}
#: Negatives and the pair-file key they come from (``none`` attaches nothing; ``own``: the
#: near-misses written by the positives' own prompt, in the positives' pair file, Table 9).
NEGATIVES = {"none": None, "cas": "cas", "recipe": "d1_recipe", "unrelated": "unrelated_negatives", "own": "own"}
#: ``own`` where it names a cell that already has a name: CAS rows' own negatives are the CAS
#: counterexamples, D1's own near-misses are the recipe prompt's (Tables 11–12).
_OWN_ALIAS = {"cas": "cas", "d1": "recipe"}
VOLUMES = ("matched", "full")
#: Prompts whose answers carry near-misses (Section 3: D1–D3 ask for 1 positive and up to 3
#: near-misses; the unrelated near-miss prompt writes near-misses; D4 and D5 ask for
#: positives only).
NEAR_MISS_PROMPTS = frozenset({"d1_recipe", "d2_paraphrase", "d3_style", "unrelated_negatives"})
#: Pair files whose rows carry negatives of their own (``negatives: own``): the near-miss
#: prompts', the MELD attack's (same-framing statements) and the SABER attack's (other
#: problems' summaries), Appendix D.
OWN_NEGATIVES = NEAR_MISS_PROMPTS | frozenset(ATTACKS)


@dataclass(frozen=True)
class CellSpec:
    """One cell of the factorial.

    ``negatives="own"`` takes the near-misses the positives' own prompt wrote (D2, D3: the
    Table 9 rungs); for ``cas`` and ``d1`` it is the same cell as ``cas`` and ``recipe``
    negatives and is stored as those, so one cell has one name.

    Raises:
        RecipematchError: an unknown positives, negatives or volume value, or ``own`` for
            positives whose generator writes no near-misses (D4, D5, back-translation).
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
        if self.negatives == "own":
            if self.positives in _OWN_ALIAS:
                object.__setattr__(self, "negatives", _OWN_ALIAS[self.positives])
            elif POSITIVES[self.positives] not in OWN_NEGATIVES:
                raise RecipematchError(
                    f"negatives=own: positives={self.positives} has no near-misses of its own (its generator "
                    f"'{POSITIVES[self.positives]}' writes positives only); choose negatives from "
                    f"{sorted(n for n in NEGATIVES if n != 'own')}")

    @property
    def negatives_key(self) -> str | None:
        """The pair-file key the negatives come from (``None`` for ``none``)."""
        return POSITIVES[self.positives] if self.negatives == "own" else NEGATIVES[self.negatives]

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
        return POSITIVES[self.positives] == self.negatives_key

    def inputs(self) -> list[str]:
        """Pair-file keys this cell reads (the reference's CAS file for ``matched``)."""
        keys = [POSITIVES[self.positives]]
        neg = self.negatives_key
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
    # Table 9: the middle rungs of the prompt ladder, each on its own prompt's near-misses
    "d2_own": CellSpec("d2", "own"),
    "d3_own": CellSpec("d3", "own"),
    # Tables 11-12: the rest of the grid (the reference's CAS counterexamples; LLM near-misses
    # at the recipe arm's volume)
    "d5_unrelated": CellSpec("d5", "unrelated", "full"),
    "d5_recipe": CellSpec("d5", "recipe", "full"),
    "bt3": CellSpec("bt3", "none"),
    "bt3_unrelated": CellSpec("bt3", "unrelated", "full"),
    "bt3_recipe": CellSpec("bt3", "recipe", "full"),
    # Section 6, Appendix D: the MELD attack's arms, each on its rows' own same-framing negatives
    "meld9": CellSpec("meld9", "own"),
    "meld_heldout": CellSpec("meld_heldout", "own"),
    "meld9alt": CellSpec("meld9alt", "own"),
    "meld9altm": CellSpec("meld9altm", "own"),
    # Section 6, Appendix D: the SABER attack's summary channel, on other problems' summaries
    "saber_summary": CellSpec("saber_summary", "own"),
    # Section 6, Appendix D: the SABER attack's document channel, summary-Jaccard partners as positives
    "saber_document": CellSpec("saber_document", "own"),
}
"""Named cells (paper Tables 1, 9, 11 and 12). Any of these names can be listed in ``arms``."""

#: Table 9, the rewriter-prompt ladder: (rung label, positives, negatives) from the verified
#: arm (CAS, for reference) and the prompt farthest from the benchmark's (D4, D5: positives
#: only, so no negatives) to the benchmark's own (D1 = the recipe arm); D2 and D3 train on
#: their own prompts' near-misses. The untrained base is the row above them.
LADDER = (
    ("CAS (verified arm)", "cas", "cas"),
    ("D4: restatement, unrelated prompt", "d4", "none"),
    ("D5: survey prompt", "d5", "none"),
    ("D3: rewrite in a different style", "d3", "own"),
    ("D2: paraphrase of the benchmark's prompt", "d2", "own"),
    ("D1: the benchmark's prompt (recipe arm)", "d1", "recipe"),
)

#: Tables 11-12: the factorial's rows (positives) and columns (negatives, with the volume
#: where it matters), with the labels the report prints.
GRID_POSITIVES = (("cas", "CAS near-copies"), ("bt", "back-translated"), ("bt3", "back-translated, 3 hops"),
                  ("d4", "D4 (recipe-free)"), ("d5", "D5 (recipe-free, survey)"), ("d1", "D1 (recipe)"),
                  ("d2", "D2 (paraphrase)"), ("d3", "D3 (style)"))
GRID_NEGATIVES = ((("none", None), "none"), (("cas", None), "CAS counterexamples"),
                  (("unrelated", "matched"), "unrelated-prompt near-misses, matched"),
                  (("unrelated", "full"), "unrelated-prompt near-misses, full"),
                  (("recipe", "matched"), "recipe-prompt near-misses, matched"),
                  (("recipe", "full"), "recipe-prompt near-misses, full"),
                  (("own", None), "own prompt's near-misses"))


def grid_position(spec: CellSpec) -> tuple[str, tuple[str, str | None]]:
    """Where a cell sits in the factorial (Tables 11-12): ``(positives, (negatives, volume))``,
    volume ``None`` where it does not matter (no negatives, CAS negatives, own negatives).
    D1's own near-misses are the recipe prompt's: ``d1xrecipe`` sits in the ``recipe, full``
    column, as the recipe arm does in Table 11."""
    if spec.negatives in ("none", "cas", "own"):
        return spec.positives, (spec.negatives, None)
    if spec._own:
        return spec.positives, (spec.negatives, "full")
    return spec.positives, (spec.negatives, spec.volume)


#: Exclusion-list versions (Appendix B): v1 = the gate the headline arms used (whitespace-
#: normalised text match + the duplicate evaluation's ids); v2 = corrected (also strips the
#: OCR "Problem:" header and image placeholders, unions the corpus's internal duplicates).
#: There is no "off".
GATE_VERSIONS = ("v1", "v2")

#: Every LLM prompt of the ladder (Table 9), by pair-file key.
#: The peer release's recorded pair file of each prompt it holds (paper Section 3: the D1 recipe
#: rewrites and D4 restatements the replay recordings and the embedded tiers are built from).
RELEASE_FILES = {"d1_recipe": "pairs_d1_recipe.jsonl", "d4_restatement": "pairs_d4_unrelated.jsonl"}
#: The subfolder of the evalsets stage's output that holds the MathNet-Retrieve tiers of a local
#: copy (``data.retrieve``), one BEIR folder per tier (paper Section 3).
MATHNET_RETRIEVE_DIR = "mathnet_retrieve"

LLM_PROMPTS = ("d1_recipe", "d2_paraphrase", "d3_style", "d4_restatement", "d5_survey", "unrelated_negatives")


def negatives_for_prompt(prompt: str, n_neg: int) -> int:
    """How many near-misses a request under ``prompt`` asks for: ``n_neg`` for a prompt in
    :data:`NEAR_MISS_PROMPTS`, else 0 (D4, D5: positives only; Section 3)."""
    return n_neg if prompt in NEAR_MISS_PROMPTS else 0


#: Rows of the report that are not trained arms; a contrast may name them.
BASELINES = ("base", "bm25")


def parse_contrast(text: str) -> tuple[str, str]:
    """One declared contrast, ``"a - b"`` (the gap a minus b, Table 1), as ``(a, b)``.

    Args:
        text: two arm names joined by ``-`` (blanks around it optional), e.g.
            ``"recipe - verified"``.

    Raises:
        RecipematchError: not exactly two non-empty names, or the same name twice.
    """
    parts = [x.strip() for x in text.split("-")] if isinstance(text, str) else []
    if len(parts) != 2 or not all(parts):
        raise RecipematchError(f"a contrast is 'arm - arm' (two arm names joined by '-'), got {text!r}")
    if parts[0] == parts[1]:
        raise RecipematchError(f"contrast {text!r} sets an arm against itself")
    return parts[0], parts[1]

#: What an evaluation's ``role`` means (Section 3; Table 6 for in-family scores).
EVAL_ROLES = {
    "benchmark": "LLM-built: gold documents written by a generator under the benchmark's recipe",
    "real": "no generator wrote it (real duplicates, human-written pairs): the ability the benchmark claims",
    "in_family": "built by an arm's own generator (e.g. the CAS near-miss probe); not read as evidence",
    "diagnostic": "not one of the paper's sets (e.g. the tier without near-misses): scored and reported "
                  "below the others, never in Table 1's benchmark rows or a DiD",
    "external": "a benchmark no one in the project built (Section 6, Tables 20 and 22): scored by its own "
                "graded measures, reported in its own table, never in Table 1 or a DiD",
}
#: The two sides of every DiD and of Tables 9 and 12, in that order: the benchmark's gain less the
#: gain on sets no generator wrote (Section 4); the other roles never enter a DiD.
DID_ROLES = ("benchmark", "real")
#: The released language tag of a gold whose language is not known: it counts as another
#: language under the ``crosslingual_strict`` rule (Section 3, Appendix A).
UNKNOWN_LANG = "unknown"
#: Which corpus entry is a query's own and masked (Section 3: "a query's own corpus entry is
#: masked"): ``id_and_text`` (default) the entry with the query's id and the query's text;
#: ``id`` the entry with the query's id; ``none`` nothing. Meanings in
#: :mod:`recipematch.retrieval.selfmask`.
SELF_MASK_RULES = ("id_and_text", "id", "none")
#: nDCG's gain functions (Section 6; :mod:`recipematch.graded`): ``linear`` (trec_eval's, gain =
#: grade) or ``exponential`` (gain = 2**grade - 1, the convention of SABER-Math's metric code)
GAINS = ("linear", "exponential")
#: the per-query column of a graded measure in a scored frame: ``measure:<library name>``
MEASURE_PREFIX = "measure:"
#: each external loader's subsets (Section 6, Table 20): ImpliRet's six ``<style>__<category>``
#: files (two styles x three categories), BRIGHT's two math theorem splits, MELD's pairs-only
#: protocol (Appendix A: each statement queries the others, gold = its partner), MIRB's
#: natural-language tasks (Table 22) and SABER-Math's settings (a reranking benchmark)
EXTERNAL_SUBSETS = {
    "impliret": tuple(f"{s}__{c}" for s in ("unispeaker", "multispeaker") for c in ("arithmetic", "temporal", "wknow")),
    "bright": ("theoremqa_theorems", "aops"),
    "meld": ("pairs_only",),
    # Table 22: MIRB's eleven natural-language tasks, by MIRB's task ids
    "mirb": ("msedup", "modup", "mseqa", "proofwikiqa", "stacksqa", "proofwikips", "stacksps", "realanalysisps",
             "numbertheoryps", "mseformula", "wikiformula"),
    # SABER-Math's three settings, <query text>-<document text> (its Table 4; statement-full is its Table 1's)
    "sabermath": ("statement-full", "statement-statement", "full-full"),
}


def soup_label(arm: str, alpha: str) -> str:
    """The row name of an arm's WiSE-FT soup at ``alpha`` (Appendix E; the text DVC passes
    from ``remedies.soup_alphas``): ``recipe@soup0.5``."""
    return f"{arm}@soup{alpha}"


def mix_label(arm: str, fraction: str) -> str:
    """The row name of an arm retrained with replay rows at ``fraction`` of its training split
    (Appendix E, Table 19's mixing in data space; the text DVC passes from
    ``remedies.replay_fractions``): ``verified@mix0.2``."""
    return f"{arm}@mix{fraction}"


def remedy_labels(arms, soup_alphas, replay_fractions) -> list[str]:
    """Every remedy row of Table 19 in report order: per arm its soups, then its mixes
    (Appendix E). The labels are the folder names the soup and mix stages write."""
    return [*(soup_label(a, str(x)) for a in arms for x in soup_alphas),
            *(mix_label(a, str(x)) for a in arms for x in replay_fractions)]


def missing_input_message(spec: CellSpec, key: str) -> str:
    """Which part of the cell needs pair file ``key``, and who writes that file."""
    if key == POSITIVES[spec.positives]:
        which, val = "positives", spec.positives
    elif key == spec.negatives_key:
        which, val = "negatives", spec.negatives
    else:
        which, val = "volume", spec.volume
    if key in LLM_PROMPTS:
        how = f"the llm stage of prompt '{key}' writes it: add {key} to llm.prompts (replay needs its recordings)"
    elif key in ("bt", "bt3"):
        how = "the back-translation stage writes it"
    elif key in MELD_ATTACKS:
        how = (f"the attack@{key} stage writes it from released rows: declare attacks.{key}.rows in params.yaml "
               f"(the peer's release: data/meld_attack/pairs_{key.removeprefix('meld_')}.jsonl)")
    elif key in SABER_ATTACKS:
        how = (f"the attack@{key} stage writes it from released rows: declare attacks.{key}.rows in params.yaml "
               "(the peer's release: data/saber_attack/pairs_summary_channel.jsonl"
               + ("; the document channel is built from its summaries)" if key == "saber_document" else ")"))
    else:
        how = "the verified (computer-algebra) stage writes it"
    return (f"no input for {which}={val} of cell {spec.name}: pair file '{key}' ({key}.jsonl) "
            f"is not built in this configuration; {how}")


#: the lexical routes' tokens (the candidate design: lowercased ``[a-z0-9]+``); a pattern is
#: refused when it matches the empty string or has more than one capturing group
def check_token_pattern(pattern: str, where: str = "token_pattern") -> re.Pattern:
    """Compile a token regex and refuse one that matches the empty string or has more than one
    capturing group (scikit-learn's tokenizer would then split on nothing, or refuse).

    Raises:
        RecipematchError: naming ``where``.
    """
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise RecipematchError(f"{where}: not a regular expression ({e}): {short_repr(pattern, 80)}") from None
    if rx.fullmatch(""):
        raise RecipematchError(f"{where}: {short_repr(pattern, 80)} matches the empty string; a token needs a character")
    if rx.groups > 1:
        raise RecipematchError(f"{where}: {short_repr(pattern, 80)} has {rx.groups} capturing groups; use at most one")
    return rx
