"""Weight bytes: what a model holds (``weight_bytes``), and what it would hold once quantized
(``planned_bytes``, from the shapes alone, so it works on a ``meta`` model of the full size).

    meta = fish_core.loading.checkpoint.build_meta(ModelConfig.from_file("s2-pro"))
    quant.planned_bytes(meta, "int4")     # int4 Linear layers, FP8 embedding tables
"""

from __future__ import annotations

from torch import nn

from . import torchao_modes
from .convert import EMBEDDINGS_BY_MODE, embedding_weights, linear_weights, normalize_mode, skipped


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


def planned_bytes(model: nn.Module, mode: str, skip=(), quantize_embeddings: bool | None = None
                  ) -> int:
    """Bytes of ``model``'s parameters once quantized with ``mode`` (as ``quantize_model`` /
    ``load_model`` with the same ``skip`` and ``quantize_embeddings`` would leave them), computed
    from the shapes of a plain (bf16, any device, ``meta`` included) model.

    ``fp8`` counts the stored layout (e4m3 + scales: CUDA's default path ``dequant``); on the CPU
    the default path ``load`` holds the Linear weights in the model dtype instead. A Linear that a
    torchao kernel cannot take stays in the model dtype, as when loading."""
    mode = normalize_mode(mode)
    linears = {n: s for n, s in linear_weights(model).items() if not skipped(n, skip)}
    if quantize_embeddings is None:
        quantize_embeddings = EMBEDDINGS_BY_MODE[mode]
    tables = {n: s for n, s in embedding_weights(model).items()
              if quantize_embeddings and not skipped(n, skip)}
    total = 0
    for name, p in model.named_parameters():
        plain = p.numel() * p.element_size()
        if name in tables:
            total += fp8_rows_bytes(tables[name])
        elif name not in linears or mode == "none":
            total += plain
        elif mode == "fp8":
            total += fp8_rows_bytes(linears[name])
        elif torchao_modes.fits(mode, linears[name]):
            total += torchao_modes.stored_bytes(mode, linears[name])
        else:
            total += plain
    return total
