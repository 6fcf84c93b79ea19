"""Stage ``recordings``: replay recordings built from the peer's released, judge-kept D1 and
D4 rows (paper Section 3): the embedded default's LLM answers, no text invented."""

from __future__ import annotations

from recipematch.errors import RecipematchError
from recipematch.io import read_jsonl_strict, write_json, write_jsonl
from recipematch.llm.recordings import build_recordings
from recipematch.pipeline.door import StagePaths, stage, write_run_record
from recipematch.pipeline.inputs import corpus_rows
from recipematch.rules import RELEASE_FILES, negatives_for_prompt

PARAMS = ("llm.model_id", "llm.judge_model_id", "llm.n_pos", "llm.n_neg")


def run(p, lay: StagePaths) -> dict:
    """Stage 4b: replay recordings from the peer's released LLM rows (no text invented)."""
    cfg = p.llm
    texts = {r["doc_id"]: r["text"] for r in corpus_rows(lay)}
    records, counts = [], {}
    for prompt, fname in sorted(RELEASE_FILES.items()):
        rows = read_jsonl_strict(lay.release / fname)
        try:
            recs = build_recordings(rows, texts, prompt, n_pos=cfg.n_pos, n_neg=negatives_for_prompt(prompt, cfg.n_neg),
                                    model_id=cfg.model_id, judge_model_id=cfg.judge_model_id)
        except ValueError as e:  # a release row that does not fit this corpus: name the file
            raise RecipematchError(f"{lay.release / fname}: {e}") from None
        records.extend(recs)
        counts[prompt] = {"release_rows": len(rows), "recordings": len(recs)}
    write_jsonl(lay.out / "recordings.jsonl", records)
    write_json(lay.metrics, counts)
    write_run_record(lay.out, "recordings",
                     {"model_id": cfg.model_id, "judge_model_id": cfg.judge_model_id, "n_pos": cfg.n_pos,
                      "n_neg": cfg.n_neg},
                     {f: lay.release / f for f in RELEASE_FILES.values()}, counts)
    return counts



main = stage("recordings", PARAMS, reads=("corpus", "release"), writes=("out", "metrics"))(run)
