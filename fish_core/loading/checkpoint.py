"""Load the Dual-AR model from a checkpoint folder, quantized as asked: the one loader.

The model is built on the ``meta`` device and each tensor is streamed in, cast, quantized (a
``quant.Converter``, when a mode or FP8 embedding tables are asked for) and placed on its device
one at a time, so peak memory is one copy of the model plus one tensor: a tensor kept as stored
on the CPU stays a view of the file's memory map (no copy), every other one is read into memory
of its own and freed once converted (``shards.iter_tensors``). Both the HF names and
fish-speech's internal names are accepted (``tensor_names``); an FP8 checkpoint (any tensor
stored as float8_e4m3fn) goes through ``fp8_checkpoint``. Any missing, unexpected or mis-shaped
tensor is reported in one ``CheckpointError``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..engine.config import ModelConfig
from .fp8_checkpoint import is_fp8_checkpoint, load_fp8, stored_fp8
from ..engine.layers import FeedForward
from ..engine.model import DualAR
from .shards import DTYPES, CheckpointError, iter_tensors
from .siblings import quant
from .tensor_names import to_hf, to_internal
from .weights import StreamedLoad, assign, separate_large_buffers

__all__ = ["CheckpointError", "assign", "build_meta", "iter_tensors", "load_model", "to_hf",
           "to_internal"]


def build_meta(config: ModelConfig, dtype: torch.dtype = torch.bfloat16) -> DualAR:
    """The model with every parameter on the meta device (no memory)."""
    with torch.device("meta"):
        return DualAR(config).to(dtype)


def load_model(folder: str | Path, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.bfloat16, quantization: str | None = None, *,
               fp8_path: str | None = None, skip=quant.DEFAULT_SKIP,
               quantize_embeddings: bool | None = None,
               config: ModelConfig | None = None) -> DualAR:
    """The Dual-AR model of ``folder`` with weights cast to ``dtype`` on ``device``, quantized
    with ``quantization`` (``quant.MODES``; None = "none").

    An FP8 checkpoint stays FP8 unless a torchao mode is asked for. ``fp8_path`` picks how FP8
    Linear layers run (``quant.fp8.PATHS``; default ``$SAILFISH_FP8_PATH`` or ``auto``); ``skip``
    lists fnmatch patterns of module names (Linear layers, embedding tables) kept in bf16.
    ``quantize_embeddings`` stores the embedding tables as FP8 rows (None: the mode's default,
    ``quant.EMBEDDINGS_BY_MODE``; tables stored as FP8 stay FP8 unless it is False)."""
    folder, device = Path(folder), torch.device(device)
    mode = quant.normalize_mode(quantization)
    config = config or ModelConfig.from_file(folder)
    model = build_meta(config, dtype)
    fp8_stored = is_fp8_checkpoint(folder)
    converter = choose_converter(model, folder, mode, device, dtype, fp8_stored, fp8_path, skip,
                                 quantize_embeddings)
    load_weights(model, folder, device, dtype, converter, fp8_stored)
    model = converter.finish(model) if converter else model
    if device.type == "cuda":  # launch-bound decode: w1 and w3 as one GEMV
        join_feed_forwards(model)
    return model.eval()


def load_weights(model: DualAR, folder: Path, device: torch.device, dtype: torch.dtype,
                 converter, fp8_stored: bool) -> None:
    """Fill the meta ``model`` with ``folder``'s weights (FP8 or plain), through ``converter``,
    and make its buffers on ``device``."""
    with separate_large_buffers():
        if fp8_stored:
            load_fp8(model, folder, device, dtype, converter,
                     kept_as_stored(device, dtype, converter))
        else:
            load_plain(model, folder, device, dtype, converter)
    model.reset_buffers(device)


def join_feed_forwards(model: DualAR) -> int:
    """Put each SwiGLU's ``w1`` and ``w3`` in one layer (``quant.join_rows``: their rows and
    scales stacked, the same numbers) where their kind allows; returns how many were joined.
    Done on CUDA, where a decode frame is bound by its kernel launches; on a CPU the two
    GEMVs cost the same as one and the weights stay views of the file."""
    joined = 0
    for module in model.modules():
        if isinstance(module, FeedForward) and module.w13 is None:
            w13 = quant.join_rows(module.w1, module.w3)
            if w13 is not None:
                module.join(w13)
                joined += 1
    return joined


def choose_converter(model: DualAR, folder: Path, mode: str, device: torch.device,
                     dtype: torch.dtype, fp8_stored: bool, fp8_path, skip,
                     quantize_embeddings) -> quant.Converter | None:
    """The per-tensor quantization policy of this load (None: every tensor as stored)."""
    linears = list(quant.linear_weights(model))
    targets = [n for n in linears if not quant.skipped(n, skip)]
    tables = quant.embedding_targets(model, mode, quantize_embeddings, skip)
    if fp8_stored and quantize_embeddings is None:
        tables += [n for n in stored_fp8(folder) if n in quant.embedding_weights(model)]
    if mode == "none" and not tables and not fp8_stored and not quant.packs(device, dtype):
        return None
    return quant.Converter(mode, device, dtype, targets, fp8_path, tables, linears=linears)


def load_plain(model: DualAR, folder: Path, device: torch.device, dtype: torch.dtype,
               converter: quant.Converter | None) -> None:
    """Stream a bf16/fp32 checkpoint into ``model`` (built on meta), through ``converter``."""
    load = StreamedLoad(model, display=to_hf)

    def place(name: str, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.to(device=device, dtype=dtype)
        return converter(name, tensor) if converter else tensor

    for stored, tensor in iter_tensors(folder, kept_as_stored(device, dtype, converter)):
        load.take(stored, to_internal(stored), tensor, place)
    load.finish(f"{folder}: the weights do not match config.json", CheckpointError)


def kept_as_stored(device: torch.device, dtype: torch.dtype, converter: quant.Converter | None):
    """``iter_tensors``' ``mapped``: whether a stored tensor ends up in the model as it is in the
    file (same dtype, on the CPU, not converted), so it may stay a view of the file's map."""
    stored_as = {v: k for k, v in DTYPES.items()}.get(dtype) if device.type == "cpu" else None

    def mapped(stored: str, stored_dtype: str, shape: tuple[int, ...]) -> bool:
        return stored_dtype == stored_as and not (converter and converter.converts(
            to_internal(stored), shape))
    return mapped
