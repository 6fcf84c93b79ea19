"""Input checks of ``recipematch audit init`` (:mod:`recipematch.audit`): the benchmark
folder, the organic source pool, the recipe prompt, the generator-free set, the server URL and
replayed release rows, each checked as the stage that later reads it checks it, before
anything is written. Every failure raises :class:`recipematch.errors.RecipematchError`
naming the input (file:line where there is one)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipematch.beir import doc_text
from recipematch.benchmarks_data import load_set, member_ids
from recipematch.config import server_url_problem
from recipematch.errors import RecipematchError, short_repr
from recipematch.gates import norm_v2
from recipematch.io import id_problem, iter_jsonl_strict
from recipematch.llm.prompts import load_custom_prompt
from recipematch.llm.recordings import build_recordings, release_row
from recipematch.rules import LLM_PROMPTS, RELEASE_FILES, negatives_for_prompt


def check_benchmark(folder: Path, name: str = "benchmark", rule: str = "plain") -> dict[str, int]:
    """Read a BEIR folder as recipematch's evaluate stages will (under ``rule``).

    Returns:
        ``{"queries": scored queries, "documents": corpus size, "golds": positive qrels}``.

    Raises:
        RecipematchError: missing folder/file, malformed line (file:line), qrels naming a query
            or a corpus id the folder lacks, no positive qrel.
    """
    bset = load_set(folder, rule, name=name)
    golds = sum(1 for q in bset.query_ids for s in bset.qrels.get(q, {}).values() if s > 0)
    self_gold = [q for q in bset.query_ids if q in {d for d, s in bset.qrels.get(q, {}).items() if s > 0}]
    if self_gold:
        raise RecipematchError(f"{folder}: {len(self_gold)} of {len(bset.query_ids)} queries have a gold with the "
                               f"query's own id (first: {self_gold[0]!r}); a query's own id is masked from its "
                               "ranking, so give the gold documents ids of their own")
    return {"queries": len(bset.query_ids), "documents": len(bset.corpus), "golds": golds}


def _benchmark_texts_and_ids(folder: Path) -> tuple[set[str], set[str]]:
    bset = load_set(folder, "plain", name="benchmark")
    ids = set(member_ids(bset))
    texts = {norm_v2(bset.queries[q]) for q in bset.query_ids}
    texts |= {norm_v2(doc_text(bset.corpus[d])) for d in ids if d in bset.corpus}
    return texts, ids


def read_sources(path: Path) -> dict[str, str]:
    """The organic pool as ``{id: text}`` in file order (JSONL, ``id`` or ``_id`` and ``text``
    per line; ids read as the corpus stage reads them).

    Raises:
        RecipematchError: a line that is not a JSON object with a non-empty id and text
            (file:line), or a repeated id.
    """
    out: dict[str, str] = {}
    for i, rec in iter_jsonl_strict(path):
        if not isinstance(rec, dict):
            raise RecipematchError(f"{path}:{i}: expected a JSON object {{\"id\": ..., \"text\": ...}}, "
                                   f"got {type(rec).__name__}")
        if "id" not in rec and "_id" not in rec:
            raise RecipematchError(f"{path}:{i}: each line needs an 'id' (or '_id')")
        sid = rec.get("id", rec.get("_id"))
        text = rec.get("text")
        if isinstance(sid, bool) or not isinstance(sid, (str, int)) or str(sid) == "":
            raise RecipematchError(f"{path}:{i}: the id must be a non-empty string or an integer, got "
                                   f"{type(sid).__name__} {short_repr(sid, 40)}")
        if not isinstance(text, str) or not text.strip():
            raise RecipematchError(f"{path}:{i}: source {sid!r} needs a non-empty string 'text', got "
                                   f"{type(text).__name__}")
        sid = str(sid).strip()  # as the corpus stage reads it
        if why := id_problem(sid):
            raise RecipematchError(f"{path}:{i}: source id {sid!r} {why}")
        if sid in out:
            raise RecipematchError(f"{path}:{i}: source id {sid!r} appears twice")
        out[sid] = text
    return out


def check_sources(path: Path, benchmark: Path, *, rows: int, dev_fraction: float) -> dict[str, int]:
    """Check the organic pool (JSONL, ``id`` or ``_id`` and ``text`` per line) against the
    benchmark and the budget.

    A source whose id is a benchmark query/gold id, or whose text matches a benchmark text
    after the v2 normalisation (paper Appendix B), is counted as overlapping (the gates stage
    removes it, with the n-gram and cosine gates on top). Each source supplies at most one
    row per arm (``budget.max_rows_per_source: 1``), so fewer than ``rows / (1 -
    dev_fraction)`` remaining sources cannot fill the budget.

    Returns:
        ``{"sources": n, "overlapping": n, "remaining": n}``.

    Raises:
        RecipematchError: a line that is not a JSON object with a non-empty id and text
            (file:line), a repeated id, or too few sources left for the budget.
    """
    texts, ids = _benchmark_texts_and_ids(benchmark)
    seen = read_sources(path)
    overlap = sum(1 for sid, text in seen.items() if sid in ids or norm_v2(text) in texts)
    remaining = len(seen) - overlap
    need = int(rows / (1.0 - dev_fraction)) + 1
    if remaining < need:
        raise RecipematchError(f"{path}: {overlap} of {len(seen)} sources overlap the benchmark; the {remaining} "
                               f"left cannot fill budget.rows={rows} (need at least {need} sources with a train/dev "
                               f"split of {dev_fraction}); add sources or lower --rows")
    return {"sources": len(seen), "overlapping": overlap, "remaining": remaining}


def check_recipe(recipe: str) -> tuple[str, Path | None]:
    """``recipe`` is the shipped ``d1_recipe`` or a prompt sidecar (``*.prompt.yaml``).

    Returns:
        ``(prompt name, sidecar path or None)``.

    Raises:
        RecipematchError: the sidecar's own errors (a slot the schema needs and the texts lack,
            a missing answer schema, …; :func:`recipematch.llm.prompts.load_custom_prompt`), or
            a recipe whose answer has no near-misses.
    """
    if recipe == "d1_recipe":
        return "d1_recipe", None
    if recipe in LLM_PROMPTS and not Path(recipe).exists():
        raise RecipematchError(f"--recipe {recipe}: the shipped recipe is d1_recipe (the paper's); another shipped "
                               "prompt is a control (--control), and a recipe of your own is a *.prompt.yaml sidecar")
    path = Path(recipe)
    custom = load_custom_prompt(path)
    if custom.role != "generator" or not custom.has_near_misses:
        raise RecipematchError(f"{path}: the recipe must be a generator prompt whose answer declares near_misses "
                               "(the recipe arm trains on its own near-misses)")
    return custom.name, path


def check_workdir_apart(workdir: Path, inputs: list) -> None:
    """Refuse a WORKDIR inside an input folder (copying it into itself) or an input inside
    WORKDIR, before anything is written."""
    wd = Path(workdir).resolve()
    for inp in inputs:
        if inp is None:
            continue
        src = Path(inp).resolve()
        if wd == src or wd.is_relative_to(src) or src.is_relative_to(wd):
            raise RecipematchError(f"WORKDIR {workdir} and the input {inp} overlap: give a folder outside every input")


def check_real_apart(real: Path, benchmark: Path, real_rule: str) -> None:
    """The generator-free set is read under its own rule and must share no query with the
    benchmark (same text after the v2 normalisation of paper Appendix B, whatever the ids or
    order): a shared query counts on both sides of the difference in differences and pulls it
    towards zero."""
    rset = load_set(real, real_rule, name="real")
    bset = load_set(benchmark, "plain", name="benchmark")
    bq = {norm_v2(bset.queries[q]) for q in bset.query_ids}
    shared = sum(1 for q in rset.query_ids if norm_v2(rset.queries[q]) in bq)
    if real.resolve() == benchmark.resolve() or shared:
        raise RecipematchError(f"--real {real}: {shared or len(rset.query_ids)} of its {len(rset.query_ids)} queries "
                               f"are queries of --benchmark {benchmark} (same text): the generator-free set must be "
                               "disjoint from the benchmark (real duplicates, human-written pairs), or leave --real out")


def check_base_url(url: str) -> None:
    """An http(s) URL with a host and no credential part (:func:`recipematch.config.server_url_problem`)."""
    if why := server_url_problem(url):
        raise RecipematchError(f"--base-url {why}")


def check_replay_rows(replay: Path, sources: Path, llm: Mapping[str, Any]) -> None:
    """Every released row replayed must be well formed (:func:`recipematch.llm.recordings.release_row`)
    and name a source of the pool (the recordings are keyed by source id), the first bad row
    named with its file and line; then the recordings stage's whole build
    (:func:`recipematch.llm.recordings.build_recordings`: repeated sources, near-miss counts
    per prompt, a text both positive and near-miss) runs on them with the template's ``llm``
    settings, so what init accepts the stage accepts."""
    pool = read_sources(sources)  # already checked by check_sources: one reader of the pool
    for fname in RELEASE_FILES.values():
        n = unknown = 0
        first = None
        for lineno, row in iter_jsonl_strict(replay / fname):
            try:
                sid = release_row(n, row)[0]
            except ValueError as e:
                raise RecipematchError(f"--replay {replay / fname}:{lineno}: {e}") from None
            n += 1
            if sid not in pool:
                unknown += 1
                first = first or (lineno, sid)
        if not n:
            raise RecipematchError(f"--replay {replay / fname}: no released rows")
        if unknown:
            raise RecipematchError(f"--replay {replay / fname}:{first[0]}: {unknown} of {n} rows name a source id not "
                                   f"in --sources (first: {first[1]!r}); replay needs the rows of this pool")
    for prompt, fname in RELEASE_FILES.items():
        try:
            build_recordings([row for _, row in iter_jsonl_strict(replay / fname)], pool, prompt,
                             n_pos=int(llm["n_pos"]), n_neg=negatives_for_prompt(prompt, int(llm["n_neg"])),
                             model_id=str(llm["model_id"]), judge_model_id=str(llm["judge_model_id"]))
        except ValueError as e:
            raise RecipematchError(f"--replay {replay / fname}: {e}") from None
