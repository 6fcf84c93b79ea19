"""The optional files a graded BEIR folder carries beside its corpus, queries and qrels (paper
Section 6): BRIGHT's per-query excluded ids (:data:`EXCLUDED_FILE`) and SABER-Math's per-query
reranking candidates (:data:`CANDIDATES_FILE`), and the folder's positive qrels. Light to import
(no pandas, no model code): the external loaders that write these files name them from here."""

from __future__ import annotations

import json
import os
from pathlib import Path

from recipematch.beir import iter_qrels_rows
from recipematch.errors import RecipematchError, short_repr

__all__ = ["CANDIDATES_FILE", "EXCLUDED_FILE", "positive_qrel_ids", "read_candidates", "read_excluded"]

#: a BEIR folder's per-query ids taken out of that query's run (BRIGHT's ``excluded_ids``), when present
EXCLUDED_FILE = "excluded_ids.json"
#: a BEIR folder's per-query candidate ids (SABER-Math's reranking protocol), when present
CANDIDATES_FILE = "candidates.json"


def read_json_file(path: Path):
    """A folder's optional JSON file: ``None`` when absent, else its parsed value.

    Raises:
        RecipematchError: the path is a folder or a broken link, or not JSON.
    """
    if not path.exists() and not path.is_symlink():
        return None
    if not path.is_file():
        raise RecipematchError(f"{path}: exists but is not a readable file (a folder or a broken link)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecipematchError(f"{path}: not JSON ({exc})") from None


def read_excluded(folder: str | os.PathLike) -> dict[str, list[str]]:
    """``query_id -> excluded doc ids`` of a BEIR folder (e.g. one the BRIGHT loader wrote) (empty
    when the folder has no :data:`EXCLUDED_FILE`).

    Raises:
        RecipematchError: the file is not a JSON object of id lists.
    """
    path = Path(folder) / EXCLUDED_FILE
    obj = read_json_file(path)
    if obj is None:
        return {}
    if not isinstance(obj, dict) or not all(isinstance(v, list) and all(isinstance(x, str) for x in v)
                                            for v in obj.values()):
        raise RecipematchError(f"{path}: expected an object of query id -> list of document ids")
    return obj


def positive_qrel_ids(folder: str | os.PathLike, split: str) -> dict[str, set[str]]:
    """``query_id -> doc ids graded above 0`` of a BEIR folder's qrels."""
    out: dict[str, set[str]] = {}
    for _path, _lineno, qid, did, raw in iter_qrels_rows(folder, split):
        if raw > 0:
            out.setdefault(qid, set()).add(did)
    return out


def read_candidates(folder: str | os.PathLike) -> dict[str, list[str]] | None:
    """``query_id -> candidate doc ids`` of a BEIR folder (e.g. one the SABER-Math loader wrote),
    or ``None`` when the folder has no :data:`CANDIDATES_FILE` (not a reranking folder).

    Raises:
        RecipematchError: the file is not a non-empty JSON object of non-empty id lists without
            repeats.
    """
    path = Path(folder) / CANDIDATES_FILE
    obj = read_json_file(path)
    if obj is None:
        return None
    if not isinstance(obj, dict) or not obj:
        raise RecipematchError(f"{path}: expected a non-empty object of query id -> list of document ids")
    for q, v in obj.items():
        if not isinstance(v, list) or not v or not all(isinstance(x, str) for x in v):
            raise RecipematchError(f"{path}: query {short_repr(q, 40)}: expected a non-empty list of document ids")
        if len(set(v)) != len(v):
            raise RecipematchError(f"{path}: query {short_repr(q, 40)}: a candidate is listed twice")
    return obj
