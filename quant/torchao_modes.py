"""torchao modes: int8 / int4 weight-only, fp8 dynamic-activation (W8A8 per row), nvfp4.

torchao is imported only here, and only when one of these modes is asked for. Every mode is
checked against the installed torchao and the device first, so that what cannot run fails with
one sentence naming what is needed (torchao 0.18 on torch 2.13, measured):

=========== ===================================================== =============================
mode        torchao config                                        runs on
=========== ===================================================== =============================
int8        ``Int8WeightOnlyConfig()`` (per row)                  CUDA (CPU: ``int_linear.py``)
int4        ``Int4WeightOnlyConfig(128, "tile_packed_to_4d")``    CUDA >= 8.0 (tinygemm), bf16
                                                                  (CPU: ``int_linear.py``)
fp8-dynamic ``Float8DynamicActivationFloat8WeightConfig(PerRow)`` CUDA >= 8.9
nvfp4       ``NVFP4WeightOnlyConfig()`` (dequantizes in forward)  CPU, CUDA (fast only on SM100+)
=========== ===================================================== =============================

Weights are quantized one at a time (``quantize_weight``), so loading streams: peak memory is the
quantized model plus one bf16 tensor.
"""

from __future__ import annotations

import importlib

import torch
from torch import Tensor, nn

from .fp8 import QuantizationError

MODES = ("int8", "int4", "fp8-dynamic", "nvfp4")
# the configs used here; pyproject asks 0.17+, the first built for torch 2.11+
MIN_VERSION = (0, 14)
INT4_GROUP = 128


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def import_torchao():
    try:
        torchao = importlib.import_module("torchao")
    except ImportError:
        raise QuantizationError(
            "torchao is not installed: pip install torchao (0.17+ for torch 2.11+; "
            "the int8/int4/fp8-dynamic/nvfp4 modes need it, fp8 does not)") from None
    if _version(torchao.__version__) < MIN_VERSION:
        raise QuantizationError(
            f"torchao {torchao.__version__} is too old for the quantization modes: "
            "pip install -U torchao")
    return torchao


def _capability(device: torch.device) -> tuple[int, int] | None:
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


def check(mode: str, device: torch.device, dtype: torch.dtype) -> None:
    """Raise ``QuantizationError`` if ``mode`` cannot run on ``device`` with ``dtype``."""
    cap = _capability(device)
    if mode == "int4":
        if cap is None:
            raise QuantizationError(
                f"int4 weight-only needs CUDA (torchao's tile-packed int4 kernel) or the CPU "
                f"(quant.int_linear); {device} is neither. Use fp8 or nvfp4")
        if cap < (8, 0):
            raise QuantizationError(
                f"int4 weight-only needs an NVIDIA GPU with compute capability >= 8.0, "
                f"{device} has {cap[0]}.{cap[1]}; use fp8 or int8")
        if dtype != torch.bfloat16:
            raise QuantizationError(f"int4 weight-only runs in bfloat16 only, not {dtype}")
    elif mode == "fp8-dynamic":
        if cap is None or cap < (8, 9):
            have = "no CUDA" if cap is None else f"compute capability {cap[0]}.{cap[1]}"
            raise QuantizationError(
                f"fp8-dynamic needs an NVIDIA GPU with compute capability >= 8.9 (Ada, Hopper, "
                f"Blackwell); {device} has {have}. Use fp8 (weight-only) instead")
    elif mode not in MODES:
        raise QuantizationError(f"unknown torchao mode {mode!r}; one of {', '.join(MODES)}")
    import_torchao()


def config_for(mode: str):
    """The torchao config object for ``mode`` (torchao must be importable)."""
    import_torchao()
    q = importlib.import_module("torchao.quantization")
    try:
        # set_inductor_config=False: torchao would otherwise set process-wide inductor options
        # (coordinate descent tuning, …) for every compile of the host, other packs included.
        if mode == "int8":
            return q.Int8WeightOnlyConfig(set_inductor_config=False)
        if mode == "int4":
            return q.Int4WeightOnlyConfig(group_size=INT4_GROUP,
                                          int4_packing_format="tile_packed_to_4d",
                                          set_inductor_config=False)
        if mode == "fp8-dynamic":
            return q.Float8DynamicActivationFloat8WeightConfig(granularity=q.PerRow(),
                                                               set_inductor_config=False)
        if mode == "nvfp4":
            mx = importlib.import_module("torchao.prototype.mx_formats")
            return mx.NVFP4WeightOnlyConfig()  # sets no inductor options
    except (AttributeError, ImportError, TypeError) as e:
        torchao = importlib.import_module("torchao")
        raise QuantizationError(f"torchao {torchao.__version__} has no {mode} config as used "
                                f"here ({e}): pip install -U torchao") from None
    raise QuantizationError(f"unknown torchao mode {mode!r}; one of {', '.join(MODES)}")


def fits(mode: str, shape: tuple[int, int]) -> bool:
    """Whether torchao's kernel for ``mode`` takes a ``[N, K]`` weight (else it stays bf16)."""
    n, k = shape
    if mode == "int4":
        return k % INT4_GROUP == 0 and n % 8 == 0
    if mode in ("fp8-dynamic", "nvfp4"):
        return n % 16 == 0 and k % 16 == 0
    return True


def stored_bytes(mode: str, shape: tuple[int, int]) -> int:
    """Bytes torchao 0.18 stores for a ``[N, K]`` weight that ``fits`` ``mode`` (its tensor's
    parts; checked against torchao itself in tests/test_quant.py):

    - int8: int8 codes, fp32 scale and int8 zero point per row.
    - int4: the tile-packed codes of the weight padded to K a multiple of 1024 and N of 8
      (0.5 byte each), plus a bf16 (scale, zero) pair per group of 128 of the padded weight.
    - fp8-dynamic: e4m3 codes and an fp32 scale per row.
    - nvfp4: two codes a byte, an e4m3 scale per 16 (swizzled: padded to 128-row x 64-column
      tiles) and one fp32 per-tensor scale.
    """
    n, k = shape
    if mode == "int8":
        return n * k + n * (4 + 1)
    if mode == "int4":
        n_pad, k_pad = -(-n // 8) * 8, -(-k // 1024) * 1024
        return n_pad * k_pad // 2 + (k_pad // INT4_GROUP) * n_pad * 2 * 2
    if mode == "fp8-dynamic":
        return n * k + n * 4
    if mode == "nvfp4":
        return n * k // 2 + (-(-n // 128) * 128) * (-(-k // 64) * 4) + 4
    raise QuantizationError(f"unknown torchao mode {mode!r}; one of {', '.join(MODES)}")


def quantize_weight(weight: Tensor, config) -> Tensor:
    """One Linear weight ``[N, K]`` (on its device, in the model dtype) → torchao's tensor."""
    from torchao.quantization import quantize_

    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    layer.weight = nn.Parameter(weight, requires_grad=False)
    quantize_(layer, config)
    return layer.weight.detach()
