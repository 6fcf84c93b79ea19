"""LLM-written training pairs (paper Sections 3 and 5; Appendix C for the controls such as
the two-judge check, Appendix F for the verbatim prompts): prompts, generation backends, the
call store, strict parsing, replay recordings from the peer's release, the arm runner, and
serving at scale through OpenAI-compatible servers.

Modules: :mod:`~recipematch.llm.prompts`, :mod:`~recipematch.llm.backends` (the backend
contract) with :mod:`~recipematch.llm.replay`, :mod:`~recipematch.llm.http_backend` and
:mod:`~recipematch.llm.vllm_backend`, :mod:`~recipematch.llm.serving`,
:mod:`~recipematch.llm.store`, :mod:`~recipematch.llm.parsing`,
:mod:`~recipematch.llm.recordings`, :mod:`~recipematch.llm.pipeline` (the arm runner, with
:mod:`~recipematch.llm.arm_rows`), :mod:`~recipematch.llm.judge2` (the second judge),
:mod:`~recipematch.llm.selftest` (the worker gate), paraphrase depth from :mod:`~recipematch.depth`. vLLM is
never imported here: at scale it runs as ``vllm serve`` (see :mod:`~recipematch.llm.serving`);
:class:`~recipematch.llm.vllm_backend.VLLMBackend` imports it only where it is installed.
"""

from recipematch.llm.backends import GenerationBackend, GenerationRequest, GenerationResult
from recipematch.depth import char3_jaccard, mean_char3_jaccard
from recipematch.llm.http_backend import OpenAICompatibleBackend, ServerUnreachableError, read_api_key
from recipematch.llm.parsing import parse_answer, parse_judge
from recipematch.llm.judge2 import TwoJudgeResult, arm_candidates, judge_agreement, run_second_judge
from recipematch.llm.pipeline import run_llm_pairs, run_llm_pairs_detailed, run_llm_pairs_separate_calls
from recipematch.llm.prompts import CustomPrompt, PromptTemplate, load_custom_prompt, load_prompt
from recipematch.llm.recordings import build_recordings, candidate_key, recordings_from_store
from recipematch.llm.replay import ReplayBackend
from recipematch.llm.selftest import self_test
from recipematch.llm.serving import ServerSpec, open_server, vllm_serve_command
from recipematch.llm.store import CallStore
from recipematch.llm.vllm_backend import VLLMBackend, VLLMNotInstalledError

__all__ = [
    "CallStore",
    "CustomPrompt",
    "GenerationBackend",
    "GenerationRequest",
    "GenerationResult",
    "OpenAICompatibleBackend",
    "PromptTemplate",
    "ReplayBackend",
    "ServerSpec",
    "ServerUnreachableError",
    "TwoJudgeResult",
    "VLLMBackend",
    "VLLMNotInstalledError",
    "arm_candidates",
    "build_recordings",
    "candidate_key",
    "char3_jaccard",
    "judge_agreement",
    "load_custom_prompt",
    "load_prompt",
    "mean_char3_jaccard",
    "open_server",
    "parse_answer",
    "parse_judge",
    "read_api_key",
    "recordings_from_store",
    "run_llm_pairs",
    "run_llm_pairs_detailed",
    "run_llm_pairs_separate_calls",
    "run_second_judge",
    "self_test",
    "vllm_serve_command",
]
