"""Loaders of benchmarks no one in the project built (the paper, Section 6 and Appendix D):
each reads a local copy (nothing downloads) and writes BEIR folders with a MANIFEST."""

from __future__ import annotations

import os
from pathlib import Path

from recipematch.errors import RecipematchError

__all__ = ["check_out_folder"]


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
