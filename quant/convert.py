"""Turn Linear weights and embedding tables into quantized ones, one tensor at a time.

A ``Converter`` is built for one (mode, device, dtype) and applied to each weight as it is
streamed in (by a loader: ``fish_core.loading.checkpoint.load_model``), or by ``quantize_model`` to a
model already in memory. Nothing here knows the model: weights are named by their module path. Linear weights follow the mode; the embedding tables
it is given become per-row FP8 in every mode. Weights that end up as e4m3 codes are first placed
in their ``nn.Linear`` / ``nn.Embedding`` as is; ``finish`` then swaps those modules for
``FP8Linear`` / ``FP8Embedding`` with the scales it kept.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

import torch
from torch import Tensor, nn

from . import torchao_modes
from .fp8 import FP8, FP8Embedding, FP8Linear, QuantizationError, dequantize_rows, fake_quantize, \
    float8_supported, quantize_rows, resolve_path, settle_path

MODES = ("none", "fp8", *torchao_modes.MODES)

# Linear layers left in bf16 by default: none, like the community checkpoints (all 201), so an
# export loads in their loaders too. Keeping the fast AR in bf16 (``skip=("fast_layers.*",
# "fast_output")``) lowers the fast-logit error at ~1.5x the bytes per frame: see
# ``bench/bench_quant.py --errors`` for the figures.
DEFAULT_SKIP: tuple[str, ...] = ()

# Whether each mode stores the embedding tables as FP8 rows when not told (``quantize_embeddings``
# None): only the 4-bit modes, which need it to stay under 3 GB of S2-Pro weights; elsewhere the
# tables add logit error for little saving (``bench/bench_quant.py --errors`` measures both).
EMBEDDINGS_BY_MODE = {"none": False, "fp8": False, "int8": False, "fp8-dynamic": False,
                      "int4": True, "nvfp4": True}


def normalize_mode(quantization: str | None) -> str:
    mode = "none" if quantization in (None, "") else str(quantization).lower()
    if mode not in MODES:
        raise QuantizationError(
            f"unknown quantization {quantization!r}; choose one of {', '.join(MODES)}")
    return mode


def linear_weights(model: nn.Module) -> dict[str, tuple[int, int]]:
    """``{"layers.0.attention.wqkv.weight": (N, K), …}`` for every Linear (or FP8Linear)."""
    return {f"{name}.weight": (m.out_features, m.in_features) for name, m in model.named_modules()
            if isinstance(m, (nn.Linear, FP8Linear))}


def embedding_weights(model: nn.Module) -> dict[str, tuple[int, int]]:
    """``{"embeddings.weight": (V, D), …}`` for every embedding table (plain or FP8)."""
    return {f"{name}.weight": (m.num_embeddings, m.embedding_dim)
            for name, m in model.named_modules() if isinstance(m, (nn.Embedding, FP8Embedding))}


def embedding_targets(model: nn.Module, mode: str, quantize_embeddings: bool | None,
                      skip=()) -> list[str]:
    """The embedding tables to store as FP8 rows: all not matched by ``skip`` when
    ``quantize_embeddings`` (None: the mode's default, ``EMBEDDINGS_BY_MODE``), else none."""
    if quantize_embeddings is None:
        quantize_embeddings = EMBEDDINGS_BY_MODE[mode]
    if not quantize_embeddings:
        return []
    return [n for n in embedding_weights(model) if not skipped(n, skip)]


def skipped(weight_name: str, skip) -> bool:
    """Whether the module owning ``weight_name`` matches one of the ``skip`` patterns."""
    module = weight_name.rpartition(".")[0]
    return any(fnmatchcase(module, pattern) for pattern in skip)


class Converter:
    """Quantize the Linear weights named in ``targets`` for ``mode`` on ``device``, and hold the
    embedding tables named in ``embeddings`` as FP8 rows (``FP8Embedding``; dequantized at load,
    same numerics, where the device cannot hold float8).

    ``mode`` "none" leaves bf16 weights alone but keeps FP8 checkpoint weights as FP8 ("fp8")."""

    def __init__(self, mode: str, device, dtype: torch.dtype, targets, fp8_path: str | None = None,
                 embeddings=()):
        self.mode, self.device, self.dtype = mode, torch.device(device), dtype
        self.targets = set(targets)
        self.embeddings = set(embeddings)
        self.fp8_tables = bool(self.embeddings) and float8_supported(self.device)
        self.fp8_path = resolve_path(fp8_path, self.device) if mode in ("none", "fp8") else "load"
        self.config = None
        if mode in torchao_modes.MODES:
            torchao_modes.check(mode, self.device, dtype)
            self.config = torchao_modes.config_for(mode)
        self.scales: dict[str, Tensor] = {}  # weight name → scale, for layers kept as e4m3
        self.left_bf16: list[str] = []  # targets torchao's kernel cannot take

    def __call__(self, name: str, weight: Tensor) -> Tensor:
        """A bf16 (model-dtype) weight, already on the device → what the model should hold."""
        if name in self.embeddings:
            return self._table(name, *quantize_rows(weight))
        if name not in self.targets or self.mode == "none":
            return weight
        if self.mode == "fp8":
            if self.fp8_path == "load":
                return fake_quantize(weight)
            q, self.scales[name] = quantize_rows(weight)
            return q
        return self._torchao(name, weight)

    def from_fp8(self, name: str, q: Tensor, scale: Tensor) -> Tensor:
        """A stored e4m3 weight and its ``[N, 1]`` scale (CPU) → what the model should hold."""
        scale = scale.float().reshape(-1, 1)
        if name in self.embeddings:
            return self._table(name, q.to(self.device), scale.to(self.device))
        keep = self.mode in ("none", "fp8") and self.fp8_path != "load"
        if keep:
            self.scales[name] = scale.to(self.device)
            return q.to(self.device)
        weight = dequantize_rows(q.to(self.device), scale.to(self.device), self.dtype)
        if self.mode in ("none", "fp8") or name not in self.targets:
            return weight
        return self._torchao(name, weight)

    def _table(self, name: str, q: Tensor, scale: Tensor) -> Tensor:
        """An embedding table's e4m3 rows: kept (``finish`` makes the FP8Embedding), or
        dequantized where the device holds no float8."""
        if not self.fp8_tables:
            return dequantize_rows(q, scale, self.dtype)
        self.scales[name] = scale
        return q

    def _torchao(self, name: str, weight: Tensor) -> Tensor:
        if not torchao_modes.fits(self.mode, tuple(weight.shape)):
            self.left_bf16.append(name)
            return weight
        return torchao_modes.quantize_weight(weight, self.config)

    def finish(self, model: nn.Module) -> nn.Module:
        """Swap every Linear (embedding) holding e4m3 codes for an ``FP8Linear``
        (``FP8Embedding``) with its scale."""
        for name, scale in self.scales.items():
            parent, leaf = owner(model, name.rpartition(".")[0])
            q = getattr(parent, leaf).weight
            if q.dtype != FP8:
                raise RuntimeError(f"{name}: expected e4m3 codes, found {q.dtype}")
            if name in self.embeddings:
                table = FP8Embedding(q.shape[0], q.shape[1], self.dtype, device="meta")
                table.set_quantized(q.detach(), scale)
                setattr(parent, leaf, table)
                continue
            layer = FP8Linear(q.shape[1], q.shape[0], "dequant", device="meta")
            layer.set_quantized(q.detach(), scale)
            layer.path = settle_path(layer, self.fp8_path, self.dtype)  # refused → "dequant"
            setattr(parent, leaf, layer)
        self.scales.clear()
        return model


def owner(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    """``"layers.0.attention.wqkv"`` → (the module holding it, ``"wqkv"``)."""
    parent_name, _, leaf = name.rpartition(".")
    return (model.get_submodule(parent_name) if parent_name else model), leaf


def quantize_model(model: nn.Module, mode: str = "fp8", skip=DEFAULT_SKIP,
                   fp8_path: str | None = None, quantize_embeddings: bool | None = None
                   ) -> nn.Module:
    """Quantize the Linear layers (and, per ``quantize_embeddings``, the embedding tables) of a
    loaded (bf16/fp32) model with ``device`` and ``dtype`` properties in place; returns it.

    ``skip`` lists fnmatch patterns of module names kept as they are; ``fp8_path`` picks how FP8
    Linear layers run (``fp8.PATHS``); ``quantize_embeddings`` None means the mode's default
    (``EMBEDDINGS_BY_MODE``)."""
    mode = normalize_mode(mode)
    targets = [n for n in linear_weights(model) if not skipped(n, skip)]
    tables = embedding_targets(model, mode, quantize_embeddings, skip)
    converter = Converter(mode, model.device, model.dtype, targets, fp8_path, tables)
    for name in targets + tables:
        tensor = model.get_parameter(name)
        if tensor.dtype.is_floating_point and tensor.dtype.itemsize > 1:
            parent, leaf = owner(model, name)
            parent._parameters[leaf] = nn.Parameter(converter(name, tensor.detach()),
                                                    requires_grad=False)
    return converter.finish(model)
