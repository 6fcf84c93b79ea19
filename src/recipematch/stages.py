"""Stage implementations behind ``recipematch <stage>`` and the thin ``stages/*.py`` entry
points that ``dvc.yaml`` calls: one module per stage in :mod:`recipematch.pipeline` (each is a
dependency of its own DVC stage, so editing one stage reruns only that stage and what follows),
re-exported here.

Each ``run_<stage>`` takes the parsed params mapping and a :class:`Layout` (every input and
output path of the pipeline, relative to the project root, the same paths ``dvc.yaml``
declares) and writes only that stage's declared outputs, plus a run record
(``<out>/run_record.json``: resolved config, git revision, package versions, input hashes,
counts). Every count of dropped or failed rows lands in ``metrics/``.
"""

from recipematch.pipeline.cells import run_cells, run_specs
from recipematch.pipeline.common import RELEASE_FILES, Layout, train_seeds
from recipematch.pipeline.corpus import run_corpus
from recipematch.pipeline.evalsets import run_evalsets
from recipematch.pipeline.evaluate import TESTS, run_evaluate
from recipematch.pipeline.gates import run_gates
from recipematch.pipeline.llm import run_llm, run_recordings
from recipematch.pipeline.report import run_report
from recipematch.pipeline.stats import run_stats
from recipematch.pipeline.train import run_train
from recipematch.pipeline.validate import run_validate
from recipematch.pipeline.verified import run_verified

__all__ = ["Layout", "RELEASE_FILES", "TESTS", "run_cells", "run_corpus", "run_evalsets", "run_evaluate", "run_gates",
           "run_llm", "run_recordings", "run_report", "run_specs", "run_stats", "run_train", "run_validate",
           "run_verified", "train_seeds"]
