"""Weight-only int8 and int4 Linear layers for the CPU, on torch's own kernels.

    layer = Int8Linear.from_weight(w)           # w [N, K] → int8 codes, one scale per row
    layer = Int4Linear.from_weight(w)           # → 4-bit codes, (scale, zero) per 128 columns

At batch 1 a decode step reads every weight once, so on the CPU its speed is the bytes read per
frame: bf16 reads 2 bytes a weight, these 1 and ~0.53. They multiply activations by the codes
directly, never building a bf16 copy of the weight:

- ``Int8Linear``: our VNNI GEMV (``cpu_gemv.py``, where it builds and runs: torch's kernel is
  bound by its arithmetic, not by memory; bf16 in and out, called directly when eager) or
  ``torch._weight_int8pack_mm`` (ATen's CPU int8 GEMV: codes × activation, then the row
  scale). torchao's ``Int8WeightOnlyConfig`` casts the whole weight to bf16 on every call on
  the CPU (``int8_tensor.py``: ``w.t().to(dtype)``), which reads 1 byte and writes and reads 2
  more per weight: slower than bf16 (bench/bench_quant.py).
- ``Int4Linear``: ``torch._weight_int4pack_mm_for_cpu``, the kernel torchao's CPU int4 tensor
  (``Int4OpaqueTensor``, a prototype) calls; asymmetric, ``w = (q - 8) · scale + zero`` per group
  of ``GROUP`` columns, scales and zeros in the activation dtype.

Both kernels want scales in the activation dtype, so the scales are rounded to it *before* the
codes are chosen: the codes are the best for the stored scale, and the only error is the
rounding of the weight to the code grid (bounds in ``tests/test_quant.py``).

Rows of activations: the kernels are GEMVs, one pass over the weight per row of activations;
a few rows (decode of a small batch) go in one call, more go ``CHUNK_ROWS`` rows a call. A
prompt (more than ``PREFILL_ROWS`` rows) of an ``Int8Linear`` is instead multiplied by its
codes cast to the activation dtype in a per-thread scratch buffer (exact: the codes are
integers of at most 127) by the bf16 GEMM, then scaled: 2.5x faster than the chunked GEMV for
75 rows of a 9728 x 2560 weight (74 against 184 ms here), so int8's first audio comes sooner.
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import cpu_gemv, int_gemv
from .fp8 import divided

GROUP = 128  # int4: columns per (scale, zero) pair; K must be a multiple
INT4_ROWS = 16  # int4: the packing takes N a multiple of this
INT4_MAX = 15
# Candidate shrinkings of each int4 group's [min, max] range: the one with the least squared
# error is kept (1.0 = plain min/max, so never worse than it).
CLIP_RATIOS = (1.0, 0.9, 0.8)
CHUNK_ROWS = 4  # activation rows per kernel call beyond which a prompt is split (≤ cpu_gemv's)
PREFILL_ROWS = 16  # Int8Linear: more rows than this go through the cast codes and the GEMM
# The rows quantized at a time: as many as make each fp32 temporary QUANTIZE_BYTES, so they stay
# in the cache and, below the loader's 1 MB mapping threshold (fish_core/loading/weights.py),
# come from the heap. 512 rows at a time made every temporary a fresh mapping while loading,
# zeroed by the kernel on first touch: the real-size int4 load took 5-6 min instead of ~1
# (one [9728, 2560] weight: 2.2 s against 0.4 s).
QUANTIZE_BYTES = 256 << 10
# On a GPU (or the meta device, which counts its ops) there are no page faults to avoid but a
# launch per op: a whole S2-Pro weight ([9728, 2560] fp32: 100 MB) is one step, so int4 of the
# model is a few thousand kernels, not millions (transient device memory: a few such copies).
DEVICE_QUANTIZE_BYTES = 128 << 20


def quantize_rows(in_features: int, device=None) -> int:
    """Weight rows per quantization step for rows of ``in_features`` columns on ``device``
    (default the CPU)."""
    limit = (QUANTIZE_BYTES if device is None or torch.device(device).type == "cpu"
             else DEVICE_QUANTIZE_BYTES)
    return max(1, limit // (4 * in_features))


def int4_fits(shape: tuple[int, int]) -> bool:
    """Whether a ``[N, K]`` weight can be held by ``Int4Linear`` (K a multiple of ``GROUP``, N
    of ``INT4_ROWS``)."""
    n, k = shape
    return k % GROUP == 0 and n % INT4_ROWS == 0 and n > 0


def _rows_through(kernel, x: Tensor, out_features: int) -> Tensor:
    """``kernel(x2 [M, K]) → [M, N]`` over ``x [..., K]``: small M in one call, large M in
    chunks of ``CHUNK_ROWS`` (the kernels' per-row cost grows beyond a few rows)."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    if x2.shape[0] <= CHUNK_ROWS:  # (compiled too: our kernel takes at most 4 rows a call)
        y = kernel(x2)
    else:
        y = torch.cat([kernel(part) for part in x2.split(CHUNK_ROWS)])
    return y.reshape(*shape[:-1], out_features)


class IntLinear(nn.Module):
    """What both layers share: ``weight`` (the codes) and one tensor of parameters (``PARAMS``),
    set together."""

    PARAMS = ""

    @classmethod
    def holding(cls, weight: Tensor, params: Tensor) -> "IntLinear":
        """The layer holding ``weight`` (codes as the kernel takes them) and ``params``."""
        layer = cls(*cls.features(weight, params), device="meta")
        layer.set_quantized(weight, params)
        return layer

    def set_quantized(self, weight: Tensor, params: Tensor) -> None:
        self.weight = nn.Parameter(weight, requires_grad=False)
        setattr(self, self.PARAMS, nn.Parameter(params, requires_grad=False))


_local = threading.local()


def _scratch(shape, dtype: torch.dtype) -> Tensor:
    """A per-thread buffer of ``shape`` (a view of one that only grows; reused, so no page
    faults of a fresh allocation per call)."""
    n = shape[0] * shape[1]
    buf = getattr(_local, "buffers", {}).get(dtype)
    if buf is None or buf.numel() < n:
        buf = torch.empty(n, dtype=dtype)
        _local.__dict__.setdefault("buffers", {})[dtype] = buf
    return buf[:n].view(shape)


# ---------------------------------------------------------------------------- int8
def quantize_int8(w: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``w [N, K]`` → (codes ``[N, K]`` int8 in -127..127, scale ``[N]`` in ``dtype``).

    ``scale ≈ absmax(row) / 127`` rounded to ``dtype`` first; all-zero rows get scale 1."""
    codes = torch.empty(w.shape, dtype=torch.int8, device=w.device)
    scales = torch.empty(w.shape[0], dtype=dtype, device=w.device)
    step = quantize_rows(w.shape[1], w.device)
    for i in range(0, w.shape[0], step):
        rows = w[i: i + step].float()
        amax = rows.abs().amax(dim=1)
        scale = torch.where(amax > 0, divided(amax, 127), torch.ones_like(amax)).to(dtype)
        codes[i: i + step] = torch.round(rows / scale.float()[:, None]).clamp(-127, 127)
        scales[i: i + step] = scale
    return codes, scales


class Int8Linear(IntLinear):
    """A bias-free Linear holding ``weight [N, K]`` int8 and ``scale [N]`` (activation dtype):
    ``y = (x @ weight.T) * scale``."""

    PARAMS = "scale"

    def __init__(self, in_features: int, out_features: int, dtype=torch.bfloat16, device=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=torch.int8,
                                               device=device), requires_grad=False)
        self.scale = nn.Parameter(torch.ones(out_features, dtype=dtype, device=device),
                                  requires_grad=False)

    @classmethod
    def from_weight(cls, w: Tensor, dtype: torch.dtype | None = None) -> "Int8Linear":
        layer = cls(w.shape[1], w.shape[0], device="meta")
        layer.set_quantized(*quantize_int8(w, dtype or w.dtype))
        return layer

    @staticmethod
    def features(codes: Tensor, scale: Tensor) -> tuple[int, int]:
        """(in, out) of ``quantize_int8``'s (codes, scale)."""
        return codes.shape[1], codes.shape[0]

    def dequantized(self, dtype: torch.dtype) -> Tensor:
        """The weight the layer multiplies by, ``[N, K]`` in ``dtype`` (tests, checks)."""
        return (self.weight.float() * self.scale.float()[:, None]).to(dtype)

    def forward(self, x: Tensor) -> Tensor:
        if self.weight.device.type != "cpu":  # CUDA: our Triton GEMV (int_gemv.py)
            return self._device_forward(x)
        scale = self.scale if self.scale.dtype == x.dtype else self.scale.to(x.dtype)
        rows = x.numel() // x.shape[-1]
        if rows > PREFILL_ROWS and not torch.compiler.is_compiling():
            codes = _scratch(self.weight.shape, x.dtype).copy_(self.weight)
            return F.linear(x, codes) * scale
        if self.own_kernel:
            # eager: the extension's function itself (no op dispatch); compiled: the op
            compiling = torch.compiler.is_compiling()
            gemv = cpu_gemv.int8_gemv if compiling else cpu_gemv.module().int8_gemv
            kinds = (torch.float32, torch.bfloat16)  # what the kernel takes and gives
            scale = self.scale if self.scale.dtype in kinds else self.scale.float()
            y = _rows_through(lambda x2: gemv(x2.contiguous(), self.weight, scale),
                              x if x.dtype in kinds else x.float(), self.out_features)
            return y if y.dtype == x.dtype else y.to(x.dtype)
        return _rows_through(lambda x2: torch._weight_int8pack_mm(x2.contiguous(), self.weight,
                                                                   scale), x, self.out_features)

    def _device_forward(self, x: Tensor) -> Tensor:
        """Up to ``int_gemv.MAX_ROWS`` rows: the int8 GEMV; more (prefill): the matmul on the
        codes cast to the activation dtype (exact: integers of at most 127), then the scale."""
        if x.numel() // x.shape[-1] <= int_gemv.MAX_ROWS:
            return _gemv_rows(int_gemv.int8_gemv, x, self.weight, self.scale, self.out_features)
        return F.linear(x, self.weight.to(x.dtype)) * self.scale.to(x.dtype)

    torch_kernel = False  # True: never ``cpu_gemv`` (benchmarks compare the two)

    @property
    def own_kernel(self) -> bool:
        """Whether decode steps go through ``cpu_gemv`` (built and runnable here, CPU weights,
        K a multiple of its block)."""
        return (not self.torch_kernel and self.weight.device.type == "cpu"
                and self.in_features % cpu_gemv.BLOCK == 0 and cpu_gemv.available())

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


# ---------------------------------------------------------------------------- int4
def _int4_step(k: int, device: torch.device, ratios: int) -> int:
    """Rows of ``K`` columns quantized at a time by ``quantize_int4`` with ``ratios`` ratios."""
    step = quantize_rows(k, device)
    if device.type == "cpu":  # R copies of each temporary: keep each under QUANTIZE_BYTES
        step = max(1, step // ratios)
    return step


def quantize_int4(w: Tensor, dtype: torch.dtype, clip_ratios=CLIP_RATIOS
                  ) -> tuple[Tensor, Tensor]:
    """``w [N, K]`` → (codes ``[N, K]`` int32 in 0..15, ``scales_and_zeros [K / GROUP, N, 2]``
    in ``dtype``), ``w ≈ (q - 8) · scale + zero`` per group of ``GROUP`` columns.

    Per group, the range [min, max] shrunk by each of ``clip_ratios`` is tried and the one with
    the least squared error kept; scale and zero are rounded to ``dtype`` before the codes are
    chosen."""
    n, k = w.shape
    codes = torch.empty(n, k, dtype=torch.int32, device=w.device)
    params = torch.empty(k // GROUP, n, 2, dtype=dtype, device=w.device)
    # every ratio at once (a leading dim): the same numbers, a third of the kernels
    ratios = torch.tensor(clip_ratios, dtype=torch.float32, device=w.device).view(-1, 1, 1, 1)
    step = _int4_step(k, w.device, len(clip_ratios))
    for i in range(0, n, step):
        g = w[i: i + step].float().reshape(-1, k // GROUP, GROUP)  # [r, G, GROUP]
        lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
        q, scale, zero = _int4_grid(g, lo * ratios, hi * ratios, dtype)  # [R, r, G, ·]
        err = ((q - 8) * scale + zero - g).square().sum(-1, keepdim=True)  # [R, r, G, 1]
        best = err.argmin(0, keepdim=True)  # the first ratio of least error
        codes[i: i + step] = q.gather(0, best.expand(1, *q.shape[1:]))[0].reshape(-1, k)
        chosen = torch.cat([scale, zero], -1).gather(0, best.expand(1, *best.shape[1:3], 2))
        params[:, i: i + step] = chosen[0].transpose(0, 1).to(dtype)
    return codes, params


def pack_int4(codes: Tensor) -> Tensor:
    """``codes [N, K]`` in 0..15 → ``[N, K / 2]`` uint8 in the CPU kernel's layout."""
    return torch._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32), 1)


def _int4_grid(g: Tensor, lo: Tensor, hi: Tensor, dtype: torch.dtype):
    """Codes (as floats), scale and zero (fp32 values of ``dtype`` numbers) for groups ``g``
    mapped onto 16 levels spanning [lo, hi]. The scale is never 0, in ``dtype`` too: a constant
    group's 1e-12 would round to 0 in fp16 (its codes then 0 / 0), and the Triton GEMV divides
    by it (``int_gemv``: the zero folded into the codes' offset)."""
    least = torch.finfo(dtype).tiny * torch.finfo(dtype).eps  # smallest positive (subnormal)
    scale = divided(hi - lo, INT4_MAX).clamp(min=1e-12).to(dtype).float().clamp(min=least)
    zero = (lo + 8 * scale).to(dtype).float()
    q = torch.round((g - zero) / scale + 8).clamp(0, INT4_MAX)
    return q, scale, zero


class Int4Linear(IntLinear):
    """A bias-free Linear holding 4-bit codes packed for ``torch._weight_int4pack_mm_for_cpu``
    (``weight [N, K / 2]`` uint8) and ``scales_and_zeros [K / GROUP, N, 2]`` (activation dtype)."""

    PARAMS = "scales_and_zeros"

    def __init__(self, in_features: int, out_features: int, dtype=torch.bfloat16, device=None):
        super().__init__()
        if not int4_fits((out_features, in_features)):
            raise ValueError(f"Int4Linear needs in_features a multiple of {GROUP} and "
                             f"out_features of {INT4_ROWS}, got {in_features} and {out_features}")
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features // 2, dtype=torch.uint8,
                                               device=device), requires_grad=False)
        self.scales_and_zeros = nn.Parameter(
            torch.zeros(in_features // GROUP, out_features, 2, dtype=dtype, device=device),
            requires_grad=False)

    @classmethod
    def from_weight(cls, w: Tensor, dtype: torch.dtype | None = None) -> "Int4Linear":
        layer = cls(w.shape[1], w.shape[0], device="meta")
        codes, params = quantize_int4(w, dtype or w.dtype)
        layer.set_quantized(pack_int4(codes), params)
        return layer

    @staticmethod
    def features(packed: Tensor, scales_and_zeros: Tensor) -> tuple[int, int]:
        """(in, out) of ``pack_int4``'s codes and ``quantize_int4``'s ``[K / GROUP, N, 2]``."""
        return scales_and_zeros.shape[0] * GROUP, packed.shape[0]

    def dequantized(self, dtype: torch.dtype) -> Tensor:
        """The weight the layer multiplies by, ``[N, K]`` in ``dtype``: the kernel applied to
        the identity (exact: one product per output)."""
        eye = torch.eye(self.in_features, dtype=self.scales_and_zeros.dtype,
                        device=self.weight.device)
        return torch._weight_int4pack_mm_for_cpu(eye, self.weight, GROUP,
                                                 self.scales_and_zeros).T.to(dtype)

    def forward(self, x: Tensor) -> Tensor:
        params = self.scales_and_zeros
        if params.dtype != x.dtype:
            params = params.to(x.dtype)
        return _rows_through(
            lambda x2: torch._weight_int4pack_mm_for_cpu(x2.contiguous(), self.weight, GROUP,
                                                         params), x, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"int4 g{GROUP}")


def _gemv_rows(gemv, x: Tensor, weight: Tensor, params: Tensor, out_features: int) -> Tensor:
    """``gemv(x2 [M, K], weight, params) → [M, N]`` over ``x [..., K]``."""
    shape = x.shape
    y = gemv(x.reshape(-1, shape[-1]).contiguous(), weight, params)
    return y.reshape(*shape[:-1], out_features)


def int4_gemv_fits(shape: tuple[int, int]) -> bool:
    """Whether a ``[N, K]`` weight can be held by ``Int4GemvLinear`` (K a multiple of
    ``int_gemv.K_MULTIPLE``)."""
    n, k = shape
    return k % int_gemv.K_MULTIPLE == 0 and n > 0


class Int4GemvLinear(IntLinear):
    """int4 on CUDA: ``weight [N, K / 2]`` uint8 in ``int_gemv.pack``'s layout and
    ``scales_and_zeros [K / (2 GROUP), N, 2, 2]`` (activation dtype): ``quantize_int4``'s
    ``[K / GROUP, N, 2]`` put in the order the kernel reads them when the layer is built
    (``int_gemv.order_params``; the codes unchanged); decode rows through
    ``int_gemv.int4_gemv``, prefill through the dequantized weight."""

    PARAMS = "scales_and_zeros"

    def __init__(self, in_features: int, out_features: int, dtype=torch.bfloat16, device=None):
        super().__init__()
        if not int4_gemv_fits((out_features, in_features)):
            raise ValueError(f"Int4GemvLinear needs in_features a multiple of "
                             f"{int_gemv.K_MULTIPLE}, got {in_features}")
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features // 2, dtype=torch.uint8,
                                               device=device), requires_grad=False)
        self.scales_and_zeros = nn.Parameter(
            torch.zeros(in_features // (2 * GROUP), out_features, 2, 2, dtype=dtype,
                        device=device), requires_grad=False)

    @classmethod
    def from_weight(cls, w: Tensor, dtype: torch.dtype | None = None) -> Int4GemvLinear:
        codes, params = quantize_int4(w, dtype or w.dtype)
        return cls.holding(int_gemv.pack(codes), params)

    @staticmethod
    def features(packed: Tensor, scales_and_zeros: Tensor) -> tuple[int, int]:
        """(in, out) of ``int_gemv.pack``'s codes (either layout of the parameters)."""
        return 2 * packed.shape[1], packed.shape[0]

    def set_quantized(self, weight: Tensor, params: Tensor) -> None:
        """``params`` as ``quantize_int4`` gives them (``[K / GROUP, N, 2]``: put in the
        kernel's order) or already in it (``[K / (2 GROUP), N, 2, 2]``)."""
        if params.dim() == 3:
            params = int_gemv.order_params(params)
        super().set_quantized(weight, params)

    def dequantized(self, dtype: torch.dtype) -> Tensor:
        """``[N, K]`` in ``dtype``: ``(q - 8) · scale + zero`` in fp32, rounded once."""
        n, k = self.out_features, self.in_features
        q = int_gemv.unpack(self.weight).float().reshape(n, k // GROUP, GROUP)
        params = int_gemv.unorder_params(self.scales_and_zeros)  # [K / GROUP, N, 2]
        scale, zero = params.float().transpose(0, 1).unbind(-1)  # [N, K / GROUP]
        return ((q - 8) * scale.unsqueeze(-1) + zero.unsqueeze(-1)).reshape(n, k).to(dtype)

    def forward(self, x: Tensor) -> Tensor:
        if x.numel() // x.shape[-1] <= int_gemv.MAX_ROWS:
            return _gemv_rows(int_gemv.int4_gemv, x, self.weight, self.scales_and_zeros,
                              self.out_features)
        return F.linear(x, self.dequantized(x.dtype))

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"int4 g{GROUP} (Triton GEMV)")


def int8_bytes(shape: tuple[int, int], scale_bytes: int = 2) -> int:
    """Bytes ``Int8Linear`` holds for a ``[N, K]`` weight (codes + a scale per row)."""
    n, k = shape
    return n * k + n * scale_bytes


def int4_bytes(shape: tuple[int, int], param_bytes: int = 2) -> int:
    """Bytes ``Int4Linear`` holds for a ``[N, K]`` weight (half a byte a code + a (scale, zero)
    pair per group)."""
    n, k = shape
    return n * k // 2 + (k // GROUP) * n * 2 * param_bytes
