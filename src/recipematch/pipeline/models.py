"""From a stage's typed params to the model-backed pieces: the base model, its encoder, and
the one contamination gate (paper Section 3, Appendix B)."""

from __future__ import annotations

from recipematch.errors import RecipematchError
from recipematch.io import read_json
from recipematch.gates import ContaminationGate, CosineGate, NgramGate
from recipematch.base_models import resolve_model  # noqa: F401 - re-exported: the stage modules' name for it
from recipematch.pipeline.door import StagePaths
from recipematch.pipeline.inputs import heldout_sources, load_exclusion


def eval_texts(lay: StagePaths) -> list[str]:
    """Every evaluation text the gates stage collected from the declared evaluations."""
    return list(read_json(lay.gates / "eval_texts.json")["texts"])


def check_lengths(p) -> None:
    """Refuse ``evaluate.max_seq_length``, ``train.max_seq_length`` or
    ``gates.cosine_max_seq_length`` longer than the base model ``train.model`` can take (its
    positions, read from the model folder's JSON files:
    :func:`recipematch.retrieval.encoders.folder_position_limit`). The paper encodes at 1,024
    tokens (Appendix A) with a base that has the positions; the packaged MiniLM has 512.
    A model that cannot be resolved here is left to the stage that loads it (and to
    ``recipematch plan``).

    Raises:
        RecipematchError: naming the key, the value, the model and its limit.
    """
    check_length(p.train.model, ("evaluate.max_seq_length", p.evaluate.max_seq_length),
                 ("train.max_seq_length", p.train.max_seq_length),
                 ("gates.cosine_max_seq_length", p.gates.cosine_max_seq_length))


def check_length(model: str, *settings: tuple[str, int]) -> None:
    """Refuse any ``(params key, tokens)`` of ``settings`` longer than ``model`` (a
    ``train.model`` value) can take; see :func:`check_lengths`.

    Raises:
        RecipematchError: naming the key, the value, the model and its limit.
    """
    from recipematch.retrieval.encoders import folder_position_limit  # lazy: recipematch.retrieval.encoders pulls in pandas, torch

    try:
        path = resolve_model(model)
    except RecipematchError:
        return
    limit = folder_position_limit(path)
    if limit is None:
        return
    for key, n in settings:
        if n > limit:
            raise RecipematchError(f"{key}: {n} is longer than model {model} can take ({limit} positions); "
                                   f"set it to at most {limit}")


def encoder(model: str, *, max_seq_length: int, batch_size: int, device: str, dtype: str, query_prompt: str = ""):
    """A memoised sentence-transformers encoder of ``model`` (a resolved path), encoding in
    ``dtype`` (``float32`` or ``bfloat16``; the paper evaluates in bf16, Appendix A); a
    non-empty ``query_prompt`` is prefixed to queries only (Appendix E: V2 is scored with the
    instruction it was trained with, ``train.query_instruction``)."""
    from recipematch.retrieval import MemoisedEncoder, SentenceTransformerEncoder  # lazy: tests monkeypatch recipematch.retrieval.SentenceTransformerEncoder

    return MemoisedEncoder(SentenceTransformerEncoder(model, max_seq_length=max_seq_length, batch_size=batch_size,
                                                      device=device, dtype=dtype, query_prompt=query_prompt or None))


def contamination_gate(p, lay: StagePaths, *, cosine: bool = True):
    """The one contamination gate (paper Section 3, Appendix B) from the stage's params:
    ``gates`` (all keys), and for the cosine check the base model ``train.model`` encoded
    with the gate's own settings ``gates.cosine_max_seq_length`` / ``cosine_batch_size`` /
    ``cosine_dtype``, on ``devices.cosine_gate`` (so an evaluation edit never reruns the gate).

    Returns:
        ``(gate, exclusion_path)``.
    """
    from recipematch.retrieval import encode_cached  # lazy: recipematch.retrieval pulls in pandas, torch

    g = p.gates
    ex, ex_path = load_exclusion(lay, g.active)
    texts = eval_texts(lay)
    ngram = NgramGate(texts, n=g.ngram_n, threshold=g.ngram_threshold)
    cos = None
    if cosine:
        check_length(p.train.model, ("gates.cosine_max_seq_length", g.cosine_max_seq_length))
        enc = encoder(resolve_model(p.train.model), max_seq_length=g.cosine_max_seq_length,
                      batch_size=g.cosine_batch_size, device=p.devices.cosine_gate, dtype=g.cosine_dtype)
        cos = CosineGate(encode_cached(enc, texts, lay.cache), enc, threshold=g.cosine_threshold,
                         encode=lambda batch: encode_cached(enc, batch, lay.cache) if len(batch) > 64 else enc.encode(batch))
    return ContaminationGate(ex, ngram, heldout_sources(lay), cos), ex_path


