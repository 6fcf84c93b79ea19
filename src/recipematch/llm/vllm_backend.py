"""In-process vLLM generation, behind the one backend contract of :mod:`recipematch.llm.backends`:
only for an environment where ``import vllm`` works (vLLM pins its own torch/transformers and
lives in a separate GPU environment). The at-scale path is a vLLM *server* reached through
:class:`~recipematch.llm.http_backend.OpenAICompatibleBackend` (:mod:`recipematch.llm.serving`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from recipematch.errors import RecipematchError
from recipematch.io import canonical_json
from recipematch.llm.backends import GenerationBackend, GenerationRequest, GenerationResult, ResultCallback, _Deliver

__all__ = ["VLLMBackend", "VLLMNotInstalledError"]


class VLLMNotInstalledError(RecipematchError, ImportError):
    """``VLLMBackend`` was asked for where vLLM cannot be imported."""


_VLLM_MISSING = (
    "vLLM is not installed in this environment; run `vllm serve` and use backend: openai "
    "(vLLM pins its own torch/transformers and lives in a separate GPU environment; see "
    "recipematch.llm.serving for the command)"
)


class VLLMBackend(GenerationBackend):
    """In-process vLLM generation, batched through ``LLM.chat``: only for an environment
    where vLLM imports (the dev/CI environment cannot hold it). At paper scale run
    ``vllm serve`` and use :class:`~recipematch.llm.http_backend.OpenAICompatibleBackend`
    (:mod:`recipematch.llm.serving`).

    Args:
        model: model path or name given to ``vllm.LLM`` (also the ``model_id`` every
            request must carry, unless ``model_id`` is given).
        model_id: the id recorded with answers, when it differs from ``model``.
        structured_output: constrain decoding to the request's ``response_schema`` when
            the installed vLLM supports it (``StructuredOutputsParams`` in newer releases,
            ``GuidedDecodingParams`` in older ones); silently unconstrained otherwise, and
            the strict parser still checks every answer.
        batch_size: requests per ``LLM.chat`` call (``on_result`` fires after each batch).
        **llm_kwargs: passed to ``vllm.LLM`` (e.g. ``tensor_parallel_size``,
            ``max_model_len``, ``quantization="awq"``).

    Sampling comes from each request: ``SamplingParams(temperature, top_p, max_tokens,
    seed=request.seed, n=1)``; a request's ``chat_template_kwargs`` go to ``LLM.chat``
    (requests with different ones are sent in different batches).

    Raises:
        VLLMNotInstalledError: (a :class:`~recipematch.errors.RecipematchError` and an
            :class:`ImportError`) vLLM cannot be imported here.
    """

    def __init__(
        self,
        model: str,
        *,
        model_id: str | None = None,
        structured_output: bool = True,
        batch_size: int = 256,
        **llm_kwargs: Any,
    ) -> None:
        try:
            import vllm  # noqa: PLC0415 - lazy on purpose: vLLM is an optional GPU extra
        except ImportError as e:
            raise VLLMNotInstalledError(_VLLM_MISSING) from e
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self._vllm = vllm
        self.model_id = model_id or model
        self.structured_output = structured_output
        self.batch_size = batch_size
        self.llm = vllm.LLM(model=model, **llm_kwargs)

    def _structured(self, schema: Mapping[str, Any] | None) -> dict[str, Any]:
        if not self.structured_output or schema is None:
            return {}
        sp_mod = getattr(self._vllm, "sampling_params", None)
        if sp_mod is not None and hasattr(sp_mod, "StructuredOutputsParams"):
            return {"structured_outputs": sp_mod.StructuredOutputsParams(json=dict(schema))}
        if sp_mod is not None and hasattr(sp_mod, "GuidedDecodingParams"):
            return {"guided_decoding": sp_mod.GuidedDecodingParams(json=dict(schema))}
        return {}

    def _params(self, req: GenerationRequest):
        return self._vllm.SamplingParams(
            n=1,
            temperature=req.sampling["temperature"],
            top_p=req.sampling["top_p"],
            max_tokens=req.sampling["max_tokens"],
            seed=req.seed,
            **self._structured(req.response_schema),
        )

    def generate(
        self, requests: Sequence[GenerationRequest], on_result: ResultCallback | None = None
    ) -> list[GenerationResult]:
        results: list[GenerationResult | None] = [None] * len(requests)
        deliver = _Deliver(on_result)
        todo = []
        for i, req in enumerate(requests):
            if req.model_id != self.model_id:
                results[i] = GenerationResult(
                    None, "model_mismatch", attempts=0,
                    detail=f"backend serves {self.model_id!r}, request wants {req.model_id!r}",
                )
                deliver(i, results[i])
            else:
                todo.append(i)
        groups: dict[str, list[int]] = {}
        for i in todo:  # one LLM.chat call takes one set of chat-template arguments
            ctk = requests[i].chat_template_kwargs
            groups.setdefault("" if ctk is None else canonical_json(dict(ctk)), []).append(i)
        for gkey, members in groups.items():
            extra = {} if gkey == "" else {"chat_template_kwargs": json.loads(gkey)}
            for start in range(0, len(members), self.batch_size):
                idx = members[start : start + self.batch_size]
                convs = [
                    ([{"role": "system", "content": requests[i].system}] if requests[i].system else [])
                    + [{"role": "user", "content": requests[i].user}]
                    for i in idx
                ]
                params = [self._params(requests[i]) for i in idx]
                try:
                    outs = self.llm.chat(convs, sampling_params=params, use_tqdm=False, **extra)
                    batch = [self._result(o) for o in outs]
                    if len(batch) != len(idx):
                        raise RuntimeError(f"vLLM returned {len(batch)} outputs for {len(idx)} prompts")
                except Exception as e:  # one broken batch fails its own requests only
                    batch = [
                        GenerationResult(None, "backend_exception", detail=f"{type(e).__name__}: {e}"[:500])
                        for _ in idx
                    ]
                for i, res in zip(idx, batch):
                    results[i] = res
                    deliver(i, res)
        deliver.finish()
        return results  # type: ignore[return-value]

    @staticmethod
    def _result(request_output: Any) -> GenerationResult:
        outs = getattr(request_output, "outputs", None) or []
        if not outs:
            return GenerationResult(None, "empty_content")
        text = getattr(outs[0], "text", None)
        finish = getattr(outs[0], "finish_reason", None)
        if not isinstance(text, str):
            return GenerationResult(None, "empty_content", finish_reason=finish)
        return GenerationResult(text, None, finish_reason=finish if isinstance(finish, str) else None)
