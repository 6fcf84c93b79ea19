"""Stage ``evalsets``: hold out evaluation sources and write the embedded default's evaluation
sets as BEIR folders (paper Section 3, Table 1, Table 6, Appendix A):

* ``tier_d1`` / ``tier_d4``: tiers shaped like MathNet-Retrieve's: one shared corpus (the
  whole corpus plus, per held-out source, its D1 rewrite, its D1 near-misses and its D4
  restatement; ``evalsets.corpus_docs`` = 0), the same queries, the gold the D1 rewrite
  (the headline tier) or the D4 restatement; ``gold_only``: the diagnostic without
  near-misses (:mod:`recipematch.evalsets`);
* ``crosslingual``: the paper's real cross-language reprints (sample corpus ∪ golds ∪ query
  rows, 3,245 documents);
* ``samelang``: the same-language reprints (Appendix A, Table 5), searched the same way,
  written when the release holds ``samelang_eval/``;
* ``probe`` / ``probe_only``: the generator-free near-miss probe;
* ``mathnet_retrieve/<tier>``: when ``data.retrieve`` names a local MathNet-Retrieve copy,
  each of its tiers (easy, medium, hard; 117,088 documents at full size), read with the
  MathNet-Retrieve loader and written as BEIR folders with each query's near-misses.

With ``data.source`` other than ``sample`` (the full MathNet corpus, or any pool) the
cross-language set searches the corpus stage's whole table, as the paper does.

Which of these are scored, under which rule and role, is declared in ``params.yaml``
``evaluations``. ``evalsets.n_heldout: 0`` builds none of them (an audit of a user's benchmark
declares its own folders): only an empty held-out list is written.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict

from recipematch.benchmarks_data import load_samelang
from recipematch.benchmarks_build import build_crosslingual_folder, write_mathnet_retrieve
from recipematch.beir import write_beir
from recipematch.errors import RecipematchError
from recipematch.evalsets import build_probe, check_release_rows, choose_heldout, sample_search_corpus, write_tiers
from recipematch.io import read_jsonl_strict, write_json
from recipematch.pipeline.graph import require_declared_dep
from recipematch.pipeline.door import StagePaths, stage, write_run_record
from recipematch.pipeline.inputs import corpus_rows
from recipematch.rules import MATHNET_RETRIEVE_DIR, RELEASE_FILES

PARAMS = ("evalsets", "data.source", "data.retrieve")

#: dependencies dvc.yaml must list for this stage besides its code, when the param they name
#: is set (:mod:`recipematch.pipeline.deps`); an empty ``data.retrieve`` lists none
DATA_DEPS: tuple[str, ...] = ("${data.retrieve}",)


def run(p, lay: StagePaths) -> dict:
    """Stage 2: hold out evaluation sources; write the tiers, the cross-language set and the probe."""
    cfg = p.evalsets
    retrieve = p.data.retrieve
    if retrieve:
        # before any work: DVC must hash the folder, or a changed copy would not rerun the stage
        require_declared_dep(lay.root, "evalsets", "${data.retrieve}", retrieve)
    if cfg.n_heldout == 0:  # an audit: the benchmark is a declared folder, no embedded tier is built
        write_json(lay.out / "heldout.json", {"heldout_sources": []})
        counts = {"heldout_sources": 0}
        write_json(lay.metrics, counts)
        write_run_record(lay.out, "evalsets", asdict(cfg), {}, counts)
        return counts
    corpus = corpus_rows(lay)
    ids = {r["doc_id"] for r in corpus}
    d1 = read_jsonl_strict(lay.release / RELEASE_FILES["d1_recipe"])
    d4 = read_jsonl_strict(lay.release / RELEASE_FILES["d4_restatement"])
    probe = read_jsonl_strict(lay.release / "probe_sample.jsonl")
    # every release row is checked (one line naming the file, row and field) before anything is written
    for rows, name in ((d1, "d1_recipe"), (d4, "d4_restatement")):
        check_release_rows(rows, f"{RELEASE_FILES[name]}", ("source_id", "positive_text"))
    check_release_rows(probe, "probe_sample.jsonl", ("source_id", "source_text", "positive_text"))
    sl_release = lay.release / "samelang_eval"
    if not sl_release.is_dir():
        raise RecipematchError(f"{sl_release} is missing (or not a folder): the same-language reprint set "
                               "(paper Appendix A, Table 5) is part of the release data; restore it with "
                               "`dvc pull data.dvc`")

    def sources(rows):
        return {r["source_id"] for r in rows if r["source_id"] in ids}

    # both tiers ask the same queries (MathNet-Retrieve, Section 3): a held-out source has both rewrites
    candidates = sorted(sources(d1) & sources(d4))
    if cfg.n_heldout > len(candidates):
        raise RecipematchError(f"evalsets.n_heldout={cfg.n_heldout} exceeds the {len(candidates)} corpus sources "
                               f"with a recorded D1 rewrite and D4 restatement; lower it")
    heldout = choose_heldout(candidates, cfg.n_heldout, seed=cfg.seed)
    out = lay.out
    full = None if p.data.source == "sample" else corpus
    # the same-language set first: its slice flags are checked before any other folder is written
    sl = build_crosslingual_folder(lay.release, out / "samelang", corpus_rows=full, subdir="samelang_eval")
    try:
        load_samelang(out / "samelang")
    except RecipematchError as e:
        shutil.rmtree(out / "samelang", ignore_errors=True)
        raise RecipematchError(f"{e} (fix it in {sl_release / 'queries.jsonl'}, the file this folder is built from)") from None
    must = [*heldout, *(q["source_id"] for q in probe)]
    try:
        search = sample_search_corpus(corpus, cfg.corpus_docs, seed=cfg.seed, must_include=must)
    except ValueError as e:
        raise RecipematchError(f"evalsets.corpus_docs: {e}") from None
    tiers = write_tiers(out, search, {"d1": d1, "d4": d4}, heldout)
    xl = build_crosslingual_folder(lay.release, out / "crosslingual", corpus_rows=full)
    mr = write_mathnet_retrieve(lay.root / retrieve, out / MATHNET_RETRIEVE_DIR) if retrieve else {}
    write_beir(out / "probe", *build_probe(search, probe))
    write_beir(out / "probe_only", *build_probe(None, probe))
    write_json(out / "heldout.json", {"heldout_sources": heldout})
    counts = {"heldout_sources": len(heldout), "search_corpus_docs": len(search),
              **{f"tiers.{k}": v for k, v in tiers.items()},
              **{f"crosslingual.{k}": v for k, v in xl.items()},
              **{f"samelang.{k}": v for k, v in sl.items()},
              "probe.queries": len(probe), "probe.negatives": sum(len(q.get("negatives") or ()) for q in probe),
              **{f"mathnet_retrieve.{k}": v for k, v in mr.items()}}
    write_json(lay.metrics, counts)
    inputs = {"corpus": lay.corpus / "corpus.parquet", "d1": lay.release / RELEASE_FILES["d1_recipe"],
              "d4": lay.release / RELEASE_FILES["d4_restatement"],
              "probe": lay.release / "probe_sample.jsonl", "crosslingual": lay.release / "crosslingual_eval"}
    inputs["samelang"] = sl_release
    config = asdict(cfg)
    if retrieve or p.data.source != "sample":
        # the default's run record keeps its earlier bytes; a full-data run records its sources
        config = {**config, "data.source": p.data.source, "data.retrieve": retrieve}
    if retrieve:
        inputs["mathnet_retrieve"] = lay.root / retrieve
    write_run_record(out, "evalsets", config, inputs, counts)
    return counts


main = stage("evalsets", PARAMS, reads=("corpus", "release"), writes=("out", "metrics"))(run)
