"""Stage ``external@<name>``: one external benchmark (paper Section 6, Tables 20 and 22) built
from its local copy into BEIR folders, ``artifacts/external/<name>/<subset>/`` (each with the
loader's ``MANIFEST.json``: source, revision, licence, counts), and its counts to
``metrics/external/<name>.json``. The loaders are :mod:`recipematch.external`; nothing
downloads. Every subset is checked before any is written, and the folder is swapped in whole.
An ``evaluations:`` entry with ``role: external`` then scores a subset like any other set.
"""

from __future__ import annotations

import shutil

import click

from recipematch.errors import RecipematchError
from recipematch.external.impliret import build_folders
from recipematch.io import write_json
from recipematch.pipeline.door import StagePaths, stage

PARAMS = ("external",)

name_option = click.option("--name", "name", required=True, help="An external benchmark named in params.yaml `external`.")


def run(p, lay: StagePaths, *, name: str) -> dict:
    """Build the BEIR folders of external benchmark ``name`` (Section 6)."""
    if name not in p.external:
        raise RecipematchError(f"--name {name!r}: not declared in params.yaml external (declared: {sorted(p.external)})")
    ex = p.external[name]
    copy = lay.root / ex.copy
    if not copy.is_dir():
        raise RecipematchError(f"external.{name}.copy: {copy} does not exist (a local copy of the benchmark; "
                               f"nothing downloads: copy it there, or `dvc pull` it)")
    out = lay.out
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if ex.loader == "impliret":
            manifests = build_folders(copy, tmp, ex.subsets, revision=ex.revision, max_rows=ex.max_rows or None)
        elif ex.loader == "mirb":
            from recipematch.external.mirb import build_folder, read_task  # lazy: each branch imports its own build_folder

            for s in ex.subsets:  # every task checked before any folder is written
                read_task(copy / s)
            manifests = {s: build_folder(copy, tmp / s, s, revision=ex.revision) for s in ex.subsets}
        elif ex.loader == "sabermath":
            from recipematch.external.sabermath import build_folder, read_copy  # lazy: each branch imports its own build_folder

            rows = read_copy(copy, max_rows=ex.max_rows or None)  # checked once, before any folder is written
            manifests = {s: build_folder(copy, tmp / s, s, revision=ex.revision, max_rows=ex.max_rows or None,
                                         rows=rows) for s in ex.subsets}
        elif ex.loader == "meld":
            from recipematch.external.meld import build_folder  # lazy: each branch imports its own build_folder

            manifests = {s: build_folder(copy, tmp / s, s, revision=ex.revision) for s in ex.subsets}
        else:
            from recipematch.external.bright import build_folder  # lazy: recipematch.external.bright pulls in pandas

            manifests = {s: build_folder(copy, tmp / s, s, revision=ex.revision) for s in ex.subsets}
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing half-written
        raise
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    counts = {"loader": ex.loader, "copy": ex.copy, "subsets": {
        s: {k: m[k] for k in sorted(m) if k.startswith("n_")} for s, m in manifests.items()}}
    write_json(lay.metrics, counts)
    return counts


main = stage("external", PARAMS, name_option, reads=(), writes=("out", "metrics"))(run)
