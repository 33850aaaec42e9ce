"""Turn Linear weights into quantized ones, one tensor at a time.

A ``Converter`` is built for one (mode, device, dtype) and applied to each Linear weight as it is
streamed in (``fish_core.checkpoint.load_model``'s ``convert`` hook, the FP8-checkpoint loader,
or ``quantize_model`` on a model in memory). Weights that end up as e4m3 codes are first placed
in their ``nn.Linear`` as is; ``finish`` then swaps those modules for ``FP8Linear`` with the
scales it kept.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

import torch
from torch import Tensor, nn

from . import torchao_modes
from .fp8 import FP8, FP8Linear, QuantizationError, dequantize_rows, fake_quantize, fastest_path, \
    quantize_rows, resolve_path

MODES = ("none", "fp8", *torchao_modes.MODES)


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


def skipped(weight_name: str, skip) -> bool:
    """Whether the module owning ``weight_name`` matches one of the ``skip`` patterns."""
    module = weight_name.rpartition(".")[0]
    return any(fnmatchcase(module, pattern) for pattern in skip)


class Converter:
    """Quantize the Linear weights named in ``targets`` for ``mode`` on ``device``.

    ``mode`` "none" leaves bf16 weights alone but keeps FP8 checkpoint weights as FP8 ("fp8")."""

    def __init__(self, mode: str, device, dtype: torch.dtype, targets, fp8_path: str | None = None):
        self.mode, self.device, self.dtype = mode, torch.device(device), dtype
        self.targets = set(targets)
        self.fp8_path = resolve_path(fp8_path, self.device) if mode in ("none", "fp8") else "load"
        self.config = None
        if mode in torchao_modes.MODES:
            torchao_modes.check(mode, self.device, dtype)
            self.config = torchao_modes.config_for(mode)
        self.scales: dict[str, Tensor] = {}  # weight name → scale, for layers kept as e4m3
        self.left_bf16: list[str] = []  # targets torchao's kernel cannot take

    def __call__(self, name: str, weight: Tensor) -> Tensor:
        """A bf16 (model-dtype) weight, already on the device → what the model should hold."""
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
        keep = self.mode in ("none", "fp8") and self.fp8_path != "load"
        if keep:
            self.scales[name] = scale.to(self.device)
            return q.to(self.device)
        weight = dequantize_rows(q.to(self.device), scale.to(self.device), self.dtype)
        if self.mode in ("none", "fp8") or name not in self.targets:
            return weight
        return self._torchao(name, weight)

    def _torchao(self, name: str, weight: Tensor) -> Tensor:
        if not torchao_modes.fits(self.mode, tuple(weight.shape)):
            self.left_bf16.append(name)
            return weight
        return torchao_modes.quantize_weight(weight, self.config)

    def finish(self, model: nn.Module) -> nn.Module:
        """Swap every Linear holding e4m3 codes for an ``FP8Linear`` with its scale."""
        for name, scale in self.scales.items():
            module_name = name.rpartition(".")[0]
            parent_name, _, leaf = module_name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            linear = getattr(parent, leaf)
            q = linear.weight
            if q.dtype != FP8:
                raise RuntimeError(f"{name}: expected e4m3 codes, found {q.dtype}")
            path = "dequant" if self.fp8_path == "fastest" else self.fp8_path
            if path == "scaled_mm" and (q.shape[0] % 16 or q.shape[1] % 16):
                path = "dequant"  # _scaled_mm needs K and N multiples of 16
            layer = FP8Linear(q.shape[1], q.shape[0], path, device="meta")
            layer.set_quantized(q.detach(), scale)
            if self.fp8_path == "fastest":
                layer.path = fastest_path(layer)
            setattr(parent, leaf, layer)
        self.scales.clear()
        return model
