"""Generation at scale: the generator and each judge behind their own OpenAI-compatible
server (paper Section 3 and Appendix C: Qwen3-32B-AWQ writes and judges the LLM arms;
Mistral-Small-24B-Instruct-2501 is the second judge of the two-judge control).

vLLM does not live in recipematch's environment (it pins its own torch and transformers), so
at scale it runs as a *server*, in its own environment or on its own machine, and the
pipeline reaches it through :class:`~recipematch.llm.http_backend.OpenAICompatibleBackend`.

Serving the generator (and the first judge) with vLLM, on one GPU with at least 48 GB::

    python -m venv ~/vllm-env && ~/vllm-env/bin/pip install "vllm>=0.8.5"   # the GPU extra
    export VLLM_API_KEY=...        # optional; vLLM then requires "Authorization: Bearer <key>"
    ~/vllm-env/bin/vllm serve Qwen/Qwen3-32B-AWQ \\
        --host 127.0.0.1 --port 8000 \\
        --max-model-len 16384 --gpu-memory-utilization 0.90 \\
        --reasoning-parser qwen3 --seed 0

(``recipematch[gpu]`` names the same ``vllm`` requirement, for that separate environment
only.) The AWQ quantisation is read from the checkpoint; ``--reasoning-parser qwen3`` moves
a thinking block out of the answer text when thinking is on; with thinking off
(``chat_template_kwargs: {enable_thinking: false}``) there is none. Add
``--tensor-parallel-size N`` for N GPUs. The second judge runs the same way on another
port or machine (``vllm serve mistralai/Mistral-Small-24B-Instruct-2501 --port 8001 ...``
with the flags its model card recommends), with its own :class:`ServerSpec`.

On the client side the key never appears in params: a :class:`ServerSpec` names the
environment *variable* that holds it (``api_key_env``), e.g. ``export
RECIPEMATCH_LLM_API_KEY=...`` beside ``api_key_env: RECIPEMATCH_LLM_API_KEY``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError
from recipematch.io import canonical_json, sha256_file
from recipematch.llm.http_backend import DEFAULT_DEADLINE_S, DEFAULT_MAX_RESPONSE_BYTES, OpenAICompatibleBackend
from recipematch.llm.replay import ReplayBackend

__all__ = ["ServerSpec", "check_recordings", "open_client", "open_server", "vllm_serve_command"]


@dataclass(frozen=True)
class ServerSpec:
    """One OpenAI-compatible server as params describe it (the generator's, a judge's).

    Attributes:
        base_url: ``http(s)://host:port`` (a trailing ``/v1`` is accepted).
        model: the served model id; requests must carry it as ``model_id``.
        api_key_env: NAME of the environment variable holding the API key; ``""`` when
            the server needs none. The key itself is never a field.
        concurrency: calls in flight at once (≥ 1).
        max_retries: retries per call after the first attempt (≥ 0).
        backoff_s: base back-off in seconds (≥ 0); retry k waits ``backoff_s * 2**k``.
        timeout_s: per-read time-out in seconds (> 0); a stalled call fails with
            ``timeout`` after its retries.
        deadline_s: wall-clock limit of one call in seconds, retries and the whole answer
            included (a trickling server fails with ``timeout`` here).
        max_response_bytes: largest answer body read (bytes, ≥ 1024); a longer one fails
            with ``too_large`` and is not stored.
        structured_output: ask the server for JSON-schema-constrained decoding.
        chat_template_kwargs: sent with every request of this server's role, e.g.
            ``{"enable_thinking": False}`` for Qwen3 (JSON values; part of each request's
            key in the call store). ``None`` or ``{}``: not sent.
    """

    base_url: str
    model: str
    api_key_env: str = ""
    concurrency: int = 8
    max_retries: int = 4
    backoff_s: float = 1.0
    timeout_s: float = 300.0
    deadline_s: float = DEFAULT_DEADLINE_S
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    structured_output: bool = False
    chat_template_kwargs: Mapping[str, Any] | None = field(default=None)

    def __post_init__(self) -> None:
        if isinstance(self.chat_template_kwargs, Mapping) and not self.chat_template_kwargs:
            object.__setattr__(self, "chat_template_kwargs", None)  # params' {} means "send nothing"
        if not isinstance(self.base_url, str) or not self.base_url.strip():
            raise RecipematchError("a server's base_url is empty; give http://host:port of the OpenAI-compatible "
                                   "server (e.g. the one `vllm serve` started)")
        if not isinstance(self.model, str) or not self.model:
            raise RecipematchError(f"server {self.base_url}: model is empty")
        if self.chat_template_kwargs is not None:
            if not isinstance(self.chat_template_kwargs, Mapping):
                raise RecipematchError(f"server {self.base_url}: chat_template_kwargs must be a mapping, got "
                                       f"{type(self.chat_template_kwargs).__name__}")
            try:
                canonical_json(dict(self.chat_template_kwargs))
            except (TypeError, ValueError) as e:
                raise RecipematchError(f"server {self.base_url}: chat_template_kwargs must hold JSON values: {e}")

    def describe(self) -> dict[str, Any]:
        """The spec as a plain dict for run records and MLflow params (holds the variable's
        name, never a key)."""
        return {"base_url": self.base_url, "model": self.model, "api_key_env": self.api_key_env,
                "concurrency": self.concurrency, "max_retries": self.max_retries, "backoff_s": self.backoff_s,
                "timeout_s": self.timeout_s, "deadline_s": self.deadline_s,
                "max_response_bytes": self.max_response_bytes, "structured_output": self.structured_output,
                "chat_template_kwargs": None if self.chat_template_kwargs is None else dict(self.chat_template_kwargs)}


def open_server(spec: ServerSpec, *, probe: bool = False,
                sleep: Callable[[float], None] = time.sleep) -> OpenAICompatibleBackend:
    """The backend for one server.

    Args:
        spec: the server.
        probe: ask the server for its model list first (``GET /v1/models``), so a wrong
            URL, key or model fails before anything is paid.
        sleep: the back-off sleep (tests pass a fast one).

    Raises:
        RecipematchError: the key variable is unset or empty; with ``probe``, the server
            refused the key or does not serve ``spec.model``.
        ServerUnreachableError: with ``probe``, no connection after every retry (the
            message names the URL).
    """
    backend = OpenAICompatibleBackend(
        spec.base_url, spec.model, api_key_env=spec.api_key_env or None, concurrency=spec.concurrency,
        max_retries=spec.max_retries, backoff=spec.backoff_s, timeout_s=spec.timeout_s,
        deadline_s=spec.deadline_s, max_response_bytes=spec.max_response_bytes, structured_output=spec.structured_output, sleep=sleep)
    if probe:
        backend.probe()
    return backend


def check_recordings(cfg: Any, recordings: Path | None, where: str) -> None:
    """Stop before any work when a labelling stage (judging, SABER) replays a file that is
    not there. ``cfg``: a client section (``backend``, ``recordings``); ``recordings``: that
    file resolved in the project.

    Raises:
        RecipematchError: ``backend: replay`` and ``recordings`` is not a file (one line,
            naming the key).
    """
    if cfg.backend == "replay" and (not cfg.recordings or recordings is None or not recordings.is_file()):
        raise RecipematchError(f"{where}: backend replay needs recordings, and {where}.recordings = "
                               f"{cfg.recordings!r} is no file (record a live run's store, or set backend: openai "
                               "and base_url)")


def client_store_path(folder: Path, cfg: Any, recordings: Path | None) -> Path:
    """The call store of a labelling stage's client section under ``folder``: ``calls.jsonl``
    for a server; for ``backend: replay``, ``replay-<first 16 hex of the recordings' SHA-256>.jsonl``,
    so an edited or completed recordings file is read afresh (a call it could not answer is not
    kept as final) while an unchanged one resumes from its store."""
    if cfg.backend == "replay" and recordings is not None and recordings.is_file():
        return folder / f"replay-{sha256_file(recordings)[:16]}.jsonl"
    return folder / "calls.jsonl"


def open_client(cfg: Any, recordings: Path | None, where: str, *, structured_output: bool = False):
    """The backend of a labelling stage's client section: a replay of ``recordings`` or the
    section's server, probed once (``model_id``, ``base_url``, ``api_key_env``,
    ``concurrency``, ``max_retries``, ``timeout_s``).

    Raises:
        RecipematchError: see :func:`check_recordings`; a malformed recordings file; a
            server that refuses the key or does not serve the model.
        ServerUnreachableError: no connection after every retry.
    """
    check_recordings(cfg, recordings, where)
    if cfg.backend == "replay":
        try:
            return ReplayBackend(recordings)
        except ValueError as e:
            raise RecipematchError(f"{where}.recordings: {e}") from None
    return open_server(ServerSpec(cfg.base_url, cfg.model_id, api_key_env=cfg.api_key_env,
                                  concurrency=cfg.concurrency, max_retries=cfg.max_retries, timeout_s=cfg.timeout_s,
                                  structured_output=structured_output), probe=True)


def vllm_serve_command(model: str, *, port: int, host: str = "127.0.0.1", max_model_len: int | None = None,
                       tensor_parallel_size: int = 1, gpu_memory_utilization: float | None = None,
                       reasoning_parser: str | None = None, seed: int | None = None,
                       extra: tuple[str, ...] = ()) -> list[str]:
    """The ``vllm serve`` argument list for a model (to print in docs or launch scripts; it
    is not run here). Values are the caller's; nothing is defaulted from the paper.

    Example:
        >>> " ".join(vllm_serve_command("Qwen/Qwen3-32B-AWQ", port=8000, max_model_len=16384,
        ...                             reasoning_parser="qwen3"))
        'vllm serve Qwen/Qwen3-32B-AWQ --host 127.0.0.1 --port 8000 --max-model-len 16384 --reasoning-parser qwen3'
    """
    if not model or port < 1 or port > 65535 or tensor_parallel_size < 1:
        raise ValueError("need a model, a port in 1..65535 and tensor_parallel_size >= 1")
    cmd = ["vllm", "serve", model, "--host", host, "--port", str(port)]
    if max_model_len is not None:
        cmd += ["--max-model-len", str(max_model_len)]
    if tensor_parallel_size != 1:
        cmd += ["--tensor-parallel-size", str(tensor_parallel_size)]
    if gpu_memory_utilization is not None:
        cmd += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    if reasoning_parser:
        cmd += ["--reasoning-parser", reasoning_parser]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    return cmd + list(extra)
