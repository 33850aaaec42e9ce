"""Weight bytes: what a model holds (``weight_bytes``), and what it would hold once quantized
(``planned_bytes``, from the shapes alone, so it works on a ``meta`` model of the full size).

    meta = fish_core.loading.checkpoint.build_meta(ModelConfig.from_file("s2-pro"))
    quant.planned_bytes(meta, "int4")     # int4 Linear layers, FP8 embedding tables
"""

from __future__ import annotations

from torch import nn

from . import int_linear, torchao_modes
from .convert import (CPU_LAYERS, EMBEDDINGS_BY_MODE, embedding_weights, int_kernel,
                      layer_mode, linear_weights, normalize_mode, skipped)


def tensor_bytes(t) -> int:
    """Storage bytes of a tensor, looking inside tensor subclasses (torchao) at their parts."""
    if hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, n)) for n in names if getattr(t, n) is not None)
    return t.numel() * t.element_size()


def weight_bytes(model: nn.Module) -> int:
    """Bytes held by the model's parameters (FP8 codes and scales, torchao parts, bf16 rest)."""
    return sum(tensor_bytes(p) for p in model.parameters())


def fp8_rows_bytes(shape: tuple[int, int]) -> int:
    """Per-row FP8 (``FP8Linear``, ``FP8Embedding``, the checkpoint layout): e4m3 codes and an
    fp32 scale per row."""
    n, k = shape
    return n * k + n * 4


def planned_bytes(model: nn.Module, mode: str, skip=(), quantize_embeddings: bool | None = None,
                  device: str = "cuda") -> int:
    """Bytes of ``model``'s parameters once quantized with ``mode`` (as ``quantize_model`` /
    ``load_model`` with the same ``skip`` and ``quantize_embeddings`` would leave them on a
    ``device`` of that type), computed from the shapes of a plain (bf16, any device, ``meta``
    included) model.

    ``fp8`` counts the stored layout (e4m3 + scales: CUDA's default path ``dequant``); on the CPU
    the default path ``load`` holds the Linear weights in the model dtype instead. int8 / int4
    count torchao's layouts on CUDA and ``int_linear``'s on the CPU; layers ``convert.MIXED``
    holds at another precision count as that. A Linear that the kernel cannot take stays in the
    model dtype (torchao) or goes to int8 (int4 on the CPU), as when loading."""
    mode = normalize_mode(mode)
    linears = {n: s for n, s in linear_weights(model).items() if not skipped(n, skip)}
    if quantize_embeddings is None:
        quantize_embeddings = EMBEDDINGS_BY_MODE[mode]
    tables = {n: s for n, s in embedding_weights(model).items()
              if quantize_embeddings and not skipped(n, skip)}
    return sum(stored_bytes(name, p, mode, linears, tables, device)
               for name, p in model.named_parameters())


def stored_bytes(name: str, p: nn.Parameter, mode: str, linears: dict, tables: dict,
                 device: str) -> int:
    """The bytes of parameter ``name`` in ``planned_bytes``: ``tables`` (FP8 rows) and
    ``linears`` (quantized with ``mode``) are the weights that change, by name → shape."""
    if name in tables:
        return fp8_rows_bytes(tables[name])
    if name not in linears or mode == "none":
        return p.numel() * p.element_size()
    if mode == "fp8":
        return fp8_rows_bytes(linears[name])
    return quantized_bytes(layer_mode(name, mode), linears[name], p.element_size(),
                           mode in CPU_LAYERS and int_kernel(device) != "torchao",
                           int_kernel(device) == "triton")


def quantized_bytes(mode: str, shape: tuple[int, int], plain_size: int, cpu: bool,
                    gemv: bool = False) -> int:
    """Bytes of one ``[N, K]`` Linear weight held in ``mode`` (``plain_size`` bytes a weight
    when it stays unquantized) by ``int_linear`` (``cpu``; its CUDA GEMV layers: ``gemv``) or
    torchao."""
    n, k = shape
    if mode == "none":
        return n * k * plain_size
    if cpu:
        fits = int_linear.int4_gemv_fits if gemv else int_linear.int4_fits
        if mode == "int4" and fits(shape):
            return int_linear.int4_bytes(shape, plain_size)
        return int_linear.int8_bytes(shape, plain_size)
    if torchao_modes.fits(mode, shape):
        return torchao_modes.stored_bytes(mode, shape)
    return n * k * plain_size
