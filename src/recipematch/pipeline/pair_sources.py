"""Where the cells stage finds each pair file: the plain pair files, the back-translated
positives (paper Appendix C, the non-LLM paraphrase control) and the two-judge files
(Section 3, Appendix C, the two-judge control).

Kept small on purpose: the cells stage imports this module, so it must not pull the LLM or
translation code into the cells stage's dependencies.

* ``bt`` / ``bt3`` (one and three back-translation hops) come from the ``backtranslate``
  stage's folder ``artifacts/backtranslate/``; when that stage had no model it wrote only
  ``status.json`` saying why, and a cell that needs the file stops with that reason.
* an LLM prompt's rows, under ``judge2.cells: both``, come from the ``judge2@<prompt>``
  stage's ``artifacts/judge2_cells/<prompt>.jsonl`` (the rows both judges accept; that stage
  leaves the file empty under ``judge2.cells: first``).
* everything else from ``artifacts/pairs/<key>.jsonl``.
"""

from __future__ import annotations

from pathlib import Path

from recipematch.errors import RecipematchError
from recipematch.io import read_json
from recipematch.pairs import read_pair_file
from recipematch.pipeline.door import StagePaths
from recipematch.pipeline.inputs import pair_path, read_pairs
from recipematch.rules import LLM_PROMPTS

#: Back-translation pair-file key -> hops (paper Appendix C: one round trip; three in sequence).
BT_HOPS = {"bt": 1, "bt3": 3}


def _status(path: Path, stage: str) -> dict:
    if not path.is_file():
        raise RecipematchError(f"{path} does not exist: run the {stage} stage first (`dvc repro` runs it)")
    return read_json(path)


def cell_pair_path(lay: StagePaths, key: str, *, judges: str = "first") -> Path:
    """The file :func:`cell_pairs` reads for ``key`` (for run records)."""
    if key in BT_HOPS:
        return pair_path(lay.backtranslate, key)
    if judges == "both" and key in LLM_PROMPTS:
        return pair_path(lay.judge2_cells, key)
    return pair_path(lay.pairs, key)


def cell_pairs(lay: StagePaths, key: str, *, judges: str = "first") -> list[dict] | None:
    """The rows of pair-file ``key`` for the cells stage (``None`` when this configuration
    produces no such file, as :func:`recipematch.pipeline.inputs.read_pairs`).

    Args:
        lay: the project layout.
        key: a pair-file key (:data:`recipematch.rules.POSITIVES` / ``NEGATIVES`` values).
        judges: ``"first"`` (the first judge's keep set) or ``"both"`` (LLM pair files
            replaced by the rows both judges accept).

    Raises:
        RecipematchError: a back-translation file the backtranslate stage could not build
            ("no back-translation model", naming ``backtranslate.model_dir``), or a
            two-judge file the judge2 stage did not write (naming ``judge2.enabled``).
    """
    if key in BT_HOPS:
        path = pair_path(lay.backtranslate, key)
        if path.is_file():
            return read_pair_file(path)
        st = _status(lay.backtranslate / "status.json", "backtranslate")
        raise RecipematchError(f"positives {key} ({BT_HOPS[key]} hop{'s' if BT_HOPS[key] > 1 else ''}): "
                               f"{st.get('reason') or 'the backtranslate stage wrote no ' + path.name}")
    if judges == "both" and key in LLM_PROMPTS:
        st = _status(lay.judge2 / key / "status.json", f"judge2@{key}")
        path = pair_path(lay.judge2_cells, key)
        if not st.get("enabled"):
            raise RecipematchError(f"judge2.cells: both, but the judge2@{key} stage wrote no two-judge file "
                                   f"({st.get('reason', 'no reason recorded')})")
        if st.get("cells") != "both" or not path.is_file():
            raise RecipematchError(f"judge2.cells: both, but {path} was written under judge2.cells: "
                                   f"{st.get('cells')}: rerun the judge2@{key} stage")
        return read_pair_file(path)
    return read_pairs(lay, key)
