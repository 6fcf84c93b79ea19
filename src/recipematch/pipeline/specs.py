"""Stage ``specs``: one cell spec per arm (paper Tables 1, 9, 11–12)."""

from __future__ import annotations

from dataclasses import asdict

from recipematch.config import check_arm_inputs
from recipematch.errors import RecipematchError
from recipematch.io import write_json
from recipematch.pipeline.door import StagePaths, stage
from recipematch.rules import CellSpec, NAMED_ARMS

PARAMS = ("arms", "positives", "negatives", "negatives_volume", "llm.prompts")


def arm_spec(p, arm: str):
    """The cell an arm names: a named cell, or ``cell`` = ``positives`` × ``negatives`` ×
    ``negatives_volume``.

    Raises:
        RecipematchError: an unknown arm.
    """
    if arm == "cell":
        return CellSpec(p.positives, p.negatives, p.negatives_volume)
    if arm not in NAMED_ARMS:
        raise RecipematchError(f"unknown arm {arm!r}; named arms are {sorted(NAMED_ARMS)} plus 'cell'")
    return NAMED_ARMS[arm]


def run(p, lay: StagePaths) -> dict:
    """Stage 5a: write one cell spec per arm (``artifacts/specs/<arm>.json``), so that changing
    the cell under test changes only ``cell.json`` and DVC reruns only that arm's stages.

    Raises:
        RecipematchError: an arm whose LLM pair file this configuration does not build
            (:func:`recipematch.config.check_arm_inputs`), before anything is written.
    """
    check_arm_inputs(p)
    out = {}
    for a in p.arms:
        spec = arm_spec(p, a)
        out[a] = {"arm": a, "name": spec.name, **asdict(spec)}
        write_json(lay.out / f"{a}.json", out[a])
    return out


main = stage("specs", PARAMS, reads=(), writes=("out",))(run)
