#!/usr/bin/env bash
# Does `dvc exp run --queue` + `dvc queue start -j 2` keep every MLflow run?
# Builds a throwaway DVC project whose one stage logs one MLflow run per (cell, seed) through
# the project's own tracking code (recipematch.tracking under the store lock, the store path
# resolved by recipematch.pipeline.inputs.mlflow_uri, tags from run_tags), the way the train
# stage logs; queues a grid of 4 cells, runs 2 at a time, and lists the runs found in the
# project's mlflow.db. Needs the project's .venv (or VENV=...). A few minutes on 2 cores.
#   bash benchmarks/dvc_queue_check.sh [WORKDIR]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VENV:-$here/.venv}"
work="${1:-$(mktemp -d)}"
export PATH="$venv/bin:$PATH" PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}" DVC_NO_ANALYTICS=1 MLFLOW_DISABLE_TELEMETRY=true
rm -rf "$work" && mkdir -p "$work" && cd "$work"
git init -q && git config user.email check@localhost && git config user.name check
dvc init -q
printf 'cell: a\nseeds: 3\n' > params.yaml
cat > log_cell.py <<'PY'
"""Stand-in stage: one MLflow run per (cell, seed), logged as the train stage logs."""
import json
from pathlib import Path

from mlflow.entities import Metric

from recipematch import tracking
from recipematch.config import load_yaml
from recipematch.pipeline.door import Layout
from recipematch.pipeline.inputs import mlflow_artifacts, mlflow_uri, run_tags

p = load_yaml("params.yaml")
lay = Layout(Path.cwd())
uri = mlflow_uri("sqlite:///mlflow.db", lay)  # the real project's store, also from .dvc/tmp/exps/
c, exp = tracking.open_store(uri, "grid", artifact_location=mlflow_artifacts(lay))
for s in range(p["seeds"]):
    with tracking.store_lock(uri):
        rid, _ = tracking.find_or_create_run(c, exp, f"{p['cell']}-{s}", f"cell-{p['cell']}-seed{s}",
                                             {"cell": p["cell"], "seed": str(s), **run_tags(p)})
        c.log_batch(rid, metrics=[Metric("score", float(s), 0, 0)])
        c.set_terminated(rid, "FINISHED")
Path("out").mkdir(exist_ok=True)
Path("out/result.json").write_text(json.dumps({"cell": p["cell"]}))
PY
cat > dvc.yaml <<YAML
stages:
  log:
    cmd: $venv/bin/python log_cell.py
    deps: [log_cell.py]
    params: [cell, seeds]
    outs: [out]
YAML
printf 'mlflow.db\nmlflow.db.lock\nmlruns/\n' > .gitignore
git add -A && git commit -qm grid
for x in a b c d; do dvc exp run --queue -S cell=$x -n cell-$x; done
dvc queue start -j 2
for _ in $(seq 1 200); do
  sleep 3
  status="$(dvc queue status 2>&1)"
  grep -qE 'Queued|Running' <<<"$status" || break
done
echo "$status"
dvc queue stop >/dev/null  # the idle queue worker goes too
python - <<'PY'
import sqlite3
con = sqlite3.connect("mlflow.db")
rows = con.execute("""select r.name, r.status,
  max(case when t.key='dvc_exp' then t.value end), max(case when t.key='params_sha256' then t.value end)
  from runs r join tags t on t.run_uuid = r.run_uuid group by r.run_uuid order by r.name""").fetchall()
for r in rows:
    print(*r)
ok = len(rows) == 12 and all(r[1] == "FINISHED" and r[2] == r[0].rsplit("-", 1)[0] for r in rows)
print(f"{len(rows)} runs in {con.execute('pragma database_list').fetchall()[0][2]}: {'OK' if ok else 'MISSING RUNS'}")
raise SystemExit(0 if ok else 1)
PY
