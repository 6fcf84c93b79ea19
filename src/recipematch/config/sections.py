"""The sections of ``params.yaml``: one frozen dataclass each, every bound on its field."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from recipematch.config.schema import deadline_spec, max_response_spec, spec
from recipematch.config.urls import ENV_VAR_NAME, server_url_problem
from recipematch.errors import RecipematchError, short_repr
from recipematch.metrics import SCORING_RULES
from recipematch.rules import EVAL_ROLES, EXTERNAL_SUBSETS, GATE_VERSIONS, SELF_MASK_RULES
from recipematch.rules import GAINS as GAINS_ALLOWED

# --------------------------------------------------------------------------- the sections


LLM_BACKENDS = ("replay", "openai")
DEVICES = ("cpu", "cuda", "mps")


@dataclass(frozen=True)
class GatesConfig:
    """Contamination gates (paper Section 3, Appendix B). They cannot be switched off."""

    active: str = spec("exclusion list in force: v1 (the headline arms' gate) or v2 (corrected); "
                        "gates cannot be switched off", choices=GATE_VERSIONS)
    ngram_n: int = spec("word n-gram length of the containment gate (paper: 5)", min=1, max=50)
    ngram_threshold: float = spec("containment above which a row is dropped, either direction (paper: 0.35)",
                                   min=0.0, max=1.0, finite=True)
    cosine_threshold: float = spec("base-model cosine at or above which a row is dropped (paper: 0.9)",
                                    min=-1.0, max=1.0, finite=True)
    cosine_max_seq_length: int = spec("tokens per text the cosine gate's base-model encoder reads (its own "
                                       "setting: an evaluation edit never reruns the gate)", min=1, max=32_768)
    cosine_batch_size: int = spec("texts per forward pass of the cosine gate's encoder (it moves the cosines in "
                                   "the last float bits, so it is a param)", min=1, max=65_536)
    cosine_dtype: str = spec("encoding precision of the cosine gate's encoder", choices=("float32", "bfloat16"))


@dataclass(frozen=True)
class EvalSetConfig:
    """Held-out evaluation sources (no arm trains on them; paper Section 3)."""

    seed: int = spec("draws the held-out sources and the searched corpus sample", min=0, max=2**32 - 1)
    n_heldout: int = spec("sources with a recorded D1 rewrite held out for the LLM-built tier (0 = build no "
                           "embedded tiers: an audit brings its own benchmark folder)", min=0, max=1_000_000)
    corpus_docs: int = spec("corpus problems searched (0 = all, as the paper)", min=0, max=10_000_000)


@dataclass(frozen=True)
class CasConfig:
    """Computer-algebra generator limits (paper Appendix A: 30 s per problem)."""

    timeout_s: float = spec("per-problem wall-clock limit in seconds", min=0.1, max=3600.0, finite=True)
    memory_mb: int = spec("per-worker address-space cap in MB", min=64, max=1_048_576)
    workers: int = spec("worker processes", min=1, max=256)


@dataclass(frozen=True)
class LLMConfig:
    """LLM generation and judging (paper Section 3; Appendix F)."""

    backend: str = spec("replay (recorded answers) or openai (any OpenAI-compatible server, vLLM included)",
                         choices=LLM_BACKENDS)
    prompts: tuple[str, ...] = spec("prompts to run, by name (one llm stage each)", min=1)
    model_id: str = spec("generator model id", min=1, max_len=300)
    judge_model_id: str = spec("judge model id", min=1, max_len=300)
    n_pos: int = spec("positives asked for per source", min=1, max=16)
    n_neg: int = spec("near-misses asked for per source (prompts that carry them)", min=0, max=16)
    require_tags: bool = spec("require the judge's tags and justifications in every answer")
    temperature: float = spec("sampling temperature", min=0.0, max=2.0, finite=True)
    top_p: float = spec("nucleus sampling mass", min=0.0, max=1.0, finite=True)
    max_tokens: int = spec("answer length cap in tokens", min=1, max=131_072)
    base_url: str = spec("server URL for backend openai", default="", max_len=2000)
    api_key_env: str = spec("NAME of the environment variable holding the server's API key ('' = none); "
                             "the key itself never lands in params, logs or stores", default="", max_len=200)
    judge_base_url: str = spec("judge server URL ('' = the generator's server)", default="", max_len=2000)
    judge_api_key_env: str = spec("NAME of the judge server's API-key variable", default="", max_len=200)
    chat_template_kwargs: dict = spec("sent with every request, e.g. {enable_thinking: false} for Qwen3",
                                       default_factory=dict)
    allow_reasoning_preamble: bool = spec("skip a <think> block or text before the JSON answer (schema kept strict)",
                                           default=False)
    concurrency: int = spec("requests in flight", default=8, min=1, max=1024)
    max_retries: int = spec("retries per request", default=4, min=0, max=100)
    timeout_s: float = spec("seconds per request", default=300.0, min=0.1, max=86_400.0, finite=True)
    deadline_s: float = deadline_spec()
    max_response_bytes: int = max_response_spec()
    recipe_prompt: str = spec("sidecar (.prompt.yaml, relative to the project root) of a user's prompt that plays "
                               "the recipe's role in place of the shipped D1 ('' = D1): its pairs are the recipe "
                               "arm's positives and near-misses (an audit of a benchmark written under it)",
                               default="", max_len=2000)


@dataclass(frozen=True)
class BudgetConfig:
    """Matched budget (paper Table 2, Appendix A)."""

    rows: int = spec("rows per arm and seed (paper: 6,145)", min=1, max=10_000_000)
    dev_fraction: float = spec("share of sources held out as dev, by source", min=1e-6, max=0.5, finite=True)
    max_rows_per_source: int = spec("cap on rows of one source (0 = no cap)", min=0, max=1000)
    shared_sources: tuple[str, ...] = spec("named arms drawn from one source list")


@dataclass(frozen=True)
class LoraConfig:
    """LoRA adapters instead of full fine-tuning (paper Table 2: the 4B replication, rank 16,
    learning rate 1e-4, gradient checkpointing). Off by default: all weights train."""

    enabled: bool = spec("train LoRA adapters (peft) instead of all weights", default=False)
    rank: int = spec("adapter rank r (paper: 16)", default=16, min=1, max=4096)
    alpha: float = spec("adapter scaling numerator lora_alpha (scale = alpha / rank)", default=32.0, min=1e-6,
                         max=1e6, finite=True)
    dropout: float = spec("dropout on the adapter input", default=0.0, min=0.0, max=0.99, finite=True)
    target_modules: tuple[str, ...] = spec("module names that get adapters, e.g. [q_proj, v_proj] "
                                            "(empty: peft's default for the architecture)", default=())
    lr: float = spec("learning rate while LoRA is on, in place of train.lr (paper: 1e-4)", default=1e-4,
                      min=1e-9, max=1.0, finite=True)


@dataclass(frozen=True)
class ReplayConfig:
    """General pairs mixed into every training file (paper Appendix E, Table 19: V1/V2's
    replay rows). Off by default (fraction 0)."""

    file: str = spec("JSONL pair file of general pairs, relative to the project root ('' = none)", default="",
                      max_len=2000)
    fraction: float = spec("share of the mixed training split that is replay rows (0 = off; paper V1/V2: "
                            "12,000 of 30,323)", default=0.0, min=0.0, max=0.9, finite=True)


@dataclass(frozen=True)
class TrainConfig:
    """Training (paper Section 3, Table 2, Eq. 1)."""

    seed: int = spec("first training seed; each seed also draws its own budget rows (paper: 42)", min=0,
                      max=2**32 - 1000)
    n_seeds: int = spec("training seeds train.seed, train.seed+1, ... (paper: 8)", min=1, max=1000)
    model: str = spec("base model: the packaged MiniLM name or a local sentence-transformers folder", min=1,
                       max_len=2000)
    lr: float = spec("learning rate (paper: 2e-5)", min=1e-9, max=1.0, finite=True)
    epochs: int = spec("epochs (paper: 3)", min=1, max=1000)
    batch_size: int = spec("examples per batch (paper: 256)", min=1, max=65_536)
    mini_batch_size: int = spec("gradient-cache mini-batch (paper: 16)", min=1, max=65_536)
    scale: float = spec("contrastive loss scale (paper: 20)", min=1e-6, max=1e4, finite=True)
    warmup_ratio: float = spec("warm-up share of steps (paper: 0.05)", min=0.0, max=0.99, finite=True)
    max_seq_length: int = spec("tokens per text in training", min=1, max=32_768)
    eval_steps: int = spec("steps between dev evaluations (paper: 100)", min=1, max=10_000_000)
    max_dev_triplets: int = spec("dev triplets scored (paper: 2,000)", min=1, max=10_000_000)
    bf16: bool = spec("bf16 mixed precision")
    # training variants (paper Table 2, Appendix E, Table 19); the defaults leave full fine-tuning as it was
    gradient_checkpointing: bool = spec("recompute activations in the backward pass (paper: the 4B LoRA run)",
                                         default=False)
    max_steps: int = spec("train each seed exactly this many optimiser steps, fewer or more than train.epochs "
                           "passes would take (0 = train.epochs passes; Appendix D's step-matched SABER arm: the "
                           "summary arm at the document arm's steps)", default=0, min=0, max=10_000_000)
    lora: LoraConfig = spec("LoRA adapters (off by default)", default_factory=LoraConfig)
    query_instruction: str = spec("text prefixed to queries: to anchors in training and to queries when the "
                                   "trained models are scored (paper Appendix E: V2; '' = none)", default="",
                                   max_len=2000)
    replay: ReplayConfig = spec("general pairs mixed into each training file (off by default)",
                                 default_factory=ReplayConfig)


@dataclass(frozen=True)
class RemediesConfig:
    """The two remedies for forgetting compared in paper Appendix E, Table 19, as a grid over
    some arms: WiSE-FT soups in weight space (θ = α·θ_ft + (1 − α)·θ_base, one ``soup@<arm>-<α>``
    stage per arm and α) and retraining with replay rows in data space (one
    ``mix@<arm>-<fraction>`` stage per arm and fraction). Its own section, so a grid edit
    retrains no arm. Empty ``arms``: no remedy stage."""

    arms: tuple[str, ...] = spec("arms of `arms` given both remedies ([] = none)", default=())
    soup_alphas: tuple[float, ...] = spec("WiSE-FT soup blends: the trained weights' share (paper Table 19: "
                                           "0.3, 0.5, 0.7; empty = no soup)", default=(), min=0.0, max=1.0,
                                           finite=True)
    replay_fractions: tuple[float, ...] = spec("replay rows' share of the mixed training split, one retrained "
                                                "model each (paper V1/V2: 12,000 of 30,323; empty = no mix)",
                                                default=(), min=0.01, max=0.9, finite=True)
    replay_file: str = spec("JSONL pair file the mixes draw replay rows from, relative to the project root "
                             "(the replay_pool stage writes artifacts/replay/ict.jsonl)", default="", max_len=2000)
    ict_seed: int = spec("draws the held-out sentence of each inverse-cloze replay row (replay_pool stage)",
                          default=11, min=0, max=2**32 - 1)
    ict_min_chars: int = spec("shortest sentence, in characters, an inverse-cloze row may use as its anchor",
                               default=20, min=1, max=100_000)


@dataclass(frozen=True)
class EvaluateConfig:
    """Evaluation (paper Section 3, Appendix A)."""

    ks: tuple[int, ...] = spec("recall cut-offs; must include 1", min=1, max=10_000)
    max_seq_length: int = spec("tokens per text when encoding (paper: 1,024)", min=1, max=32_768)
    batch_size: int = spec("texts per encoding batch", min=1, max=65_536)
    bm25_k1: float = spec("BM25 baseline k1 (paper: 1.5)", min=0.0, max=100.0, finite=True)
    bm25_b: float = spec("BM25 baseline b (paper: 0.75)", min=0.0, max=1.0, finite=True)
    dtype: str = spec("encoding precision: float32 or bfloat16 (paper: bf16, Appendix A)",
                       choices=("float32", "bfloat16"), default="float32")


EVAL_RULES_ALLOWED = tuple(SCORING_RULES)  # the one registry of scoring rules (Section 3, Appendix A)
EVAL_ROLES_ALLOWED = tuple(EVAL_ROLES)


@dataclass(frozen=True)
class EvaluationConfig:
    """One declared evaluation set (paper Section 3; roles and rules: :mod:`recipematch.rules`)."""

    folder: str = spec("BEIR folder, relative to the project root (a stage output or a DVC-tracked folder)",
                        min=1, max_len=2000)
    rule: str = spec("scoring rule", choices=EVAL_RULES_ALLOWED)
    role: str = spec("benchmark (LLM-built), real (no generator), in_family (an arm's own generator), "
                      "diagnostic (not a paper set: scored and reported apart, never in a DiD) or external "
                      "(a benchmark no one in the project built, scored by its graded measures; Section 6)",
                      choices=EVAL_ROLES_ALLOWED)
    in_family_for: tuple[str, ...] = spec("positives generators whose arms this set is in-family for "
                                           "(e.g. [cas] for the CAS near-miss probe)", default=())
    self_mask: str = spec("which corpus entry is a query's own and masked: id_and_text (the entry with the "
                           "query's id and text; an ordinary BEIR folder's unrelated id match stays), id, none",
                           choices=SELF_MASK_RULES, default=SELF_MASK_RULES[0])
    measures: tuple[str, ...] = spec("graded measures computed by ir_measures on each model's run, by the "
                                      "library's names (e.g. [nDCG@10, R@10]); the first is the one the report "
                                      "and the bootstrap gaps use; required for role external (Section 6)",
                                      default=(), max_len=200)
    gain: str = spec("nDCG's gain: linear (trec_eval: gain = grade) or exponential (2**grade - 1, SABER-Math's)",
                      choices=GAINS_ALLOWED, default="linear")
    grade_scale: tuple[int, ...] = spec("[lowest, highest] grade the benchmark declares; a qrels grade outside "
                                         "it is refused ([] = any integer grade)", default=(),
                                         min=-(2**31 - 1), max=2**31 - 1)
    depth: int = spec("documents per query in the run the graded measures read", default=100, min=1,
                       max=1_000_000)
    group: str = spec("sets sharing a group are macro-averaged, each set resampled on its own (ImpliRet's "
                       "subsets, MIRB's tasks; '' = none)", default="", max_len=64)
    version_of: str = spec("the declared benchmark evaluation whose golds this set regenerates (a regen stage's "
                            "folder; the report's Table 24 sets the versions side by side; '' = none)",
                            default="", max_len=64)



EXTERNAL_LOADERS = tuple(EXTERNAL_SUBSETS)


@dataclass(frozen=True)
class ReportRowConfig:
    """How the report shows one declared evaluation (paper Table 1's rows): read by the report
    stage alone, so editing a label or a cut-off reruns the report and nothing else."""

    label: str = spec("the report's row label", min=1, max_len=200)
    ks: tuple[int, ...] = spec("cut-offs Table 1 shows for this set, each one of evaluate.ks", min=1, max=10_000)


def report_row(rows: Mapping[str, ReportRowConfig], name: str) -> ReportRowConfig:
    """The report row of evaluation ``name`` from params ``report``; a set without one is shown
    under its own name at R@1."""
    return rows.get(name) or ReportRowConfig(label=name, ks=(1,))


@dataclass(frozen=True)
class ExternalConfig:
    """One external benchmark's local copy and what to build from it (paper Section 6;
    loaders in :mod:`recipematch.external`): the ``external@<name>`` stage writes one BEIR folder
    per subset to ``artifacts/external/<name>/<subset>``. Nothing downloads: a missing copy
    stops the stage with one line (``recipematch plan`` lists it)."""

    loader: str = spec("which loader reads the copy: impliret (the release's <style>__<category>.jsonl "
                        "files), bright (BRIGHT's documents/ and examples/ parquet files), meld (MELD's "
                        "adversarial_theorem_pairs_2.json and distractors_all.json), mirb (one BEIR folder per "
                        "MIRB task, <copy>/<task>/) or sabermath (<copy>/queries/data/*.parquet and "
                        "<copy>/documents/data/*.parquet: a reranking benchmark with real-valued 0-5 grades)",
                        choices=EXTERNAL_LOADERS)
    copy: str = spec("the local copy, a folder relative to the project root (a DVC dependency)", min=1,
                      max_len=2000)
    subsets: tuple[str, ...] = spec("ImpliRet subsets (<style>__<category>), BRIGHT splits, MELD's pairs_only or "
                                     "MIRB tasks or SABER-Math settings (statement-full, statement-statement, full-full) to build", min=1,
                                     max_len=200)
    revision: str = spec("the copy's upstream revision, recorded in each MANIFEST.json", default="", max_len=200)
    max_rows: int = spec("ImpliRet and SABER-Math only: keep each subset's first rows (ImpliRet) or the first "
                          "queries with their candidates (SABER-Math): a documented subsample; 0 = all",
                          default=0, min=0, max=100_000_000)


@dataclass(frozen=True)
class AttackConfig:
    """One MELD attack row set replayed from released rows (paper Section 6, Appendix D): the
    ``attack@<key>`` stage checks each row and writes the pair file ``artifacts/pairs/<key>.jsonl``
    that the arm of the same name trains on (gated and budgeted like every cell)."""

    rows: str = spec("the released rows, a JSONL file relative to the project root (a DVC dependency): one "
                      "{source_id, anchor_text, positive_text, negatives: [{text}], meta} object a line", min=1,
                      max_len=2000)
    revision: str = spec("the rows' upstream revision, recorded with the pair file", default="", max_len=200)
    seed: int = spec("seed of the rows' own draws (saber_document: its negatives)", default=42, min=0,
                      max=2**31 - 1)


@dataclass(frozen=True)
class PoolConfig:
    """One candidate pool over a declared evaluation (:mod:`recipematch.pooling`): the
    ``pooling@<name>`` stage fuses dense routes (the named models), BM25 and word n-gram
    overlap by weighted reciprocal rank fusion and writes ``artifacts/pooling/<name>/`` and
    ``metrics/pooling/<name>.json``. Needs no LLM; the judging stages read its candidates."""

    evaluation: str = spec("the declared evaluation whose queries and corpus are pooled (its self_mask applies)",
                            min=1, max_len=64)
    dense: tuple[str, ...] = spec("models with a dense route each: base (train.model), arms (every arm of `arms`) "
                                   "and/or named arms; an arm has a route per trained seed", min=1, max_len=64)
    route_depth: int = spec("documents each route contributes per query (the design: 100)", min=1, max=100_000)
    judge_depth: int = spec("depth of the v1 (dense) and v2 (fused) pools (the design: 20)", min=1, max=100_000)
    mode: str = spec("v1: the dense routes' top judge_depth; v2: v1 plus the fused top judge_depth",
                      choices=("v1", "v2"))
    rrf_k: float = spec("reciprocal rank fusion's k (the design: 60)", min=0.0, max=1e9, finite=True)
    weight_dense: float = spec("RRF weight of each dense route (the design: 2)", min=1e-9, max=1e9, finite=True)
    weight_bm25: float = spec("RRF weight of the BM25 route (the design: 1)", min=1e-9, max=1e9, finite=True)
    weight_ngram: float = spec("RRF weight of the n-gram route (the design: 1)", min=1e-9, max=1e9, finite=True)
    bm25_k1: float = spec("the BM25 route's k1 (the design: 1.2)", min=0.0, max=100.0, finite=True)
    bm25_b: float = spec("the BM25 route's b (the design: 0.75)", min=0.0, max=1.0, finite=True)
    token_pattern: str = spec("the lexical routes' token regex, applied to lowercased text (the design: [a-z0-9]+)",
                               min=1, max_len=200)
    ngram_n: int = spec("words per n-gram of the overlap route (the design: 5)", min=1, max=50)


@dataclass(frozen=True)
class RegenConfig:
    """One regenerated version of a declared benchmark's golds (paper Appendix E, the
    regeneration defence, Tables 24-25): the ``regen@<name>`` stage rewrites each query's gold
    another way, keeps the queries, qrels and the rest of the corpus, and writes the version as
    a BEIR folder (``artifacts/regen/<name>/``) that an ``evaluations`` entry can declare."""

    of: str = spec("the declared benchmark evaluation whose gold documents are regenerated", min=1, max_len=64)
    source: str = spec("llm: each query's source problem rewritten through the llm section's backend and judge "
                        "under `prompt` (replay: the recordings; openai: any OpenAI-compatible server); rows: "
                        "released regenerated golds (`rows`, `variant`)", choices=("llm", "rows"))
    prompt: str = spec("source llm: the rewriting prompt (d1_recipe, d2_paraphrase, d3_style, d4_restatement, "
                        "d5_survey)", default="", max_len=64)
    rows: str = spec("source rows: a JSON file under data/ shaped like the release's "
                      "data/defense_eval/regen_manifest.json ({queries: {id: {variant: {text, verified}}}})",
                      default="", max_len=2000)
    variant: str = spec("source rows: which regenerated variant (the release: exact, paraphrase, style)",
                         default="", max_len=64)
    missing: str = spec("a query left without a regenerated gold (failed, rejected or unverified): error (stop, "
                         "write nothing) or drop (leave the query out, counted)", choices=("error", "drop"),
                         default="error")


@dataclass(frozen=True, kw_only=True)
class _ClientConfig:
    """The LLM client of a labelling stage (judging, SABER): replay from recordings or an
    OpenAI-compatible server, with the sampling and transport settings every call sends.
    ``_section`` names the params section in error messages."""

    _section = "llm"

    backend: str = spec("replay (recordings) or openai (an OpenAI-compatible server)", choices=LLM_BACKENDS,
                         default="replay")
    recordings: str = spec("replay: the recordings JSONL (a live run's store gives one)", default="", max_len=2000)
    model_id: str = spec("the judge model id (every label records it)", default="", max_len=300)
    base_url: str = spec("server URL for backend openai", default="", max_len=2000)
    api_key_env: str = spec("NAME of the environment variable holding the server's API key ('' = none)",
                             default="", max_len=200)
    temperature: float = spec("sampling temperature", default=0.0, min=0.0, max=2.0, finite=True)
    top_p: float = spec("nucleus sampling mass", default=1.0, min=0.0, max=1.0, finite=True)
    max_tokens: int = spec("answer length cap in tokens", default=1024, min=1, max=131_072)
    seed: int = spec("sampling seed sent with every call", default=42, min=0, max=2**31 - 1)
    concurrency: int = spec("requests in flight", default=8, min=1, max=1024)
    max_retries: int = spec("retries per request", default=4, min=0, max=100)
    timeout_s: float = spec("seconds per request", default=300.0, min=0.1, max=86_400.0, finite=True)

    def __post_init__(self) -> None:
        where = self._section
        if not self.model_id.strip():
            raise RecipematchError(f"{where}.model_id: name the judge model (every label records it)")
        if self.backend == "openai" and not self.base_url:
            raise RecipematchError(f"{where}: backend openai needs base_url (e.g. http://127.0.0.1:8000/v1)")
        if self.base_url and (why := server_url_problem(self.base_url)):  # as llm.base_url: never a key in params
            raise RecipematchError(f"{where}.base_url {why}")
        if self.api_key_env and not ENV_VAR_NAME.fullmatch(self.api_key_env):
            raise RecipematchError(f"{where}.api_key_env must be the NAME of an environment variable, never the key")


@dataclass(frozen=True, kw_only=True)
class JudgingConfig(_ClientConfig):
    """Graded judging of one candidate pool (:mod:`recipematch.judging`): the LLM judge for the
    routed pairs (replay or an OpenAI-compatible server, every call in a store), a distilled
    cross-encoder for the rest, graded qrels out. Needs the user's judge prompt: none ships."""

    _section = "judging"

    pool: str = spec("the pooling entry whose pool is judged", min=1, max_len=64)
    folder: str = spec("the folder holding this run's own files (prompt, system_prompt, rubric, recordings: each "
                        "must lie inside it); dvc.yaml tracks it whole", min=1, max_len=2000)
    prompt: str = spec("the judge prompt template (a file in the project; the user message, with the slots "
                        "{{task_id}}, {{query}} and {{document}})", min=1, max_len=2000)
    system_prompt: str = spec("a file holding the system message ('' = none)", default="", max_len=2000)
    rubric: str = spec("the rubric JSON ('' = the shipped strict-math-retrieval-v1)", default="", max_len=2000)
    structured_output: bool = spec("ask the server to decode under the answer's JSON Schema", default=False)
    llm_fused_ranks: int = spec("pairs at fused ranks 1..this go to the LLM judge (the design: 5; 0 = none)",
                                 default=5, min=0, max=100_000)
    llm_dense_ranks: int = spec("pairs some dense route ranks 1..this go to the LLM judge (the design: 5)",
                                 default=5, min=0, max=100_000)
    long_chars: int = spec("documents longer than this many characters go to the LLM judge (0 = off)",
                            default=30_000, min=0, max=100_000_000)
    max_doc_chars: int = spec("characters of a document the LLM judge reads (the design: 30,000)",
                               default=30_000, min=1, max=100_000_000)
    long_max_doc_chars: int = spec("characters of a long document the LLM judge reads (the design: 100,000)",
                                    default=100_000, min=1, max=100_000_000)
    distilled_model: str = spec("base model of the distilled judge (a local folder or a packaged name)",
                                 default="all-MiniLM-L6-v2", min=1, max_len=2000)
    distilled_epochs: int = spec("training epochs of the distilled judge", default=2, min=1, max=1000)
    distilled_batch_size: int = spec("its batch size", default=16, min=1, max=4096)
    distilled_learning_rate: float = spec("its learning rate", default=5e-5, min=1e-9, max=1.0, finite=True)
    distilled_max_length: int = spec("tokens of a (query, document) pair it reads", default=256, min=8, max=32_768)
    heldout_fraction: float = spec("share of LLM-labelled queries held out of its training for the agreement "
                                    "check (disjoint by query)", default=0.2, min=0.0, max=0.9, finite=True)
    split_seed: int = spec("seed of the held-out query draw", default=42, min=0, max=2**31 - 1)
    train_seed: int = spec("seed of the distilled judge's training", default=42, min=0, max=2**31 - 1)
    min_train_pairs: int = spec("fewest LLM labels it trains on (fewer: the distilled pairs stay unjudged, "
                                 "counted)", default=8, min=1, max=10_000_000)
    cut_low: float = spec("raw score below this is 0 (the design: 0.5)", default=0.5, finite=True, min=-1e6,
                           max=1e6)
    cut_high: float = spec("raw score below this is 1, else 2 (the design: 1.5)", default=1.5, finite=True,
                            min=-1e6, max=1e6)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.cut_low < self.cut_high:
            raise RecipematchError(f"judging: cut_low {self.cut_low} must be below cut_high {self.cut_high}")


@dataclass(frozen=True, kw_only=True)
class SaberConfig(_ClientConfig):
    """SABER-Math's labelling of one problem corpus (:mod:`recipematch.saber`; SABER-Math
    Sections 3.2-3.5): topic and summary similarity, three-category candidates, a Swiss
    tournament of pairwise LLM judgments, Bradley-Terry grades in [0, 5]. The judge model
    also writes the core-idea summaries."""

    _section = "saber"

    folder: str = spec("the folder holding this run's files (corpus, ontology, topics, prompts, queries, "
                        "summaries, recordings: each must lie inside it); dvc.yaml tracks it whole", min=1,
                        max_len=2000)
    corpus: str = spec("the problems: a BEIR corpus.jsonl (rows may carry a 'solution' field)", min=1, max_len=2000)
    ontology: str = spec("the topic tree: JSON {node: parent or null}", min=1, max_len=2000)
    topics: str = spec("JSONL {\"_id\", \"topics\": [nodes]} for the problems (their most specific topics; '' "
                        "= assigned by the LLM's top-down walk of the ontology with topic_prompt)", default="",
                        max_len=2000)
    topic_prompt: str = spec("the topic scorer's template, read when topics is '' (a file; slots {{text}} and "
                              "{{tags}}; the answer is JSON {tag: score in [0, 1]}; SABER-Math Appendix F.1 "
                              "gives one); none ships", default="", max_len=2000)
    topic_system_prompt: str = spec("a file holding the topic scorer's system message ('' = none)", default="",
                                     max_len=2000)
    tau_assign: float = spec("a child is kept when its score over the largest of its node's call exceeds this "
                              "(SABER-Math Section 3.2.2: 0.85)", default=0.85, min=0.0, max=0.999999, finite=True)
    judge_prompt: str = spec("the pairwise judge's template (a file; slots {{query}}, {{first}}, {{second}}; the "
                              "answer is A or B, bare or as JSON {\"preferred\": ...}); none ships", min=1,
                              max_len=2000)
    queries: str = spec("JSONL of {\"_id\"} naming the query problems ('' = every problem may be one)", default="",
                         max_len=2000)
    summaries: str = spec("JSONL {\"_id\", \"summary\"} of core-idea summaries ('' = through the LLM with the "
                           "shipped saber_core_idea prompt, reading each row's text and solution)", default="",
                           max_len=2000)
    tau_topic: float = spec("topic-relevance threshold (SABER-Math: 0.858)", default=0.858, min=0.0, max=1.0,
                             finite=True)
    tau_summ: float = spec("summary-relevance threshold (SABER-Math: 0.211)", default=0.211, min=0.0, max=1.0,
                            finite=True)
    k: int = spec("candidates drawn per category and query (SABER-Math: K = 50)", default=50, min=1, max=100_000)
    max_queries: int = spec("queries kept among the eligible, drawn uniformly (SABER-Math: 1,000; 0 = all)",
                             default=1000, min=0, max=10_000_000)
    stratify: bool = spec("draw max_queries evenly over the top-level topics (the root's children; SABER-Math "
                           "Section 3.4) rather than uniformly over all eligible", default=True)
    rounds: int = spec("Swiss tournament rounds (SABER-Math: R = 20)", default=20, min=1, max=10_000)
    both_orders: bool = spec("judge every pair in both orders; disagreeing orders are a failure", default=False)
    bt_alpha: float = spec("L2 regularisation of the Bradley-Terry fit (choix)", default=0.01, min=1e-12, max=1e6,
                            finite=True)
    selection_seed: int = spec("seed of the query and candidate draws", default=42, min=0, max=2**31 - 1)
    tournament_seed: int = spec("seed of the tournaments' pairings (query i uses this + i)", default=42, min=0,
                                 max=2**31 - 1)
    extra_stop_words: tuple[str, ...] = spec("stop words added to scikit-learn's English list for the summary "
                                              "Jaccard (SABER-Math's mathematics list is in its supplement)",
                                              default=())
    max_doc_chars: int = spec("characters of each problem the judge reads", default=30_000, min=1,
                               max=100_000_000)


@dataclass(frozen=True, kw_only=True)
class MeldGenerateConfig(_ClientConfig):
    """One MELD attack row set generated through the LLM backends (:mod:`recipematch.external.meld_generate`;
    paper Section 6, Appendix D): the reconstructed MELD procedure (or the rewritten-prompt control, by
    the entry's name), MELD's validity and equivalence screen, rows in the release's schema. The entry's
    name is the row set (meld9, meld_heldout, meld9alt, meld9altm); point ``attacks.<name>.rows`` at
    ``artifacts/meld_generate/<name>/pairs.jsonl`` to train on them."""

    _section = "meld_generate"

    folder: str = spec("the folder holding this run's files (domains, recordings: each must lie inside it); "
                        "dvc.yaml tracks it whole", min=1, max_len=2000)
    domains: str = spec("the domain table: JSONL {domain, field_1, field_2, connection} per domain pair (MELD's nine "
                         "framing pairs for meld9; the connection texts are the attacker's)", min=1, max_len=2000)
    n_pairs: int = spec("pairs asked for per call (MELD: 30)", default=30, min=1, max=1000)
    rounds: int = spec("calls per domain pair; later rounds pass back the topics already written", default=24,
                        min=1, max=10_000)
    target_pairs: int = spec("stop after the round in which this many pairs have passed the screen (0 = run every "
                              "round)", default=0, min=0, max=10_000_000)
    greedy_first_round: bool = spec("round 1 at temperature 0 (the paper's meld9 arm)", default=True)
    screen: bool = spec("MELD's three-question screen; a pair is kept when both statements are valid and "
                         "equivalent (false: every parsed pair is kept)", default=True)
    negatives: int = spec("same-framing negatives per row, from the run's own kept pool (the paper: 3)", default=3,
                           min=1, max=100)
    direction: str = spec("random: one row per pair, the anchor side drawn; both: a row each way",
                           default="random", choices=("random", "both"))
    row_seed: int = spec("seed of the directions and negatives", default=42, min=0, max=2**31 - 1)
    temperature: float = spec("sampling temperature of the generation rounds after the first (the paper: 1.0; the "
                               "screen runs at 0)", default=1.0, min=0.0, max=2.0, finite=True)
    max_tokens: int = spec("answer length cap in tokens (30 LaTeX pairs need several thousand)", default=8192,
                            min=1, max=131_072)
    model_id: str = spec("the generator model id (it writes and screens the pairs; every row records it)",
                          default="", max_len=300)


@dataclass(frozen=True)
class StatsConfig:
    """Statistics (paper Appendix A: nested bootstrap, B = 5,000)."""

    n_boot: int = spec("bootstrap replicates", min=100, max=100_000)
    seed: int = spec("bootstrap seed", min=0, max=2**32 - 1)
    paired_seeds: bool = spec("resample seed indices shared by both arms (true) or each arm's own (false)")


@dataclass(frozen=True)
class StyleConfig:
    """Style probe and style tracking (paper Appendix C, Tables 13–15)."""

    train_prompt: str = spec("prompt whose rewrites train the detector (paper: D1)", min=1, max_len=100)
    score_prompts: tuple[str, ...] = spec("prompts whose held-out rewrites are scored (Table 13 rows)", min=1)
    test_fraction: float = spec("share of source ids held out", min=0.01, max=0.99, finite=True)
    seed: int = spec("split, bootstrap and query-sampling seed", min=0, max=2**32 - 1)
    n_boot: int = spec("bootstrap replicates over held-out sources (paper: 2,000)", min=100, max=100_000)
    level: float = spec("interval coverage", min=0.5, max=0.999, finite=True)
    C: float = spec("logistic-regression inverse regularisation", min=1e-6, max=1e6, finite=True)
    max_iter: int = spec("logistic-regression iterations", min=10, max=100_000)
    tracking_set: str = spec("declared evaluation whose corpus style tracking ranks", min=1, max_len=64)
    tracking_queries: int = spec("queries sampled for tracking (paper: 2,000)", min=1, max=1_000_000)
    top_k: int = spec("retrieved documents whose style percentile is reported (paper: 10)", min=1, max=10_000)


@dataclass(frozen=True)
class HitsConfig:
    """Hit accounting (paper Section 7): the queries one model alone ranks a gold first on."""

    contrasts: tuple[str, ...] = spec("model pairs 'a - b' whose sole wins are counted on every benchmark set "
                                       "(arms, 'cell' or base/bm25; a pair naming an arm not run is skipped)",
                                       default=("recipe - verified",))
    k: int = spec("a win is a gold within the top k (paper: 1)", default=1, min=1, max=1000)
    probe: str = spec("declared evaluation whose queries give probe discrimination ('' = none)",
                       default="probe", max_len=64)


@dataclass(frozen=True)
class Judge2Config:
    """The second judge of the two-judge control (paper Section 3, Appendix C): another
    vendor's model re-judges every candidate of each LLM arm under the same judge prompt;
    the cells may train on the rows both judges accept. Off by default (the sample ships no
    second-judge answers)."""

    enabled: bool = spec("run the second judge (false: the judge2 stages only record that they are off)",
                          default=False)
    backend: str = spec("replay (recordings/judge2/<prompt>.jsonl) or openai (its own OpenAI-compatible server)",
                         choices=LLM_BACKENDS, default="replay")
    model_id: str = spec("the second judge's model id", default="mistralai/Mistral-Small-24B-Instruct-2501",
                          min=1, max_len=300)
    base_url: str = spec("the second judge's server URL (backend openai)", default="", max_len=2000)
    api_key_env: str = spec("NAME of the environment variable holding its server's API key ('' = none)",
                             default="", max_len=200)
    temperature: float = spec("sampling temperature", default=0.0, min=0.0, max=2.0, finite=True)
    top_p: float = spec("nucleus sampling mass", default=1.0, min=0.0, max=1.0, finite=True)
    max_tokens: int = spec("answer length cap in tokens", default=1024, min=1, max=131_072)
    chat_template_kwargs: dict = spec("sent with every second-judge request", default_factory=dict)
    allow_reasoning_preamble: bool = spec("skip a <think> block or text before the JSON verdict", default=False)
    concurrency: int = spec("requests in flight", default=8, min=1, max=1024)
    max_retries: int = spec("retries per request", default=4, min=0, max=100)
    timeout_s: float = spec("seconds per request", default=300.0, min=0.1, max=86_400.0, finite=True)
    deadline_s: float = deadline_spec()
    max_response_bytes: int = max_response_spec()
    cells: str = spec("the keep set the cells read for LLM pair files: first (the first judge's) or both "
                       "(rows both judges accept; needs enabled: true)", choices=("first", "both"), default="first")

    def __post_init__(self) -> None:
        if self.cells == "both" and not self.enabled:
            raise RecipematchError("judge2.cells: both needs judge2.enabled: true (the two-judge files come from "
                                   "the judge2 stages)")
        if self.enabled and self.backend == "openai" and not self.base_url:
            raise RecipematchError("judge2.base_url: backend openai needs the second judge's server URL "
                                   "(e.g. http://127.0.0.1:8001/v1)")
        if self.api_key_env and not ENV_VAR_NAME.fullmatch(self.api_key_env):
            raise RecipematchError("judge2.api_key_env must be the NAME of an environment variable "
                                   "(letters, digits, _), never the key itself")


@dataclass(frozen=True)
class BacktranslateConfig:
    """The back-translation control (paper Appendix C): NLLB round trips as positives no LLM
    wrote (cells with positives bt = one hop, bt3 = three hops). The stage translates only
    when an arm reads bt or bt3, and only with the model's files present locally."""

    model_dir: str = spec("local folder of the translation model (NLLB-200-distilled-600M in the paper), "
                           "relative to the project root; keep it under mt_models/ so DVC sees new weights",
                           default="mt_models/nllb-200-distilled-600M", min=1, max_len=2000)
    model_id: str = spec("the model id recorded in each row's provenance",
                          default="facebook/nllb-200-distilled-600M", min=1, max_len=300)
    languages: tuple[str, ...] = spec("source languages translated (ISO 639-1 tags); empty = every language "
                                       "NLLB knows; others are dropped and counted", default=())
    default_language: str = spec("tag for corpus rows without a language ('' = such rows are dropped and "
                                  "counted as unsupported_language)", default="", max_len=20)
    max_sources: int = spec("sources translated, in source-id order (0 = all)", default=0, min=0,
                             max=10_000_000)
    batch_size: int = spec("lines per generate call", default=16, min=1, max=65_536)
    num_beams: int = spec("beam width (1 = greedy)", default=4, min=1, max=64)
    max_input_tokens: int = spec("input tokens per line (longer lines are cut)", default=512, min=4,
                                  max=32_768)
    max_new_tokens: int = spec("output tokens per line", default=512, min=1, max=32_768)

    def __post_init__(self) -> None:
        if Path(self.model_dir).is_absolute() or ".." in Path(self.model_dir).parts:
            raise RecipematchError(f"backtranslate.model_dir must be a folder inside the project, got {short_repr(self.model_dir, 120)}")


@dataclass(frozen=True)
class DevicesConfig:
    """Where each kind of work runs: execution only, like ``engine``, so no stage declares it
    and a device edit reruns nothing (the numbers of another device can differ in the last
    float bits; paper Appendix A ran bf16 on GPUs). Every stage may read it."""

    train: str = spec("where the train and mix stages fine-tune: cpu, cuda or mps", choices=DEVICES, default="cpu")
    evaluate: str = spec("where trained, souped and base models encode (evaluate, pooling, soups, style)",
                         choices=DEVICES, default="cpu")
    cosine_gate: str = spec("where the cosine gate's base-model encoder runs (cells, validate, train)",
                            choices=DEVICES, default="cpu")
    backtranslate: str = spec("where the back-translation model runs", choices=DEVICES, default="cpu")
    distilled_judge: str = spec("torch device of the judging stages' distilled judge (cpu, cuda, cuda:N or mps)",
                                default="cpu", min=1, max_len=32)


ENGINE_KINDS = ("local", "ray")


@dataclass(frozen=True)
class EngineConfig:
    """Where the (arm, seed) units of the train and evaluate stages run (paper Section 3:
    every arm over 8 training seeds). Execution only: results do not depend on it, so it is
    no DVC param of any stage (see :mod:`recipematch.engine`)."""

    kind: str = spec("local (units one after another in the stage's process) or ray (Ray tasks)",
                      choices=ENGINE_KINDS, default="local")
    address: str = spec("ray: '' starts Ray on this machine; the head's HOST:PORT joins a running cluster "
                         "(run the stage on a node of it)", default="", max_len=500)
    workers: int = spec("units running at once (ray)", default=1, min=1, max=4096)
    num_cpus: int = spec("CPUs reserved per unit (ray); also the unit's torch threads", default=1, min=1, max=1024)
    num_gpus: float = spec("GPUs reserved per unit (ray; 0.5 puts two units on one GPU)", default=0.0, min=0.0,
                            max=64.0, finite=True)
    connect_timeout_s: float = spec("seconds to wait for engine.address to answer", default=10.0, min=0.1,
                                     max=600.0, finite=True)
    retries: int = spec("times Ray reruns a unit whose worker died (0: the stage fails; its rerun redoes only the "
                         "unfinished units)", default=0, min=0, max=100)


@dataclass(frozen=True)
class MlflowConfig:
    """Tracking store; a relative sqlite path is resolved against the project root."""

    tracking_uri: str = spec("sqlite:///PATH, http(s)://HOST:PORT or file:PATH", min=1, max_len=2000)
    experiment: str = spec("experiment name", min=1, max_len=200)


@dataclass(frozen=True)
class DataConfig:
    """Where the organic source problems come from (paper Section 3)."""

    source: str = spec("sample (the shipped 2,500-problem sample), mathnet (the full MathNet corpus, a "
                        "local Hugging Face dataset folder) or jsonl (any organic pool: one JSON object per "
                        "line with id and text)", choices=("sample", "mathnet", "jsonl"))
    path: str = spec("file or folder of that source, relative to the project root", min=1, max_len=2000)
    retrieve: str = spec("local MathNet-Retrieve folder (easy/, medium/, hard/ as on the Hugging Face hub), "
                          "relative to the project root; the evalsets stage writes its tiers to "
                          "artifacts/evalsets/mathnet_retrieve/<tier> for declared evaluations ('' = none)",
                          default="", max_len=2000)
