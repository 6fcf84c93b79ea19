"""Audit any LLM-built retrieval benchmark: its recipe-sensitivity number (the paper's
practice (iv) for builders, Section 8: "publish a recipe-sensitivity number, how much a model
gains by matching the recipe"; the arms of Section 3 and Table 1; the statistics of
Appendix A; the style probe of Appendix C).

An audit is **not a second pipeline**: :func:`init_audit` writes a DVC project whose
``dvc.yaml`` runs recipematch's own stages (``recipematch corpus``, ``gates``, ``llm``,
``cells``, ``train``, ``evaluate-*``, ``stats`` … the same click commands as
``stages/<name>.py``) and whose ``params.yaml`` has the keys of the main ``params.yaml``
(checked by :func:`recipematch.config.parse_params` before it is written). What makes it an
audit is params only:

* ``data: {source: jsonl, path: data/sources.jsonl}``: the user's organic pool is the corpus;
* ``evaluations.benchmark``: the user's BEIR folder, ``role: benchmark`` (and
  ``evaluations.real``, ``role: real``, when a generator-free set is given);
  ``evalsets.n_heldout: 0`` (no embedded tier is built);
* ``llm.prompts: [d1_recipe, <control>]`` with ``llm.recipe_prompt`` naming the user's recipe
  sidecar (``''``: the shipped D1 is the recipe);
* ``arms: [recipe, cell]`` with ``positives: <control>``, ``negatives: recipe``,
  ``negatives_volume: full``: the **recipe** arm trains on recipe positives × recipe
  near-misses, the **control** (``cell``) on control positives × the *same* recipe
  near-misses, same sources pool, same LLM, same matched budget and seeds.

The recipe-sensitivity number is the gap ``recipe − cell`` in benchmark R@1 (percentage
points) with its nested-bootstrap interval (queries within seeds, Appendix A): the contrast
``recipe - cell`` that the audit declares under ``contrasts``, computed by the ``stats`` stage
like every contrast of the main pipeline (``metrics/stats.json``: its gap, its DiD against the
real set, each model's R@1), and read from there by the ``audit-report`` stage.

``audit.json`` (written by the ``audit-report`` stage; every number computed by the run):

.. code-block:: text

    schema              "recipematch.audit/1"
    recipe_sensitivity  {metric: "R@1", evaluation, contrast: "recipe - cell", units: "points",
                         estimate, low, high, level, n_boot, seeds: independent|paired|single_run,
                         n_seeds_a, n_seeds_b, n_queries}      # the number and its 95% interval
    did                 null, or {real, estimate, low, high, level, gap_real: {estimate, low, high}}
                        # (recipe − cell on the benchmark) − (recipe − cell on the real set)
    style_probe         {auc, low, high, auc_unstripped, low_unstripped, high_unstripped, n_pos,
                         n_neg, n_test_sources}  # organic queries vs the benchmark's gold documents,
                                                 # split by source (Appendix C, artefacts stripped)
    scores              {model: {"<set>.R@1": {mean, sd, per_seed}}} for base, bm25, recipe, cell
    arms                {recipe: {cell, prompt}, cell: {cell, prompt}}
    seeds               [training seeds]
    budget              {rows, dev_fraction, max_rows_per_source}
    model               {base_model, generator, judge, backend, base_url}
    prompts             {recipe: {name, sha256}, control: {name, sha256}, judge: {name, sha256}}
    data                {benchmark: {folder, corpus_sha256, queries_sha256, qrels_sha256, queries,
                         documents}, sources: {path, sha256, rows}, real: {...} | null}
    gates               {sources, sources_kept, sources_removed}   # the gates stage's count
    pairs               {d1_recipe: rows, <control>: rows}
    recipematch_version

Command line: ``recipematch audit init WORKDIR --benchmark DIR --recipe d1_recipe|FILE.prompt.yaml
--sources FILE.jsonl (--base-url URL --model NAME [--api-key-env VAR] | --replay DIR) [--real DIR
[--real-rule RULE]] [--also NAME=DIR[:RULE]] [--control PROMPT] [--base-model M] [--seeds N]
[--rows N] [--template PARAMS]``, then ``cd WORKDIR && dvc repro``.

The API key: only the *name* of its environment variable (``llm.api_key_env``) is written
anywhere; the key itself is read by the backend at request time.

Modules: :mod:`recipematch.audit.checks` (input checks), :mod:`recipematch.audit.project`
(params, the generated ``dvc.yaml``, :func:`init_audit`), :mod:`recipematch.audit.measure`
(the style probe, prompt identities), :mod:`recipematch.audit.report` (the report
and its plot).
"""

from __future__ import annotations

from recipematch.audit.checks import check_benchmark, check_recipe, check_sources, read_sources
from recipematch.audit.measure import prompt_identity, style_probe_benchmark
from recipematch.audit.project import (
    ALSO_DIR,
    AUDIT_ARMS,
    AUDIT_CONTRAST,
    BEIR_FILES,
    BENCHMARK_DIR,
    REAL_DIR,
    RECIPE_DIR,
    REPLAY_DIR,
    SOURCES_FILE,
    audit_dvc_yaml,
    audit_params,
    control_positives,
    default_template,
    init_audit,
    template_params,
)
from recipematch.audit.report import SCHEMA, json_dumps, plot_audit, render_report

__all__ = [
    "ALSO_DIR",
    "AUDIT_ARMS",
    "AUDIT_CONTRAST",
    "BEIR_FILES",
    "BENCHMARK_DIR",
    "REAL_DIR",
    "RECIPE_DIR",
    "REPLAY_DIR",
    "SCHEMA",
    "SOURCES_FILE",
    "audit_dvc_yaml",
    "audit_params",
    "check_benchmark",
    "check_recipe",
    "check_sources",
    "control_positives",
    "default_template",
    "init_audit",
    "json_dumps",
    "plot_audit",
    "prompt_identity",
    "read_sources",
    "render_report",
    "style_probe_benchmark",
    "template_params",
]
