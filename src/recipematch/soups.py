"""WiSE-FT weight-space soups of a trained checkpoint with its untrained base (paper
Appendix E, Table 19): ``θ_α = α·θ_ft + (1 − α)·θ_base``, α the share of the trained weights
(the paper blends at α ∈ {0.3, 0.5, 0.7}).

Every floating-point tensor is blended in float64 and cast back to its own dtype, so α = 1
gives the trained tensor and α = 0 the base tensor bit for bit, and α = 0.5 the elementwise
mean. Tensors that are not floating point (integer buffers such as position ids) must be
equal in both models and are kept.

A LoRA checkpoint (training with adapters, Table 2) keeps the base weights untouched and adds
``s·B·A`` to each adapted matrix; its soup is the same checkpoint with every ``lora_B`` scaled
by α, which adds ``α·s·B·A``: the same blend.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError
from recipematch.training import save_checkpoint

__all__ = ["blend_state_dicts", "build_soup", "is_lora_checkpoint"]


def _check_alpha(alpha: float) -> float:
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:
        raise RecipematchError(f"a soup's alpha must lie in [0, 1], got {alpha!r}")
    return alpha


def blend_state_dicts(finetuned: Mapping[str, Any], base: Mapping[str, Any], alpha: float) -> dict[str, Any]:
    """``α·finetuned + (1 − α)·base`` tensor by tensor.

    Args:
        finetuned, base: ``{name: torch.Tensor}`` of two models of one architecture.
        alpha: share of the fine-tuned weights, in [0, 1].

    Returns:
        A new state dict with the fine-tuned one's names, shapes and dtypes.

    Raises:
        RecipematchError: the names or shapes differ, a non-floating tensor differs, or alpha
            lies outside [0, 1].
    """
    import torch

    alpha = _check_alpha(alpha)
    if set(finetuned) != set(base):
        only_ft, only_base = sorted(set(finetuned) - set(base)), sorted(set(base) - set(finetuned))
        raise RecipematchError(f"the trained and base models differ in their tensors (only trained: {only_ft[:5]}, "
                               f"only base: {only_base[:5]}): a soup needs one architecture")
    out = {}
    for name, ft in finetuned.items():
        b = base[name]
        if ft.shape != b.shape:
            raise RecipematchError(f"tensor {name}: shape {tuple(ft.shape)} in the trained model, {tuple(b.shape)} "
                                   f"in the base")
        if not torch.is_floating_point(ft):
            if not torch.equal(ft, b.to(ft.device)):
                raise RecipematchError(f"tensor {name} ({ft.dtype}) differs between the trained and base models and "
                                       f"cannot be blended")
            out[name] = ft.clone()
            continue
        mix = alpha * ft.detach().to(torch.float64) + (1.0 - alpha) * b.detach().to(ft.device, torch.float64)
        out[name] = mix.to(ft.dtype)
    return out


def is_lora_checkpoint(path: str | os.PathLike) -> bool:
    """A sentence-transformers folder whose weights are LoRA adapters (``adapter_config.json``)."""
    return any(Path(path).rglob("adapter_config.json"))


def build_soup(finetuned: str | os.PathLike, base: str | os.PathLike, alpha: float, out_dir: str | os.PathLike, *,
               device: str = "cpu") -> dict[str, Any]:
    """Write the soup of a trained sentence-transformers checkpoint and its base to ``out_dir``
    (replaced; deterministic bytes, :func:`recipematch.training.save_checkpoint`).

    Args:
        finetuned: the trained checkpoint folder (full weights or LoRA adapters).
        base: the base model folder it was trained from.
        alpha: share of the trained weights, in [0, 1].
        out_dir: the soup's folder.
        device: where the tensors are blended.

    Returns:
        ``{"alpha", "kind" ("full" or "lora"), "tensors_blended"}``.

    Raises:
        RecipematchError: alpha outside [0, 1] or models that cannot be blended.
    """
    import torch
    from sentence_transformers import SentenceTransformer

    alpha = _check_alpha(alpha)
    ft = SentenceTransformer(str(finetuned), device=device)
    sd = ft.state_dict()
    if is_lora_checkpoint(finetuned):
        names = [k for k in sd if "lora_B" in k]
        if not names:
            raise RecipematchError(f"{finetuned}: an adapter checkpoint without lora_B weights cannot be souped")
        new = {k: ((alpha * v.detach().to(torch.float64)).to(v.dtype) if k in names else v) for k, v in sd.items()}
        kind = "lora"
    else:
        base_model = SentenceTransformer(str(base), device=device)
        new = blend_state_dicts(sd, base_model.state_dict(), alpha)
        names = [k for k, v in sd.items() if torch.is_floating_point(v)]
        kind = "full"
    ft.load_state_dict(new)
    save_checkpoint(ft, Path(out_dir))
    return {"alpha": alpha, "kind": kind, "tensors_blended": len(names)}
