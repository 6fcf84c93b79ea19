"""Loaders of benchmarks no one in the project built (the paper, Section 6 and Appendix D):
each reads a local copy (nothing downloads) and writes BEIR folders with a MANIFEST."""

from __future__ import annotations

import os
from pathlib import Path

from recipematch.errors import RecipematchError, short_repr
from recipematch.io import BadLine, iter_jsonl

__all__ = ["check_out_folder", "check_rows_file", "iter_row_objects", "read_parquet_rows"]


def check_out_folder(out: str | os.PathLike, src: str | os.PathLike, what: str) -> Path:
    """Refuse an output folder that would replace or delete the input: ``out`` equal to
    ``src``, inside it, or holding it; or ``out`` an existing file.

    Raises:
        RecipematchError: naming both paths.
    """
    o, s = Path(out).resolve(), Path(src).resolve()
    t = o.with_name(o.name + ".partial")  # the folder written aside before the swap
    if o == s or s in o.parents or o in s.parents or t == s or t in s.parents:
        raise RecipematchError(f"{what}: the output folder {out} overlaps the input {src}; "
                               "write it elsewhere (it is replaced whole)")
    if o.exists() and not o.is_dir():
        raise RecipematchError(f"{what}: the output {out} exists and is not a folder")
    return o


def check_rows_file(path: str | os.PathLike, key: str, release_path: str) -> Path:
    """An attack's released rows file (paper Appendix D), before it is read.

    Args:
        path: the file ``attacks.<key>.rows`` names; release_path: where the peer's release keeps it.

    Raises:
        RecipematchError: the path is a folder or does not exist (naming the key and the release path).
    """
    path = Path(path)
    if path.is_dir():
        raise RecipematchError(f"attacks.{key}.rows: {path} is a folder, not the rows file")
    if not path.is_file():
        raise RecipematchError(f"attacks.{key}.rows: {path} does not exist (the peer's release keeps it as "
                               f"{release_path}; nothing downloads)")
    return path


def iter_row_objects(path: Path, text_fields: tuple[str, ...]):
    """Each line of a released rows file as ``(where, obj)``: ``where`` is ``path:line``, ``obj``
    a JSON object whose ``text_fields`` are non-empty strings (paper Appendix D's row files).

    Raises:
        RecipematchError: a line that is not JSON or not an object, or a text field missing,
            empty or not a string (file, line and field).
    """
    from recipematch.external.meld import is_text  # lazy: import cycle with recipematch.external.meld

    for lineno, obj in iter_jsonl(path):
        where = f"{path}:{lineno}"
        if isinstance(obj, BadLine):
            raise RecipematchError(f"{where}: {obj.reason}")
        if not isinstance(obj, dict):
            raise RecipematchError(f"{where}: expected a JSON object")
        for f in text_fields:
            if not is_text(obj.get(f)):
                raise RecipematchError(f"{where}: field {f!r} must be a non-empty string, got {short_repr(obj.get(f), 60)}")
        yield where, obj


def read_parquet_rows(path: Path, columns: tuple[str, ...], what: str) -> list[dict]:
    """The rows of a benchmark's parquet file, ``columns`` only, as dicts (BRIGHT's and
    SABER-Math's copies, Section 6).

    Raises:
        RecipematchError: ``"<what>: <path>: ..."`` for a file that is not readable parquet, a
            missing column, or a column that cannot be read as Python values (e.g. strings that
            are not UTF-8), naming the field.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise RecipematchError(f"{what}: {path}: not a readable parquet file "
                               f"({str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__})") from None
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise RecipematchError(f"{what}: {path}: missing columns {missing} (has {table.column_names})")
    cols = {}
    for c in columns:  # column by column, so a bad value is named by its field
        try:
            cols[c] = table.column(c).to_pylist()
        except (UnicodeDecodeError, pa.ArrowException) as exc:
            raise RecipematchError(f"{what}: {path}: field {c!r} cannot be read "
                                   f"({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}; "
                                   "strings must be UTF-8)") from None
    return [dict(zip(columns, vals)) for vals in zip(*(cols[c] for c in columns))]
