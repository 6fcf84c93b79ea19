"""MELD (paper Section 6, Table 20, Appendix A): the loader's BEIR folder, its pairs-only protocol
through the harness, the separation AUC, and the loader's refusals. The fixture is shaped like
MELD's two upstream files (adversarial_theorem_pairs_2.json, distractors_all.json)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import Hashed, stage_paths

from recipematch.errors import RecipematchError
from recipematch.external import meld, meld_attack

FIX = Path(__file__).parent / "fixtures" / "meld_mini"


@pytest.fixture()
def folder(tmp_path) -> Path:
    meld.build_folder(FIX, tmp_path / "pairs_only", revision="r1")
    return tmp_path / "pairs_only"


def _fixture():
    pairs = json.loads((FIX / meld.PAIRS_FILE).read_text())["pairs"]
    dis = json.loads((FIX / meld.DISTRACTORS_FILE).read_text())
    return pairs, dis


def test_the_folder_holds_every_statement_as_query_and_document_with_its_partner_as_gold(folder) -> None:
    from recipematch.beir import read_beir

    pairs, dis = _fixture()
    ds = read_beir(folder, "test")
    assert len(ds.corpus) == len(ds.queries) == 2 * len(pairs)
    for i, p in enumerate(pairs):
        a, b = f"p{i:03d}e1", f"p{i:03d}e2"
        assert ds.queries[a] == ds.corpus[a]["text"] == p["entry_1"]["statement"]
        assert ds.queries[b] == p["entry_2"]["statement"]
        assert ds.qrels[a] == {b: 1} and ds.qrels[b] == {a: 1}
        assert ds.query_meta[a]["cluster_id"] == ds.query_meta[b]["cluster_id"] == f"p{i:03d}"
        assert ds.query_meta[a]["partner_framing"] == p["entry_2"]["framing"]
    rows = meld.load_distractors(folder)
    assert [r["text"] for r in rows] == [s for lst in dis.values() for s in lst]
    man = json.loads((folder / "MANIFEST.json").read_text())
    assert (man["n_pairs"], man["n_distractors"], man["n_framings"], man["n_domains"]) == (6, 12, 6, 3)
    assert man["revision"] == "r1" and man["licence"].startswith("Apache-2.0")


def test_the_same_copy_gives_the_same_bytes(tmp_path) -> None:
    meld.build_folder(FIX, tmp_path / "a")
    meld.build_folder(FIX, tmp_path / "b")
    for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv", "distractors.jsonl", "MANIFEST.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()


def test_pairs_only_r_at_1_through_the_harness_is_the_protocol_computed_directly(folder) -> None:
    """Each of the 2n statements ranked against the other 2n - 1 (its own entry masked), gold
    its partner: the harness's R@1 and per-query ranks equal a direct computation."""
    from recipematch.benchmarks_data import load_set
    from recipematch.scoring import score

    bset = load_set(folder, "plain", name="meld")
    assert bset.clusters is not None and len(set(bset.clusters)) == 6
    summary, pq = score(bset, Hashed(16), ks=(1, 5))
    pairs, _ = _fixture()
    stmts = [s for p in pairs for s in (p["entry_1"]["statement"], p["entry_2"]["statement"])]
    e = Hashed(16).encode(stmts)
    sims = e @ e.T
    np.fill_diagonal(sims, -np.inf)
    partner = np.arange(len(stmts)) ^ 1
    rank = (sims > sims[np.arange(len(stmts)), partner][:, None]).sum(axis=1) + 1
    assert (pq["rank"] + 1).tolist() == rank.tolist()  # the harness's ranks count from 0
    assert summary["R@1"] == pytest.approx(100 * float(np.mean(rank == 1)))
    assert int(summary["n_queries_self_masked"]) == len(stmts)


def test_separation_auc_equals_the_mann_whitney_statistic() -> None:
    from scipy.stats import mannwhitneyu

    rng = np.random.default_rng(3)
    pos, neg = rng.normal(0.3, 1, 57), rng.normal(0, 1, 211)
    neg[:5] = pos[:5]  # ties count one half
    u = mannwhitneyu(pos, neg, alternative="two-sided").statistic
    assert meld.separation_auc(pos, neg) == pytest.approx(u / (len(pos) * len(neg)), abs=1e-12)
    assert meld.separation_auc([1.0, 2.0], [0.0, 0.5]) == 1.0
    with pytest.raises(RecipematchError, match="needs positive and negative"):
        meld.separation_auc([], [1.0])
    with pytest.raises(RecipematchError, match="not finite"):
        meld.separation_auc([np.nan], [1.0])


def test_separation_counts_partner_against_all_and_same_framing_distractors(folder) -> None:
    from recipematch.benchmarks_data import load_set

    bset = load_set(folder, "plain", name="meld")
    rows = meld.load_distractors(folder)
    got = meld.separation(bset, Hashed(16), rows)
    pairs, dis = _fixture()
    enc = Hashed(16)
    pos, neg_all, neg_same, above = [], [], [], []
    dtexts = [s for lst in dis.values() for s in lst]
    for p in pairs:
        for q, g, fr in ((p["entry_1"], p["entry_2"], p["entry_2"]["framing"]),
                         (p["entry_2"], p["entry_1"], p["entry_1"]["framing"])):
            qv, gv = enc.encode([q["statement"]])[0], enc.encode([g["statement"]])[0]
            pos.append(float(qv @ gv))
            neg_all += [float(qv @ v) for v in enc.encode(dtexts)]
            same = [float(qv @ v) for v in enc.encode(dis[fr])]
            neg_same += same
            above.append(pos[-1] > max(same))
    assert got["n_positive"] == 12 and got["n_distractors"] == 12
    assert got["auc_all"] == pytest.approx(meld.separation_auc(pos, neg_all), abs=1e-6)
    assert got["auc_same_framing"] == pytest.approx(meld.separation_auc(pos, neg_same), abs=1e-6)
    assert got["above_all_same_framing"] == pytest.approx(100 * np.mean(above), abs=1e-4)


def _copy(tmp_path: Path, pairs=None, dis=None) -> Path:
    src = tmp_path / "copy"
    src.mkdir()
    p0, d0 = _fixture()
    (src / meld.PAIRS_FILE).write_text(json.dumps({"pairs": p0 if pairs is None else pairs}))
    (src / meld.DISTRACTORS_FILE).write_text(json.dumps(d0 if dis is None else dis))
    return src


def test_a_pair_naming_an_unknown_framing_is_named_before_anything_is_written(tmp_path) -> None:
    pairs, _ = _fixture()
    pairs[3]["entry_2"]["framing"] = "homotopy type theory"
    src = _copy(tmp_path, pairs=pairs)
    with pytest.raises(RecipematchError, match=r"pairs\[3\]\.entry_2\.framing 'homotopy type theory' names no distractor pool"):
        meld.build_folder(src, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


@pytest.mark.parametrize("edit, message", [
    (lambda p, d: p[1]["entry_1"].update(statement="  "), r"pairs\[1\]\.entry_1\.statement must be a non-empty string"),
    (lambda p, d: p[0].pop("domain"), r"pairs\[0\]\.domain must be a non-empty string"),
    (lambda p, d: p[2].update(entry_2="text"), r"pairs\[2\]\.entry_2: expected an object"),
    (lambda p, d: d["algebra"].append(7), r"framing 'algebra', item 2: a distractor must be a non-empty string"),
])
def test_a_malformed_record_is_named_by_file_position_and_field(tmp_path, edit, message) -> None:
    pairs, dis = _fixture()
    edit(pairs, dis)
    src = _copy(tmp_path, pairs=pairs, dis=dis)
    with pytest.raises(RecipematchError, match=message):
        meld.build_folder(src, tmp_path / "out")


def test_a_missing_file_or_bad_json_is_one_line(tmp_path) -> None:
    src = tmp_path / "copy"
    shutil.copytree(FIX, src)
    (src / meld.DISTRACTORS_FILE).unlink()
    with pytest.raises(RecipematchError, match=r"MELD: missing files \[.*distractors_all.json"):
        meld.build_folder(src, tmp_path / "out")
    shutil.copy(FIX / meld.DISTRACTORS_FILE, src)
    (src / meld.PAIRS_FILE).write_text('{"pairs": [\n  {"domain": "x",\n')
    with pytest.raises(RecipematchError, match=r"adversarial_theorem_pairs_2.json:3: not JSON"):
        meld.build_folder(src, tmp_path / "out")
    with pytest.raises(RecipematchError, match="unknown subset"):
        meld.build_folder(FIX, tmp_path / "out", "with_distractors")


def test_the_external_stage_builds_meld_and_every_encoder_gets_its_separation(tmp_path) -> None:
    """Declared like any external set: external@meld builds the folder from the copy, the
    scoring stages add R@1 (the headline) and the separation AUC for encoders, never for BM25."""
    from conftest import REPO

    from recipematch.benchmarks_data import load_set
    from recipematch.config import load_yaml, parse_params
    from recipematch.pipeline import external
    from conftest import Outputs
    from recipematch.pipeline.evaluate import load_graded, score_models, write_results
    from recipematch.scoring import BM25

    shutil.copytree(FIX, tmp_path / "data" / "meld")
    raw = load_yaml(REPO / "params.yaml")
    raw["external"]["meld"] = {"loader": "meld", "copy": "data/meld", "subsets": ["pairs_only"], "revision": "r"}
    raw["evaluations"] = {k: v for k, v in raw["evaluations"].items() if v["role"] != "external"}
    raw["evaluations"]["meld"] = {"folder": "artifacts/external/meld/pairs_only", "rule": "plain", "role": "external",
                                  "measures": ["R@1", "R@10"]}
    p, lay = parse_params(raw), Outputs(tmp_path, raw)
    counts = external.run(p.view(external.PARAMS), stage_paths(lay.root, "external@meld", raw), name="meld")
    assert counts["subsets"]["pairs_only"]["n_pairs"] == 6
    ev = p.evaluations["meld"]
    sets = {"meld": load_set(lay.p(ev.folder), ev.rule, name="meld")}
    graded = load_graded(p, lay, sets)
    assert len(graded["meld"].distractors) == 12
    frames, per_model = score_models([("s1", Hashed(16), None)], sets, arm="x", ks=(1, 10), lay=lay, graded=graded)
    r = per_model["s1"]["meld"]
    want = meld.separation(sets["meld"], Hashed(16), graded["meld"].distractors)
    assert r["separation"] == want
    assert r["measures"]["R@1"] == pytest.approx(r["R@1"] / 100)  # single gold: the library's R@1 is our hit@1
    agg = write_results(lay.stage("evaluate_base"), "x", frames, per_model, ks=(1, 10))  # any scoring stage's folders
    assert agg["meld.separation.auc_all.mean"] == pytest.approx(want["auc_all"], abs=1e-4)
    assert "cluster" in frames["meld"][0].columns  # pairs are the resampling unit
    _, bm = score_models([("bm25", BM25, None)], sets, arm="bm25", ks=(1,), lay=lay, bm25=(1.5, 0.75), graded=graded)
    assert "separation" not in bm["bm25"]["meld"]


ATTACK = FIX / "pairs_meld9.jsonl"


def test_released_attack_rows_become_pair_rows_with_their_prompt_and_model() -> None:
    from recipematch.pairs import pair_row_problem, provenance_problems

    rows, counts = meld_attack.read_attack_rows(ATTACK, "meld9", revision="r")
    assert counts["rows_in"] == counts["rows_out"] == counts["sources"] == 4 and counts["negatives"] == 12
    assert counts["prompt"] == "meld_generate" and counts["generator_models"] == {"Qwen/Qwen3-32B-AWQ": 4}
    assert [r["source_id"] for r in rows] == sorted(r["source_id"] for r in rows)
    for r in rows:
        assert pair_row_problem(r) is None and provenance_problems(r) == []
        assert r["positive_provenance"]["prompt_sha256"] == meld_attack.attack_prompt_sha256("meld_generate")
    first = json.loads(ATTACK.read_text().splitlines()[0])
    r0 = next(r for r in rows if r["source_id"] == first["source_id"])
    assert (r0["anchor"], r0["positive"]) == (first["anchor_text"], first["positive_text"])
    assert [n["text"] for n in r0["negatives"]] == [n["text"] for n in first["negatives"]]
    # the rewritten-prompt control hashes another system prompt, the same user turns
    assert meld_attack.attack_prompt_sha256("meld_altprompt") != meld_attack.attack_prompt_sha256("meld_generate")


@pytest.mark.parametrize("edit, message", [
    (lambda r: r.pop("anchor_text"), r":2: field 'anchor_text' must be a non-empty string"),
    (lambda r: r.update(negatives=[{"txt": "x"}]), r":2: field 'negatives' must be a non-empty list of objects"),
    (lambda r: r["meta"].update(group="heldout"), r":2: field 'meta.group' is 'heldout', not this row set's 'meld9'"),
    (lambda r: r.update(source_id="meldatk-meld9-000000"), r":2: source_id 'meldatk-meld9-000000' is given twice in direction"),
    (lambda r: r["meta"].pop("generator_model"), r":2: field 'meta.generator_model'"),
])
def test_a_bad_released_row_is_named_by_file_line_and_field(tmp_path, edit, message) -> None:
    lines = ATTACK.read_text().splitlines()
    r = json.loads(lines[1])
    edit(r)
    lines[1] = json.dumps(r)
    bad = tmp_path / "rows.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecipematchError, match=message):
        meld_attack.read_attack_rows(bad, "meld9")
    bad.write_text(lines[0] + "\n{not json\n")
    with pytest.raises(RecipematchError, match=r"rows.jsonl:2: "):
        meld_attack.read_attack_rows(bad, "meld9")
    with pytest.raises(RecipematchError, match=r"attacks.meld9.rows: .*nope.jsonl does not exist .*data/meld_attack/pairs_meld9.jsonl"):
        meld_attack.read_attack_rows(tmp_path / "nope.jsonl", "meld9")


def test_a_pair_released_in_both_directions_is_one_source_with_two_rows(tmp_path) -> None:
    lines = ATTACK.read_text().splitlines()
    r = json.loads(lines[0])
    r["anchor_text"], r["positive_text"] = r["positive_text"], r["anchor_text"]
    r["meta"]["direction"] = "entry_2->entry_1"
    (tmp_path / "rows.jsonl").write_text("\n".join([*lines, json.dumps(r)]) + "\n")
    rows, counts = meld_attack.read_attack_rows(tmp_path / "rows.jsonl", "meld9")
    assert (counts["rows_out"], counts["sources"]) == (5, 4)
    assert sum(x["source_id"] == r["source_id"] for x in rows) == 2


def test_the_meld9_arm_is_a_cell_on_its_rows_own_negatives() -> None:
    from recipematch.cells import MissingInput, assemble_cell
    from recipematch.rules import NAMED_ARMS

    spec = NAMED_ARMS["meld9"]
    assert spec.name == "meld9xown" and spec.inputs() == ["meld9"]
    rows, _ = meld_attack.read_attack_rows(ATTACK, "meld9")
    pool, counts = assemble_cell(spec, {"meld9": rows}, seed=0)
    assert counts["rows_out"] == 4 and all(len(r["negatives"]) == 3 for r in pool)
    with pytest.raises(MissingInput, match=r"pair file 'meld9' .*declare attacks.meld9.rows"):
        assemble_cell(spec, {}, seed=0)


def test_an_arm_on_an_undeclared_row_set_stops_at_the_params_with_one_line() -> None:
    from conftest import REPO

    from recipematch.config import load_yaml, parse_params

    raw = load_yaml(REPO / "params.yaml")
    raw["arms"] = ["verified", "recipe", "cell", "meld_heldout"]
    with pytest.raises(RecipematchError, match=r"arms\[meld_heldout\]: no input for positives=meld_heldout .*"
                                               r"declare attacks.meld_heldout.rows .*pairs_heldout.jsonl"):
        parse_params(raw)
    raw["attacks"]["meld_heldout"] = {"rows": "/abs/rows.jsonl"}
    with pytest.raises(RecipematchError, match=r"attacks.meld_heldout.rows must be a file inside the project"):
        parse_params(raw)
    raw["attacks"] = {"meld10": {"rows": "x.jsonl"}}
    with pytest.raises(RecipematchError, match=r"attacks.meld10: unknown row set"):
        parse_params(raw)


def test_the_attack_stage_writes_the_pair_file_the_cells_stage_reads(tmp_path) -> None:
    from conftest import REPO

    from recipematch.config import load_yaml, parse_params
    from recipematch.pairs import read_pair_file
    from recipematch.pipeline import attack
    from conftest import Outputs
    from recipematch.pipeline.pair_sources import cell_pairs

    (tmp_path / "data").mkdir()
    shutil.copy(ATTACK, tmp_path / "data" / "rows.jsonl")
    raw = load_yaml(REPO / "params.yaml")
    raw["attacks"] = {"meld9": {"rows": "data/rows.jsonl", "revision": "r"}}
    p, lay = parse_params(raw), Outputs(tmp_path, raw)
    counts = attack.run(p.view(attack.PARAMS), stage_paths(lay.root, "attack@meld9"), name="meld9")
    assert counts["rows_out"] == 4 and json.loads((lay.metrics / "attacks" / "meld9.json").read_text()) == counts
    assert cell_pairs(lay, "meld9") == read_pair_file(lay.pairs / "meld9.jsonl") and len(cell_pairs(lay, "meld9")) == 4
    first = (lay.pairs / "meld9.jsonl").read_bytes()
    attack.run(p.view(attack.PARAMS), stage_paths(lay.root, "attack@meld9"), name="meld9")
    assert (lay.pairs / "meld9.jsonl").read_bytes() == first  # byte-identical rerun
    with pytest.raises(RecipematchError, match=r"--name 'meld9alt': not declared"):
        attack.run(p.view(attack.PARAMS), stage_paths(lay.root, "attack@meld9"), name="meld9alt")


@pytest.mark.parametrize("edit, message", [
    (lambda p, d: d.update(algebra=[]), r"framing 'algebra' has no distractors"),
    (lambda p, d: p[0]["entry_1"].update(statement="\u200b "), r"pairs\[0\]\.entry_1\.statement must be a non-empty string"),
    (lambda p, d: p[0]["entry_2"].update(statement="x \ud800 y"), r"pairs\[0\]\.entry_2\.statement must be a non-empty string \(UTF-8"),
])
def test_input_that_would_skew_the_separation_or_break_the_write_is_refused(tmp_path, edit, message) -> None:
    pairs, dis = _fixture()
    edit(pairs, dis)
    src = _copy(tmp_path, pairs=pairs, dis=dis)
    with pytest.raises(RecipematchError, match=message):
        meld.build_folder(src, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_a_bom_is_read_and_unreadable_json_is_one_line(tmp_path) -> None:
    src = tmp_path / "copy"
    shutil.copytree(FIX, src)
    (src / meld.PAIRS_FILE).write_bytes(b"\xef\xbb\xbf" + (FIX / meld.PAIRS_FILE).read_bytes())
    assert meld.build_folder(src, tmp_path / "out")["n_pairs"] == 6
    (src / meld.PAIRS_FILE).write_text('{"pairs": [{"domain": ' + "1" * 5000 + "}]}")
    with pytest.raises(RecipematchError, match=r"adversarial_theorem_pairs_2.json: not usable JSON"):
        meld.build_folder(src, tmp_path / "out2")
    (src / meld.PAIRS_FILE).write_text("[" * 100000)
    with pytest.raises(RecipematchError, match=r"adversarial_theorem_pairs_2.json: (not usable JSON|.*not JSON)"):
        meld.build_folder(src, tmp_path / "out2")
    # the temp folder beside the output may not be the input either
    with pytest.raises(RecipematchError, match="overlaps the input"):
        meld.build_folder(tmp_path / "x.partial", tmp_path / "x")


@pytest.mark.parametrize("edit, message", [
    (lambda r: r.update(negatives=[]), r":2: field 'negatives' must be a non-empty list"),
    (lambda r: r["meta"].pop("group"), r":2: field 'meta.group' is None, not this row set's 'meld9'"),
    (lambda r: r["meta"].update(direction=["a"]), r":2: field 'meta.direction' must be a string"),
    (lambda r: r["meta"].update(round=float("nan")), r":2: field 'meta.round' must be an integer"),
])
def test_a_released_row_that_would_train_or_record_the_wrong_thing_is_refused(tmp_path, edit, message) -> None:
    lines = ATTACK.read_text().splitlines()
    r = json.loads(lines[1])
    edit(r)
    lines[1] = json.dumps(r)
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RecipematchError, match=message):
        meld_attack.read_attack_rows(tmp_path / "rows.jsonl", "meld9")
    with pytest.raises(RecipematchError, match=r"is a folder, not the rows file"):
        meld_attack.read_attack_rows(tmp_path, "meld9")


def test_the_keys_dvc_yaml_builds_stages_from_are_required_and_copies_stay_out_of_outputs() -> None:
    from conftest import REPO

    from recipematch.config import load_yaml, parse_params

    for key in ("attacks", "external"):
        raw = load_yaml(REPO / "params.yaml")
        raw.pop(key)
        with pytest.raises(RecipematchError, match=key):
            parse_params(raw)
    raw = load_yaml(REPO / "params.yaml")
    raw["external"]["impliret"]["copy"] = "artifacts/external/impliret"
    with pytest.raises(RecipematchError, match=r"external.impliret.copy must not lie under artifacts/external/"):
        parse_params(raw)
    raw = load_yaml(REPO / "params.yaml")
    raw["attacks"]["meld9"]["rows"] = "data/\nrows.jsonl"
    with pytest.raises(RecipematchError, match=r"attacks.meld9.rows must be a file inside the project"):
        parse_params(raw)
