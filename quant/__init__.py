"""quant: smaller weights for S2-Pro (FP8 per-row weight-only, torchao modes, FP8 checkpoints).

Pure torch; torchao is imported only when a torchao mode is asked for. ``load_model`` is the
entry point fish_core's Synthesizer uses.
"""

from __future__ import annotations

import importlib


def fish_core(module: str = ""):
    """Import fish_core (or one of its modules) whether the pack is loaded as a package
    (ComfyUI: ``<pack>.fish_core``) or from its root (CLI and tests: ``fish_core``)."""
    parent = __package__.rpartition(".")[0]
    name = f"{parent}.fish_core" if parent else "fish_core"
    return importlib.import_module(f"{name}.{module}" if module else name)


def load_model(folder, device, dtype, quantization: str | None = None):
    """Load the Dual-AR model from ``folder``, quantized with ``quantization``."""
    if quantization not in (None, "", "none"):
        raise ValueError(f"quantization {quantization!r} is not available yet; use 'none'")
    return fish_core("checkpoint").load_model(folder, device, dtype)
