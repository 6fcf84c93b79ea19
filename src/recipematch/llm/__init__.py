"""LLM-written training pairs (SPEC §3.2): verbatim prompts, generation backends, the call
store, strict parsing, replay recordings from the peer's release, and the arm runner.

Modules: :mod:`~recipematch.llm.prompts`, :mod:`~recipematch.llm.backends`,
:mod:`~recipematch.llm.store`, :mod:`~recipematch.llm.parsing`,
:mod:`~recipematch.llm.recordings`, :mod:`~recipematch.llm.pipeline`,
:mod:`~recipematch.llm.depth`. vLLM is optional and imported only by
:class:`~recipematch.llm.backends.VLLMBackend`.
"""

from recipematch.llm.backends import (
    GenerationBackend,
    GenerationRequest,
    GenerationResult,
    OpenAICompatibleBackend,
    ReplayBackend,
    VLLMBackend,
)
from recipematch.llm.depth import char3_jaccard, mean_char3_jaccard
from recipematch.llm.parsing import parse_answer, parse_judge
from recipematch.llm.pipeline import (
    judge_agreement,
    run_llm_pairs,
    run_llm_pairs_detailed,
    run_llm_pairs_separate_calls,
    self_test,
)
from recipematch.llm.prompts import PromptTemplate, load_prompt
from recipematch.llm.recordings import build_recordings, candidate_key
from recipematch.llm.store import CallStore

__all__ = [
    "CallStore",
    "GenerationBackend",
    "GenerationRequest",
    "GenerationResult",
    "OpenAICompatibleBackend",
    "PromptTemplate",
    "ReplayBackend",
    "VLLMBackend",
    "build_recordings",
    "candidate_key",
    "char3_jaccard",
    "judge_agreement",
    "load_prompt",
    "mean_char3_jaccard",
    "parse_answer",
    "parse_judge",
    "run_llm_pairs",
    "run_llm_pairs_detailed",
    "run_llm_pairs_separate_calls",
    "self_test",
]
