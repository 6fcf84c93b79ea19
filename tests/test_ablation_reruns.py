"""The design card's ablations retrain the cell under test and nothing else (paper Tables 11-12):
``dvc exp run -S negatives=recipe`` and ``-S positives=cas`` on the default rerun exactly the
cell's own stages, its training included, plus the statistics and the report.

Which stages rerun is computed the way DVC decides it: a stage reruns when a params key it
declares changed, or when a file it depends on changed, and then every stage downstream of it
(DVC's own stage graph of this project's ``dvc.yaml``, read with the default ``params.yaml``).
The changed files are found by running the two cheap stages that declare the cell's params
(``specs`` and ``backtranslate``) under both params and comparing their outputs byte for
byte; DVC reruns a stage whose params changed, but its dependents only when its outputs did."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest

from conftest import stage_paths

from recipematch.config import load_yaml, parse_params
from recipematch.io import sha256_file
from recipematch.pipeline import backtranslate, specs

ROOT = Path(__file__).resolve().parents[1]
#: the stages the cell under test owns, plus what reads every arm (statistics, style, hit accounting, report)
CELL_STAGES = {"cells@cell", "validate@cell", "train@cell", "evaluate@cell", "stats", "style", "hits", "report"}


@pytest.fixture(scope="module")
def graph():
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        g = repo.index.graph
        stages = {}
        for s in g.nodes:
            deps, params = [], set()
            for d in s.deps:
                if hasattr(d, "params") and d.def_path.endswith(".yaml") and d.__class__.__name__ == "ParamsDependency":
                    params.update(d.params or ())
                else:
                    deps.append(d.def_path)
            stages[s.addressing] = {"deps": deps, "params": params}
        edges = [(a.addressing, b.addressing) for a, b in g.edges]  # dependent -> dependency
    return stages, nx.DiGraph(edges)


#: stages run here under both params, their outputs compared (both are cheap: no model, no data)
MEASURED = {"specs": specs, "backtranslate": backtranslate}


def _outputs(tmp_path: Path, raw: dict) -> dict[str, str]:
    p = parse_params(raw)
    for name, mod in MEASURED.items():
        mod.run(p.view(mod.PARAMS), stage_paths(tmp_path, name, raw))
    return {str(f.relative_to(tmp_path)): sha256_file(f) for f in sorted(tmp_path.rglob("*")) if f.is_file()}


def _covers(dep: str, path: str) -> bool:
    return dep == path or path.startswith(dep.rstrip("/") + "/")


def reruns(stages: dict, g: nx.DiGraph, changed_params: set[str], changed_files: set[str]) -> set[str]:
    """Stages DVC reruns: those declaring a changed params key (or its section), and those
    depending on a changed file, with everything downstream of them. A params-only stage of
    :data:`MEASURED` propagates only through ``changed_files`` (its measured outputs); any
    other params-only stage is taken to change its outputs (everything downstream reruns)."""
    by_params = {n for n, s in stages.items()
                 if any(k == c or c.startswith(k + ".") for k in s["params"] for c in changed_params)}
    by_files = {n for n, s in stages.items() if any(_covers(d, f) for d in s["deps"] for f in changed_files)}
    out = by_params | by_files
    for name in by_files | (by_params - set(MEASURED)):
        if name in g:
            out |= nx.ancestors(g, name)  # edges point from a stage to what it depends on
    return out


@pytest.mark.parametrize("override", [{"negatives": "recipe"}, {"positives": "cas"}])
def test_the_design_cards_ablation_retrains_the_cell_and_nothing_else(tmp_path, graph, override):
    stages, g = graph
    raw = load_yaml(ROOT / "params.yaml")
    assert "cell" in raw["arms"], "the default must train the cell under test"
    before = _outputs(tmp_path / "a", raw)
    after = _outputs(tmp_path / "b", {**raw, **override})
    assert set(before) == set(after)
    changed = {f for f in before if before[f] != after[f]}
    # every other arm's spec and the back-translation status keep their bytes
    assert changed == {"artifacts/specs/cell.json"}
    (key,) = override
    rerun = reruns(stages, g, {key}, changed)
    # the cheap stages that read the cell definition to decide whether they have work
    # (back-translation writes only its status when no arm reads bt/bt3) also rerun, and so do
    # the candidate pools, whose dense routes include the retrained cell's checkpoint
    extra = {n for n in rerun if n not in CELL_STAGES and not n.startswith("pooling@")}
    assert extra <= {"specs", "backtranslate"}, extra
    assert CELL_STAGES <= rerun
    assert not {n for n in rerun if n.endswith(("@verified", "@recipe"))}
    assert not {"corpus", "evalsets", "gates", "verified", "evaluate_base", "evaluate_bm25"} & rerun


def test_a_seed_change_reruns_no_pair_building_stage(graph):
    """``-S train.seed=43`` draws new budget rows and retrains (each seed draws its own rows,
    Appendix A) but builds no pair file and calls no LLM."""
    stages, g = graph
    rerun = reruns(stages, g, {"train.seed"}, set())
    assert {"train@verified", "train@recipe", "train@cell"} <= rerun
    assert not {"corpus", "evalsets", "gates", "verified", "recordings", "llm@d1_recipe", "llm@d4_restatement",
                "specs", "evaluate_base", "evaluate_bm25"} & rerun
