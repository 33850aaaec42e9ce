"""quant: smaller weights for S2-Pro (FP8 per-row weight-only, torchao modes, the FP8 checkpoint
layout), as policies over plain tensors and modules: nothing here imports fish_core.

    model = quant.quantize_model(model, "fp8")          # a model already in memory
    converter = quant.Converter("fp8", device, dtype, targets)   # applied per streamed tensor

Loading a checkpoint with a mode is fish_core's job
(``fish_core.loading.checkpoint.load_model(folder,
device, dtype, "fp8")``), and so is writing one (``fish_core.loading.export``, ``python -m
fish_core.loading.export``).

Modes: ``none``, ``fp8`` (our per-row e4m3 weight-only, pure torch; see ``fp8.py`` for how each
device runs it), ``int8`` and ``int4`` (on the CPU our layers on torch's kernels,
``int_linear.py``; on CUDA torchao's), and through torchao (imported only for these)
``fp8-dynamic`` and ``nvfp4`` (see ``torchao_modes.py`` for where each runs). On the CPU,
Linear weights left in bf16 are packed for oneDNN (``packed.py``).

FP8 checkpoints (any tensor stored as float8_e4m3fn) load as FP8 with ``none`` or ``fp8``; the
torchao modes dequantize them and quantize again, so the two errors add (sensible for int4/nvfp4:
a 4-bit model from the FP8 download; int8 and fp8-dynamic gain nothing on memory over FP8).
"""

from __future__ import annotations

from . import cpu_gemv, int_gemv, int_linear, layout, ops, packed, torchao_modes
from .convert import (DEFAULT_SKIP, EMBEDDINGS_BY_MODE, MODES, Converter, embedding_targets,
    embedding_weights, join_rows, linear_weights, normalize_mode, packs, quantize_model, skipped)
from .fp8 import FP8Embedding, FP8Linear, QuantizationError, dequantize_rows, quantize_rows
from .int_linear import Int4GemvLinear, Int4Linear, Int8Linear
from .packed import PackedLinear
from .sizes import planned_bytes, tensor_bytes, weight_bytes

__all__ = ["MODES", "DEFAULT_SKIP", "EMBEDDINGS_BY_MODE", "Converter", "FP8Embedding",
           "FP8Linear", "Int4GemvLinear", "Int4Linear", "Int8Linear", "PackedLinear",
           "QuantizationError", "cpu_gemv", "dequantize_rows", "embedding_targets",
           "embedding_weights", "int_gemv", "int_linear", "join_rows", "layout", "linear_weights",
           "normalize_mode", "ops", "packed", "packs", "planned_bytes", "quantize_model",
           "quantize_rows", "skipped", "tensor_bytes", "torchao_modes", "weight_bytes"]
