"""Stage ``meld_generate@<name>``: one MELD attack row set generated through the LLM backends
(:mod:`recipematch.external.meld_generate`; paper Section 6, Appendix D).

Each round sends one generation call per domain pair still running (one batch), then one
screen call per new pair (a second batch), all through the call store
``cache/meld_generate/<name>/calls.jsonl`` (replay: ``replay-<recordings hash>.jsonl``), so an
interrupted run resumes without paying twice and a replayed run gives the same rows byte for byte.

Writes ``artifacts/meld_generate/<name>/`` (``pairs.jsonl`` in the release's row schema, which
``attacks.<name>.rows`` can name; ``raw.jsonl``, every parsed pair with its screen verdict;
``failures.jsonl``; ``MANIFEST.json``) and ``metrics/meld_generate/<name>.json``.
"""

from __future__ import annotations

import hashlib
import json

import click

from recipematch.errors import RecipematchError
from recipematch.external.meld_attack import attack_prompt_sha256
from recipematch.external.meld_generate import build_rows, parse_generation, parse_screen, read_domains, statement_key
from recipematch.io import building_dir, write_json, write_jsonl
from recipematch.llm.backends import GenerationRequest
from recipematch.llm.prompts import load_prompt, load_prompt_parts
from recipematch.llm.asker import StoredAsker, failure_counts, top_counts
from recipematch.llm.serving import check_recordings
from recipematch.pipeline.door import StagePaths, progress_option, stage
from recipematch.rules import MELD_ATTACK_SYSTEM

PARAMS = ("meld_generate",)
SCREEN = "meld_screen"

name_option = click.option("--name", "name", required=True, help="A row set named in params.yaml `meld_generate`.")


def run(p, lay: StagePaths, *, name: str, progress: bool = True) -> dict:
    """Generate, screen and write one MELD attack row set (Appendix D)."""
    if name not in p.meld_generate:
        raise RecipematchError(f"--name {name!r}: not declared in params.yaml meld_generate "
                               f"(declared: {sorted(p.meld_generate)})")
    mc = p.meld_generate[name]
    where = f"meld_generate.{name}"
    domains_path = lay.root / mc.domains
    if not domains_path.is_file():
        raise RecipematchError(f"{where}.domains: {domains_path} does not exist")
    domains = read_domains(domains_path, f"{where}.domains")
    recordings = (lay.root / mc.recordings) if mc.recordings else None
    check_recordings(mc, recordings, where)
    system_name = MELD_ATTACK_SYSTEM[name]
    turns = {rnd: load_prompt_parts(f"{system_name}:{turn}", f"{system_name}.system.txt",
                                    f"meld_generate.user_{turn}.txt") for rnd, turn in ((1, "first"), (2, "later"))}
    screen = load_prompt(SCREEN)
    gen_sha = attack_prompt_sha256(system_name)
    screen_sha = screen.sha256
    group = name.removeprefix("meld_")
    asker = StoredAsker(mc, recordings, where, lay.scratch, progress=progress)
    ask = asker.ask

    def sampling(temperature: float) -> dict:
        return {"temperature": temperature, "top_p": mc.top_p, "max_tokens": mc.max_tokens}

    def screen_request(c: dict) -> GenerationRequest:
        system, user = screen.render(framing_1=c["field_1"], statement_1=c["statement_1"], framing_2=c["field_2"],
                                     statement_2=c["statement_2"])
        # keyed by the pair's content, not its running id: a resumed or extended run never re-asks
        return GenerationRequest(
            prompt_name=f"meld_screen_{name}", prompt_sha256=screen_sha, system=system, user=user,
            source_id=f"{c['field_1']}|{c['field_2']}",
            variant=hashlib.sha256(json.dumps([c["statement_1"], c["statement_2"]]).encode()).hexdigest()[:16],
            sampling=sampling(0.0), seed=mc.seed, model_id=mc.model_id)

    covered: list[list[str]] = [[] for _ in domains]
    seen: set[str] = set()
    raw_rows, kept, failures = [], [], []
    calls = {"generate": 0, "screen": 0}
    rounds_run = 0
    try:
        for rnd in range(1, mc.rounds + 1):
            if mc.target_pairs and len(kept) >= mc.target_pairs:
                break
            rounds_run = rnd
            temp = 0.0 if (rnd == 1 and mc.greedy_first_round) else mc.temperature
            reqs = []
            for i, d in enumerate(domains):
                slots = {"field_1": d["field_1"], "field_2": d["field_2"], "connection": d["connection"],
                         "n_pairs": mc.n_pairs}
                if rnd > 1:
                    slots["covered"] = "\n".join(f"- {t}" for t in covered[i]) or "(none)"
                system, user = turns[min(rnd, 2)].render(**slots)
                reqs.append(GenerationRequest(
                    prompt_name=f"meld_generate_{name}", prompt_sha256=gen_sha, system=system,
                    user=user, source_id=f"{d['field_1']}|{d['field_2']}", variant=rnd, sampling=sampling(temp),
                    seed=mc.seed, model_id=mc.model_id))
            calls["generate"] += len(reqs)
            fresh = []
            for i, (d, rec) in enumerate(zip(domains, ask(reqs, f"meld_generate@{name} round {rnd}"))):
                if rec.get("error"):
                    failures.append({"step": "generate", "domain": d["domain"], "round": rnd,
                                     "reason": f"call_failed: {rec['error']}"})
                    continue
                pairs, rejects, why = parse_generation(rec["raw_text"], d["field_1"], d["field_2"])
                if why:
                    failures.append({"step": "generate", "domain": d["domain"], "round": rnd, "reason": why})
                for r in rejects:
                    failures.append({"step": "pair", "domain": d["domain"], "round": rnd, "reason": r})
                for _extra in pairs[mc.n_pairs:]:  # more than asked for: counted, never screened or paid for
                    failures.append({"step": "pair", "domain": d["domain"], "round": rnd,
                                     "reason": f"extra: beyond the n_pairs={mc.n_pairs} asked for"})
                for pair in pairs[: mc.n_pairs]:
                    covered[i].append(pair["topic"])
                    keys = (statement_key(pair["statement_1"]), statement_key(pair["statement_2"]))
                    if keys[0] == keys[1] or keys[0] in seen or keys[1] in seen:
                        failures.append({"step": "pair", "domain": d["domain"], "round": rnd,
                                         "reason": "duplicate: the two statements are the same" if keys[0] == keys[1]
                                         else "duplicate: a statement already written"})
                        continue
                    seen.update(keys)
                    fresh.append({"source_id": f"meldgen-{group}-{len(raw_rows) + len(fresh):06d}",
                                  "domain": d["domain"], "field_1": d["field_1"], "field_2": d["field_2"],
                                  "round": rnd, **pair})
            if mc.screen and fresh:
                sreqs = [screen_request(c) for c in fresh]
                calls["screen"] += len(sreqs)
                verdicts = ask(sreqs, f"meld_generate@{name} screen {rnd}")
            else:
                verdicts = [None] * len(fresh)
            for c, rec in zip(fresh, verdicts):
                if rec is None:
                    c["screen"], c["kept"] = None, True
                else:
                    v, why = (None, f"call_failed: {rec['error']}") if rec.get("error") else parse_screen(rec["raw_text"])
                    if v is None:
                        failures.append({"step": "screen", "source_id": c["source_id"], "domain": c["domain"],
                                         "round": rnd, "reason": why})
                    c["screen"] = v
                    c["kept"] = bool(v and v["entry_1_valid"] and v["entry_2_valid"] and v["equivalent"])
                raw_rows.append(c)
                if c["kept"]:
                    kept.append(c)
    finally:
        asker.close()
    rows, row_counts = build_rows(kept, group=group, generator_model=mc.model_id, negatives=mc.negatives,
                                  direction=mc.direction, seed=mc.row_seed, generated_by=f"meld_generate@{name}")
    screened_out = sum(1 for c in raw_rows if c["screen"] is not None and not c["kept"])
    reasons = failure_counts(failures)
    counts = {"domain_pairs": len(domains), "rounds_run": rounds_run, "calls": calls, "pairs_parsed": len(raw_rows),
              "pairs_screened_out": screened_out, "pairs_kept": len(kept), **row_counts,
              "by_domain": {d["domain"]: sum(1 for c in kept if c["domain"] == d["domain"]) for d in domains},
              "could_be_less_similar": sum(1 for c in kept if c["screen"] and c["screen"]["could_be_less_similar"]),
              "failures": reasons, "n_failures": len(failures),
              "prompt": MELD_ATTACK_SYSTEM[name], "prompt_sha256": gen_sha, "screen_prompt_sha256": screen_sha,
              "model_id": mc.model_id}
    with building_dir(lay.out) as tmp:
        write_jsonl(tmp / "pairs.jsonl", rows)
        write_jsonl(tmp / "raw.jsonl", raw_rows)
        write_jsonl(tmp / "failures.jsonl", failures)
        write_json(tmp / "MANIFEST.json", {"group": group, **{k: counts[k] for k in (
            "prompt", "prompt_sha256", "screen_prompt_sha256", "model_id", "pairs_kept", "rows")},
            "settings": {"n_pairs": mc.n_pairs, "rounds": mc.rounds, "target_pairs": mc.target_pairs,
                         "greedy_first_round": mc.greedy_first_round, "screen": mc.screen,
                         "negatives": mc.negatives, "direction": mc.direction, "row_seed": mc.row_seed}})
    write_json(lay.metrics, counts)
    if not rows:  # written first: the failures say why, the call store keeps every answer
        top = top_counts(reasons)
        raise RecipematchError(f"{where}: no row came out ({len(raw_rows)} pairs parsed, {len(kept)} kept, "
                               f"{row_counts['rows_short_of_negatives']} short of negatives; failures: {top}); see "
                               f"{lay.rel(lay.out / 'failures.jsonl')}")
    return counts


main = stage("meld_generate", PARAMS, name_option, progress_option,
             reads=(), writes=("scratch", "out", "metrics"))(run)
