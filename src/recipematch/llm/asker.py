"""One labelling stage's LLM client over its own call store (SABER-Math's labels, the MELD
generation): a batch of requests is answered from the store when every answer is there, and the
client (replay or an OpenAI-compatible server) is opened once, only when some answer is missing,
so a finished or replayed run never needs the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recipematch.llm.pipeline import through_store
from recipematch.llm.serving import client_store_path, open_client
from recipematch.llm.store import CallStore

__all__ = ["StoredAsker", "failure_counts", "top_counts"]


class StoredAsker:
    """Ask batches of :class:`recipematch.llm.backends.GenerationRequest` through a call store.

    Args:
        cfg: the stage's client section (``backend``, ``recordings``, ``base_url``, ...).
        recordings: the replayed answers resolved in the project, or ``None``.
        where: the params key named in errors (``saber.<name>``).
        folder: the store's folder (``cache/<stage>/<name>``); the file inside it is
            :func:`recipematch.llm.serving.client_store_path`'s.
        progress: show a progress bar per batch.
    """

    def __init__(self, cfg: Any, recordings: Path | None, where: str, folder: Path, *, progress: bool) -> None:
        self._cfg, self._recordings, self._where, self._progress = cfg, recordings, where, progress
        self._backend = None
        self.store = CallStore(client_store_path(folder, cfg, recordings))

    def ask(self, reqs: list, desc: str) -> list[dict]:
        """One record per request, in order: ``raw_text`` or ``error`` (a failed call is a
        record, never an exception)."""
        pending = any(r.key not in self.store or self.store.supersedable(r.key) for r in reqs)
        if pending and self._backend is None:
            self._backend = open_client(self._cfg, self._recordings, self._where)
        return through_store(self.store, self._backend if pending else None, reqs, lambda req, res: None,
                              progress=self._progress, desc=desc)[0]

    def close(self) -> None:
        self.store.close()


def failure_counts(failures: list[dict]) -> dict[str, int]:
    """``"<step>: <reason>" -> count`` over a labelling stage's failure records, sorted by key."""
    out: dict[str, int] = {}
    for f in failures:
        key = f"{f['step']}: {f['reason']}"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def top_counts(counts: dict[str, int], n: int = 3, none: str = "none recorded") -> str:
    """The ``n`` most frequent entries as ``"key (count), ..."`` for a one-line error; ``none``
    when there are none."""
    return ", ".join(f"{k} ({v})" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:n]) or none
