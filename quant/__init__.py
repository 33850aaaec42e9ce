"""quant: smaller weights for S2-Pro (FP8 per-row weight-only, torchao modes, FP8 checkpoints).

    model = quant.load_model(folder, "cuda", torch.bfloat16, "fp8")   # ~6 GB of weights
    model = quant.quantize_model(model, "fp8")                          # a model already in memory
    quant.export_fp8("s2-pro", "s2-pro-fp8")                            # python -m quant export …

Modes: ``none``, ``fp8`` (our per-row e4m3 weight-only, pure torch; see ``fp8.py`` for how each
device runs it), and through torchao (imported only for these) ``int8``, ``int4``,
``fp8-dynamic`` and ``nvfp4`` (see ``torchao_modes.py`` for where each runs).

FP8 checkpoints (any tensor stored as float8_e4m3fn) load as FP8 with ``none`` or ``fp8``; the
torchao modes dequantize them and quantize again, so the two errors add (sensible for int4/nvfp4:
a 4-bit model from the 6 GB download; int8 and fp8-dynamic gain nothing on memory over FP8).

Pure torch; ``load_model`` is the entry point fish_core's Synthesizer uses.
"""

from __future__ import annotations

import importlib


def fish_core(module: str = ""):
    """Import fish_core (or one of its modules) whether the pack is loaded as a package
    (ComfyUI: ``<pack>.fish_core``) or from its root (CLI and tests: ``fish_core``)."""
    parent = __package__.rpartition(".")[0]
    name = f"{parent}.fish_core" if parent else "fish_core"
    return importlib.import_module(f"{name}.{module}" if module else name)


from .checkpoints import export_fp8, is_fp8_checkpoint, load_fp8, stored_fp8  # noqa: E402
from .convert import EMBEDDINGS_BY_MODE, MODES, Converter, embedding_targets, embedding_weights, \
    linear_weights, normalize_mode, skipped  # noqa: E402
from .fp8 import FP8Embedding, FP8Linear, QuantizationError, dequantize_rows, quantize_rows  # noqa: E402
from .sizes import planned_bytes, tensor_bytes, weight_bytes  # noqa: E402

# Linear layers left in bf16 by default: none, like the community checkpoints (all 201), so an
# export loads in their loaders too. Measured with ``bench/bench_quant.py --errors`` (teacher-forced
# logits vs fp32, bf16 variants): keeping fast_output in bf16 lowers the fast-logit error by only
# 2-11% (tiny 0.058 → 0.051, medium 0.152 → 0.149); keeping the whole fast AR in bf16 lowers it by
# 20-50% (→ 0.027 / 0.122) for +0.41 GB on S2-Pro (still < 6 GB) but ~1.5x the bytes per frame;
# pass skip=("fast_layers.*", "fast_output") for that.
DEFAULT_SKIP: tuple[str, ...] = ()

__all__ = ["MODES", "DEFAULT_SKIP", "EMBEDDINGS_BY_MODE", "FP8Embedding", "FP8Linear",
           "QuantizationError", "export_fp8", "fish_core", "is_fp8_checkpoint", "load_model",
           "planned_bytes", "quantize_model", "quantize_rows", "dequantize_rows", "weight_bytes"]


def load_model(folder, device, dtype, quantization: str | None = None, *,
               fp8_path: str | None = None, skip=DEFAULT_SKIP,
               quantize_embeddings: bool | None = None):
    """Load the Dual-AR model from ``folder``, quantized with ``quantization``.

    An FP8 checkpoint stays FP8 unless a torchao mode is asked for. ``fp8_path`` picks how FP8
    Linear layers run (``fp8.PATHS``; default ``$SAILFISH_FP8_PATH`` or ``auto``); ``skip`` lists
    fnmatch patterns of module names (Linear layers, embedding tables) kept in bf16.
    ``quantize_embeddings`` stores the embedding tables as FP8 rows (None: the mode's default,
    ``EMBEDDINGS_BY_MODE``; tables stored as FP8 in the checkpoint stay FP8 unless it is False).
    Every tensor is streamed in and converted one at a time."""
    import torch

    ck = fish_core("checkpoint")
    mode = normalize_mode(quantization)
    device = torch.device(device)
    config = fish_core("config").ModelConfig.from_file(folder)
    meta = ck.build_meta(config, dtype)
    targets = [n for n in linear_weights(meta) if not skipped(n, skip)]
    tables = embedding_targets(meta, mode, quantize_embeddings, skip)
    if is_fp8_checkpoint(folder):
        if quantize_embeddings is None:
            tables += [n for n in stored_fp8(folder) if n in embedding_weights(meta)]
        converter = Converter(mode, device, dtype, targets, fp8_path, tables)
        return load_fp8(folder, device, dtype, converter, config)
    if mode == "none" and not tables:
        return ck.load_model(folder, device, dtype, config)
    converter = Converter(mode, device, dtype, targets, fp8_path, tables)
    return converter.finish(ck.load_model(folder, device, dtype, config, convert=converter))


def quantize_model(model, mode: str = "fp8", skip=DEFAULT_SKIP, fp8_path: str | None = None,
                   quantize_embeddings: bool | None = None):
    """Quantize the Linear layers (and, per ``quantize_embeddings``, the embedding tables) of a
    loaded (bf16/fp32) model in place; returns it. Arguments as for ``load_model``."""
    ck = fish_core("checkpoint")
    mode = normalize_mode(mode)
    targets = [n for n in linear_weights(model) if not skipped(n, skip)]
    tables = embedding_targets(model, mode, quantize_embeddings, skip)
    converter = Converter(mode, model.device, model.dtype, targets, fp8_path, tables)
    for name in targets + tables:
        tensor = model.get_parameter(name)
        if tensor.dtype.is_floating_point and tensor.dtype.itemsize > 1:
            ck.assign(model, name, converter(name, tensor.detach()))
    return converter.finish(model)


