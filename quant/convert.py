"""Turn Linear weights and embedding tables into quantized ones, one tensor at a time.

A ``Converter`` is built for one (mode, device, dtype) and applied to each weight as it is
streamed in (by a loader: ``fish_core.loading.checkpoint.load_model``), or by
``quantize_model`` to a model already in memory. Nothing here knows the model: weights are named
by their module path. Linear weights follow the mode; the embedding tables it is given become
per-row FP8 in every mode. Weights that end up as e4m3 codes are first placed
in their ``nn.Linear`` / ``nn.Embedding`` as is; ``finish`` then swaps those modules for
``FP8Linear`` / ``FP8Embedding`` with the scales it kept.
"""

from __future__ import annotations

import os
from fnmatch import fnmatchcase
from typing import Callable

import torch
from torch import Tensor, nn

from . import cpu_gemv, int_gemv, int_linear, packed, torchao_modes
from .fp8 import (FP8, FP8Embedding, FP8Linear, QuantizationError, dequantize_rows, fake_quantize,
                  float8_supported, quantize_rows, resolve_path, settle_path)

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

# Modes that run on the CPU through our own layers on torch's kernels (``int_linear.py``):
# torchao's CPU int8 casts the whole weight on every call, and its CPU int4 is a prototype.
CPU_LAYERS = ("int8", "int4")
# Layers a mode holds at another precision: (fnmatch patterns of module names, mode). In int4 the
# fast AR (the codebook decoder and its head: half the bytes of a frame) stays int8, which keeps
# its codes and the end of speech as int8 has them (``bench/bench_cpu.py --errors``).
MIXED: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    "int4": ((("fast_layers.*", "fast_output"), "int8"),)}


# Which kernels int8 / int4 run on CUDA (``$SAILFISH_INT_KERNEL``): "triton", our weight-only
# GEMVs (``int_gemv.py``, layers ``Int8Linear`` / ``Int4GemvLinear``), or "torchao", its tensors
# (every torchao mode stays selectable). "auto" is torchao until the next GPU run measures
# both (bench/gpu_first.py: stages int8/int4 against int8-gemv/int4-gemv; docs/quantization.md).
INT_KERNELS = ("auto", "triton", "torchao")
AUTO_INT_KERNEL = "torchao"


def int_kernel(device) -> str:
    """``"cpu"`` (``int_linear``'s CPU layers) on the CPU; elsewhere ``"triton"`` or
    ``"torchao"`` as ``$SAILFISH_INT_KERNEL`` asks (default ``AUTO_INT_KERNEL``)."""
    if torch.device(device).type == "cpu":
        return "cpu"
    asked = os.environ.get("SAILFISH_INT_KERNEL") or "auto"
    if asked not in INT_KERNELS:
        raise QuantizationError(f"SAILFISH_INT_KERNEL must be one of {', '.join(INT_KERNELS)}, "
                                f"got {asked!r}")
    return AUTO_INT_KERNEL if asked == "auto" else asked


def normalize_mode(quantization: str | None) -> str:
    mode = "none" if quantization in (None, "") else str(quantization).lower()
    if mode not in MODES:
        raise QuantizationError(
            f"unknown quantization {quantization!r}; choose one of {', '.join(MODES)}")
    return mode


def linear_weights(model: nn.Module) -> dict[str, tuple[int, int]]:
    """``{"layers.0.attention.wqkv.weight": (N, K), …}`` for every Linear (plain, FP8 or
    packed)."""
    return {f"{name}.weight": (m.out_features, m.in_features) for name, m in model.named_modules()
            if isinstance(m, (nn.Linear, FP8Linear, packed.PackedLinear))}


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


def packs(device, dtype: torch.dtype) -> bool:
    """Whether plain Linear weights of ``dtype`` on ``device`` are packed for oneDNN
    (``SAILFISH_CPU_PACK=0`` turns it off: plain ``nn.Linear``, half the speed)."""
    return torch.device(device).type == "cpu" and packed.enabled() and packed.available(dtype)


def layer_mode(weight_name: str, mode: str, mixed=None) -> str:
    """The precision mode ``mode`` gives the Linear weight ``weight_name``: ``mode``, or what
    ``mixed`` (default ``MIXED[mode]``) says for it."""
    for patterns, other in MIXED.get(mode, ()) if mixed is None else mixed:
        if skipped(weight_name, patterns):
            return other
    return mode


class Converter:
    """Quantize the Linear weights named in ``targets`` for ``mode`` on ``device``, and hold the
    embedding tables named in ``embeddings`` as FP8 rows (``FP8Embedding``; dequantized at load,
    same numerics, where the device cannot hold float8).

    ``mode`` "none" leaves bf16 weights alone but keeps FP8 checkpoint weights as FP8 ("fp8").
    On the CPU, int8 and int4 become ``Int8Linear`` / ``Int4Linear`` (``CPU_LAYERS``); ``mixed``
    (default ``MIXED[mode]``) lists the layers held at another of these precisions. Every Linear
    weight of ``linears`` (default ``targets``) that stays a plain bf16 matrix on the CPU is
    packed for oneDNN (``packed.PackedLinear``) when ``pack`` (None: where that runs)."""

    def __init__(self, mode: str, device, dtype: torch.dtype, targets, fp8_path: str | None = None,
                 embeddings=(), mixed=None, linears=None, pack: bool | None = None):
        self.mode, self.device, self.dtype = mode, torch.device(device), dtype
        self.targets = set(targets)
        self.linears = self.targets if linears is None else set(linears)
        self.pack = packs(self.device, dtype) if pack is None else pack
        self.embeddings = set(embeddings)
        self.fp8_tables = bool(self.embeddings) and float8_supported(self.device)
        self.fp8_path = resolve_path(fp8_path, self.device) if mode in ("none", "fp8") else "load"
        self.mixed = MIXED.get(mode, ()) if mixed is None else tuple(mixed)
        # our layers: int_linear's on the CPU, the Triton GEMVs' where asked (int_kernel)
        self.int_kernel = int_kernel(self.device) if mode in CPU_LAYERS else None
        self.cpu_layers = self.int_kernel in ("cpu", "triton")
        if self.int_kernel == "triton":
            reason = int_gemv.unavailable(self.device)
            if reason:
                raise QuantizationError(f"{mode} with SAILFISH_INT_KERNEL=triton cannot run on "
                                        f"{self.device}: {reason}. Use SAILFISH_INT_KERNEL=torchao")
        self.configs = self.torchao_configs()  # torchao mode → its config
        self.scales: dict[str, Tensor] = {}  # weight name → scale, for layers kept as e4m3
        self.layers: dict[str, Callable] = {}  # weight name → its module from the held codes
        self.left_bf16: list[str] = []  # targets the mode's kernel cannot take

    def torchao_configs(self) -> dict:
        """The torchao configs of the mode and its ``mixed`` modes (each checked to run here);
        none when our own layers hold the weights."""
        if self.mode not in torchao_modes.MODES or self.cpu_layers:
            return {}
        configs = {}
        for m in {self.mode, *(m for _, m in self.mixed)} - {"none"}:
            torchao_modes.check(m, self.device, self.dtype)
            configs[m] = torchao_modes.config_for(m)
        return configs

    def converts(self, name: str, shape=None) -> bool:
        """Whether ``__call__`` changes the tensor ``name`` (of ``shape``, when known; else it
        is kept as given)."""
        return (name in self.embeddings or (name in self.targets and self.mode != "none") or
                (self.pack and name in self.linears and (shape is None or packed.worth_it(shape))))

    def mode_of(self, name: str) -> str:
        """The precision of the Linear weight ``name``: the mode, or what ``mixed`` says."""
        return layer_mode(name, self.mode, self.mixed)

    def __call__(self, name: str, weight: Tensor) -> Tensor:
        """A bf16 (model-dtype) weight, already on the device → what the model should hold."""
        return self._packed(name, self._convert(name, weight))

    def _convert(self, name: str, weight: Tensor) -> Tensor:
        if name in self.embeddings:
            return self._table(name, *quantize_rows(weight))
        if name not in self.targets or self.mode == "none":
            return weight
        if self.mode == "fp8":
            if self.fp8_path == "load":
                return fake_quantize(weight)
            q, self.scales[name] = quantize_rows(weight)
            return q
        return self._integer(name, weight)

    def from_fp8(self, name: str, q: Tensor, scale: Tensor) -> Tensor:
        """A stored e4m3 weight and its ``[N, 1]`` scale (CPU) → what the model should hold."""
        return self._packed(name, self._from_fp8(name, q, scale))

    def _from_fp8(self, name: str, q: Tensor, scale: Tensor) -> Tensor:
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
        return self._integer(name, weight)

    def _packed(self, name: str, weight: Tensor) -> Tensor:
        """``weight`` in oneDNN's layout if it is a Linear weight left a plain matrix of the
        model dtype on the CPU (``finish`` makes the PackedLinear), else as it is."""
        plain = type(weight) is Tensor or type(weight) is nn.Parameter
        if not (self.pack and name in self.linears and name not in self.layers
                and name not in self.scales and plain and weight.dtype == self.dtype
                and weight.layout == torch.strided and weight.dim() == 2
                and packed.worth_it(weight.shape)):
            return weight
        self.layers[name] = packed.PackedLinear
        return packed.reorder(weight)

    def _table(self, name: str, q: Tensor, scale: Tensor) -> Tensor:
        """An embedding table's e4m3 rows: kept (``finish`` makes the FP8Embedding), or
        dequantized where the device holds no float8."""
        if not self.fp8_tables:
            return dequantize_rows(q, scale, self.dtype)
        self.scales[name] = scale
        return q

    def _integer(self, name: str, weight: Tensor) -> Tensor:
        """A torchao mode's weight: our CPU layer's codes (``finish`` builds the layer), or
        torchao's tensor; a shape the kernel cannot take stays as it is."""
        mode, shape = self.mode_of(name), tuple(weight.shape)
        if mode == "none":
            return weight
        if self.cpu_layers:
            return self._our_codes(name, weight, mode)
        if not torchao_modes.fits(mode, shape):
            self.left_bf16.append(name)
            return weight
        return torchao_modes.quantize_weight(weight, self.configs[mode])

    def _our_codes(self, name: str, weight: Tensor, mode: str) -> Tensor:
        """The codes of our int8/int4 layer (``int_kernel``: the CPU's, or the Triton GEMV's)
        for ``weight``; the layer itself is built by ``finish``."""
        on_cpu = self.int_kernel == "cpu"
        fits = int_linear.int4_fits if on_cpu else int_linear.int4_gemv_fits
        if mode == "int4" and not fits(tuple(weight.shape)):
            mode = "int8"  # K not a multiple of the group: the next precision up
        if mode == "int4" and not on_cpu:
            codes, params = int_linear.quantize_int4(weight, self.dtype)
            self.layers[name] = lambda q: int_linear.Int4GemvLinear.holding(q, params)
            return int_gemv.pack(codes)
        if mode == "int4":
            codes, params = int_linear.quantize_int4(weight, self.dtype)
            self.layers[name] = lambda q: int_linear.Int4Linear.holding(q, params)
            return int_linear.pack_int4(codes)
        codes, scale = int_linear.quantize_int8(weight, self.dtype)
        self.layers[name] = lambda q: int_linear.Int8Linear.holding(q, scale)
        if self.device.type == "cpu":
            cpu_gemv.prepare()  # built now (once per machine), not in the first frame
        return codes

    def finish(self, model: nn.Module) -> nn.Module:
        """Swap every Linear (embedding) holding e4m3 codes for an ``FP8Linear``
        (``FP8Embedding``) with its scale, and every Linear holding int codes for its CPU
        layer."""
        for name, build in self.layers.items():
            parent, leaf = owner(model, name.rpartition(".")[0])
            setattr(parent, leaf, build(getattr(parent, leaf).weight.detach()))
        self.layers.clear()
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
            tensor = tensor.to_dense() if tensor.is_mkldnn else tensor  # a PackedLinear's
            parent, leaf = owner(model, name)
            parent._parameters[leaf] = nn.Parameter(converter(name, tensor.detach()),
                                                    requires_grad=False)
    return converter.finish(model)


def joinable(first: nn.Module, second: nn.Module) -> bool:
    """Whether ``join_rows`` may try the two layers: one kind, the same inputs, no bias, plain
    parameters of one dtype (no torchao tensor subclass, no oneDNN packing)."""
    if (type(first) is not type(second) or first.in_features != second.in_features
            or getattr(first, "bias", None) is not None
            or getattr(second, "bias", None) is not None):
        return False
    w1, w3 = first.weight, second.weight
    return type(w1) is nn.Parameter and not w1.is_mkldnn and w1.dtype == w3.dtype


def join_rows(first: nn.Module, second: nn.Module) -> nn.Module | None:
    """One bias-free Linear computing ``cat([first(x), second(x)], -1)`` (a SwiGLU's ``w1`` and
    ``w3`` as one ``w13`` GEMV: one kernel, one launch), or None where the two cannot be joined
    (other kinds, a bias, a torchao tensor subclass, oneDNN-packed weights).

    Every kind here is quantized row by row (FP8 and int8 a scale per row, int4 a (scale, zero)
    per group of a row), so the joined layer holds exactly both layers' codes and parameters:
    its rows concatenated, their scales with them."""
    join = _JOINS.get(type(first))
    if join is None or not joinable(first, second):
        return None
    return join(first, second)


def _join_linear(first: nn.Linear, second: nn.Linear) -> nn.Linear:
    rows = first.out_features + second.out_features
    joined = nn.Linear(first.in_features, rows, bias=False, device="meta")
    joined.weight = nn.Parameter(torch.cat([first.weight, second.weight]), requires_grad=False)
    return joined


def _join_fp8(first: FP8Linear, second: FP8Linear) -> FP8Linear:
    rows = first.out_features + second.out_features
    joined = FP8Linear(first.in_features, rows, first.path, device="meta")
    joined.set_quantized(torch.cat([first.weight, second.weight]),
                         torch.cat([first.scale, second.scale]))
    return joined


def _join_int8(first: nn.Module, second: nn.Module) -> nn.Module:
    return type(first).holding(torch.cat([first.weight, second.weight]),
                               torch.cat([first.scale, second.scale]))


def _join_int4_gemv(first: nn.Module, second: nn.Module) -> nn.Module:
    """Parameters ``[K / (2 GROUP), N, 2, 2]`` (``int_gemv.order_params``): rows are dim 1."""
    return type(first).holding(torch.cat([first.weight, second.weight]),
                               torch.cat([first.scales_and_zeros, second.scales_and_zeros], 1))


# the kinds join_rows joins, and how
_JOINS = {nn.Linear: _join_linear, FP8Linear: _join_fp8, int_linear.Int8Linear: _join_int8,
          int_linear.Int4GemvLinear: _join_int4_gemv}
