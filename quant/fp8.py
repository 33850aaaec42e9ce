"""Per-row FP8 weight-only quantization: e4m3 weights with one fp32 scale per output row.

    q, scale = quantize_rows(w)          # w [N, K] → q [N, K] float8_e4m3fn, scale [N, 1] fp32
    w_hat = dequantize_rows(q, scale, torch.bfloat16)

``scale = absmax(row) / 448`` (the community checkpoints' rule), so every row uses the full e4m3
range. Dequantization multiplies in fp32 and rounds once to the activation dtype: measured on a
2048x2560 layer against the exact product, that is closer than the card's bf16 product
(``q.to(bf16) * scale.to(bf16)``, which also rounds the scale) and than scaling after the matmul;
all three differ by at most one bf16 ulp per weight, far below the FP8 error itself.

Error bound (round to nearest, 3 mantissa bits): for a normal e4m3 value the error is at most half
an ulp, 2^-4 of its magnitude; below 2^-6 (subnormals) the spacing is 2^-9, so

    |w - w_hat| <= 2^-4 * |w| + 2^-10 * scale      (per element, exact fp32 dequantization)

How a layer runs (``FP8Linear.path``, fixed per layer so compiled graphs stay static):

- ``"load"``: dequantize once at load and keep a plain ``nn.Linear`` (no memory saving, bf16 speed,
  FP8 numerics). The CPU default: e4m3 → bf16 casts are not vectorized there (13-16x slower).
- ``"dequant"``: keep e4m3 + scale, dequantize in ``forward`` (weight-only numerics; half the
  memory, but ~21 bytes moved per weight and call). Any device with float8 tensors.
- ``"gemv"``: weight-only through the Triton GEMV of ``fp8_gemv.py``, which reads each e4m3 code
  once (~1 byte per weight, against 2 for bf16) for up to ``fp8_gemv.MAX_ROWS`` rows of
  activations (decode); more rows (prefill) dequantize as ``"dequant"``. CUDA >= 8.0 with Triton
  (below 8.9 the kernel decodes the e4m3 bits itself: ``fp8_gemv.decode_mode``).
- ``"scaled_mm"``: W8A8 through ``torch._scaled_mm`` with a per-row activation scale (FP8 tensor
  cores on compute capability >= 8.9; also runs, slowly, on CPU). Activations are quantized too,
  so it is only ever used when asked for by name (as torchao's ``fp8-dynamic`` mode).
- ``"fastest"``: time the weight-only kernels (``gemv``, ``dequant``) once per (shape, device)
  and keep the winner per layer; off CUDA the same as ``"auto"``.
- ``"auto"``: ``"gemv"`` on CUDA where it runs, else ``"dequant"`` on CUDA, ``"load"`` elsewhere.

A kernel refused for a layer (``settle_path`` runs each shape once at load: an exception, or a
result off the dequantized matmul) falls back to ``"dequant"``; the reason is warned once and kept
in ``FALLBACKS`` (benchmarks report it).

The default comes from ``SAILFISH_FP8_PATH`` when set, else ``"auto"``.

Embedding tables (``FP8Embedding``) have no path: a lookup gathers a few rows and dequantizes
only those, so they stay e4m3 on every device that holds float8, CPU included.
"""

from __future__ import annotations

import os
import time
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import fp8_gemv

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
# quantize_rows works this many rows at a time (fp32 temporaries ~80 MB at K=2560)
CHUNK_ROWS = 8192
PATHS = ("auto", "fastest", "load", "dequant", "gemv", "scaled_mm")
STORED_PATHS = ("dequant", "gemv", "scaled_mm")  # the paths that keep e4m3 weights on the device
WEIGHT_ONLY = ("gemv", "dequant")  # what "fastest" chooses among (same numerics)
FALLBACKS: list[str] = []  # every kernel refusal of this process, in words


class QuantizationError(ValueError):
    """A quantization mode cannot run here, or quantized weights are malformed."""


def quantize_rows(w: Tensor) -> tuple[Tensor, Tensor]:
    """``w [N, K]`` → (``q [N, K]`` e4m3, ``scale [N, 1]`` fp32). All-zero rows get scale 1.

    Large tables (the 155776-row token embedding) go ``CHUNK_ROWS`` rows at a time, so the fp32
    temporaries stay small next to the table itself; rows are independent, the result is the
    same."""
    if w.shape[0] > CHUNK_ROWS:
        q = torch.empty(w.shape, dtype=FP8, device=w.device)
        scale = torch.empty(w.shape[0], 1, device=w.device)
        for i in range(0, w.shape[0], CHUNK_ROWS):
            q[i: i + CHUNK_ROWS], scale[i: i + CHUNK_ROWS] = quantize_rows(w[i: i + CHUNK_ROWS])
        return q, scale
    w = w.float()
    amax = w.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, divided(amax, FP8_MAX), torch.ones_like(amax))
    return codes_for(w, scale), scale


def divided(t: Tensor, divisor: float) -> Tensor:
    """``t / divisor`` correctly rounded on every device.

    A tensor divided by a Python number is computed on CUDA as a multiplication by the number's
    rounded reciprocal (``amax * fl(1/448)``), which is not always the correctly rounded quotient
    the CPU gives: the same bf16 weight got scales 1 ulp apart, and so other codes, on a GPU.
    Divided by a tensor of the same device, both compute the IEEE quotient."""
    return t / torch.full_like(t, divisor)


def codes_for(w: Tensor, scale: Tensor) -> Tensor:
    """The e4m3 codes of fp32 ``w [N, K]`` for fp32 ``scale [N, 1]``, the same bits everywhere:
    the fp32 quotient ``w / scale`` (tensor by tensor: IEEE division on every device), clamped to
    ±448 (a value a hair over 448 would otherwise become NaN: e4m3fn has no infinity) and
    rounded to the nearest e4m3 value, ties to even (torch's cast, one bit-exact routine on
    every device)."""
    return (w / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def dequantize_rows(q: Tensor, scale: Tensor, dtype: torch.dtype) -> Tensor:
    """``q [N, K]`` e4m3, ``scale [N, 1]`` → ``[N, K]`` in ``dtype`` (fp32 product, one
    rounding)."""
    return (q.float() * scale).to(dtype)


def fake_quantize(w: Tensor) -> Tensor:
    """``w`` rounded to per-row FP8 and back, in ``w``'s dtype (the ``"load"`` path's weight)."""
    return dequantize_rows(*quantize_rows(w), w.dtype)


def scaled_mm_linear(x: Tensor, q: Tensor, scale: Tensor) -> Tensor:
    """W8A8: ``x [..., K]`` quantized per row to e4m3, times ``q [N, K]``; returns ``[..., N]``."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1]).float()  # [M, K]
    x_scale = x2.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / FP8_MAX  # [M, 1]
    xq = (x2 / x_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    y = torch._scaled_mm(xq, q.t(), scale_a=x_scale, scale_b=scale.t(), out_dtype=x.dtype,
                         use_fast_accum=True)  # [M, N]
    return y.reshape(*shape[:-1], q.shape[0])


class RowQuantized(nn.Module):
    """Holds ``weight [N, K]`` e4m3 and ``scale [N, 1]`` fp32, one scale per row: the parameters
    shared by ``FP8Linear`` (rows = output features) and ``FP8Embedding`` (rows = entries)."""

    def __init__(self, rows: int, cols: int, device=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, cols, dtype=FP8, device=device),
                                   requires_grad=False)
        self.scale = nn.Parameter(torch.ones(rows, 1, device=device), requires_grad=False)

    def set_quantized(self, q: Tensor, scale: Tensor) -> None:
        self.weight = nn.Parameter(q, requires_grad=False)
        self.scale = nn.Parameter(scale, requires_grad=False)


class FP8Linear(RowQuantized):
    """A bias-free Linear holding ``weight [N, K]`` e4m3 and ``scale [N, 1]`` fp32.

    Do not call ``.to(dtype)`` on a model holding these: it would cast the e4m3 codes without
    their scales."""

    def __init__(self, in_features: int, out_features: int, path: str = "dequant", device=None):
        if path not in STORED_PATHS:
            raise QuantizationError(f"FP8Linear path must be one of {STORED_PATHS}, got {path!r}")
        super().__init__(out_features, in_features, device)
        self.in_features, self.out_features, self.path = in_features, out_features, path

    @classmethod
    def from_weight(cls, w: Tensor, path: str = "dequant") -> "FP8Linear":
        layer = cls(w.shape[1], w.shape[0], path, device="meta")
        layer.set_quantized(*quantize_rows(w))
        return layer

    def forward(self, x: Tensor) -> Tensor:
        if self.path == "scaled_mm":
            return scaled_mm_linear(x, self.weight, self.scale)
        if self.path == "gemv" and x.numel() <= fp8_gemv.MAX_ROWS * x.shape[-1]:
            return fp8_gemv.gemv_linear(x, self.weight, self.scale)
        return F.linear(x, dequantize_rows(self.weight, self.scale, x.dtype))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, path={self.path}"


class FP8Embedding(RowQuantized):
    """An embedding table held as ``weight [V, D]`` e4m3 and ``scale [V, 1]`` fp32 (per-row, the
    rule and rounding of ``FP8Linear``). ``forward(ids)`` gathers the rows of ``ids`` (any shape,
    as ``nn.Embedding``) and dequantizes only those to ``dtype``.

    No matmul runs over the e4m3 codes, only a gather of a few rows per frame, so the table stays
    e4m3 on every device that holds float8 (CPU included): see ``bench/bench_quant.py``."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype=torch.bfloat16, device=None):
        super().__init__(num_embeddings, embedding_dim, device)
        self.num_embeddings, self.embedding_dim, self.dtype = num_embeddings, embedding_dim, dtype

    @classmethod
    def from_weight(cls, w: Tensor, dtype: torch.dtype | None = None) -> "FP8Embedding":
        table = cls(w.shape[0], w.shape[1], dtype or w.dtype, device="meta")
        table.set_quantized(*quantize_rows(w))
        return table

    def forward(self, ids: Tensor) -> Tensor:
        # Gathered as bytes: indexing kernels do not take float8 on every device.
        codes = self.weight.view(torch.uint8)[ids].view(FP8)  # [*ids.shape, D]
        return dequantize_rows(codes, self.scale[ids], self.dtype)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, dtype={self.dtype}"


# ---------------------------------------------------------------------------- path choice
_float8_ok: dict[str, bool] = {}
_fastest: dict[tuple, str] = {}
_settled: dict[tuple, str | None] = {}  # (path, N, K, device) → None (runs) or why not
PROBE_REL_ERR = {"gemv": 1e-2, "scaled_mm": 0.1}  # vs the fp32 matmul on dequantized weights


def float8_supported(device: torch.device) -> bool:
    """Whether ``device`` can hold e4m3 tensors and cast them (probed once per device type)."""
    if device.type not in _float8_ok:
        try:
            probe = torch.ones(4, device=device).to(FP8).float()
            _float8_ok[device.type] = bool(probe.sum().item() == 4)
        except (RuntimeError, TypeError, NotImplementedError):
            _float8_ok[device.type] = False
    return _float8_ok[device.type]


def scaled_mm_supported(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device) >= (8, 9)
    return device.type == "cpu"


def record_fallback(reason: str) -> None:
    """Keep ``reason`` in ``FALLBACKS`` and warn, once per process."""
    if reason not in FALLBACKS:
        FALLBACKS.append(reason)
        warnings.warn(reason)


def resolve_path(path: str | None, device: torch.device) -> str:
    """The concrete path for ``path`` (None → ``$SAILFISH_FP8_PATH`` or ``"auto"``) on ``device``.
    Returns ``"load"``, ``"dequant"``, ``"gemv"``, ``"scaled_mm"`` or ``"fastest"``."""
    path = path or os.environ.get("SAILFISH_FP8_PATH") or "auto"
    if path not in PATHS:
        raise QuantizationError(f"fp8 path must be one of {', '.join(PATHS)}, got {path!r}")
    device = torch.device(device)
    if path == "fastest" and device.type != "cuda":
        path = "auto"
    if path == "auto":
        return _auto_path(device)
    if path in STORED_PATHS + ("fastest",) and not float8_supported(device):
        raise QuantizationError(
            f"fp8 path {path!r} keeps float8_e4m3fn weights on {device}, which this torch "
            f"({torch.__version__}) cannot hold or cast there; use fp8 path 'load' "
            "(SAILFISH_FP8_PATH=load: dequantize at load, same numerics, bf16 memory)")
    if path == "scaled_mm" and not scaled_mm_supported(device):
        raise QuantizationError(
            f"fp8 path 'scaled_mm' needs an NVIDIA GPU with compute capability >= 8.9 (Ada, "
            f"Hopper, Blackwell); {device} has none. Use 'dequant' or 'load'")
    reason = fp8_gemv.unavailable(device) if path == "gemv" else None
    if reason:
        raise QuantizationError(f"fp8 path 'gemv' cannot run on {device}: {reason}. "
                                "Use 'dequant' (or 'auto')")
    return path


def _auto_path(device: torch.device) -> str:
    """``"gemv"`` on CUDA where the kernel runs, else ``"dequant"`` there; ``"load"`` elsewhere."""
    if device.type != "cuda":
        return "load"
    reason = fp8_gemv.unavailable(device)
    if reason:
        record_fallback(f"fp8: the GEMV kernel is unavailable ({reason}); using 'dequant'")
        return "dequant"
    return "gemv"


def settle_path(layer: FP8Linear, path: str, dtype: torch.dtype = torch.bfloat16) -> str:
    """The path ``layer`` runs for the resolved ``path``: ``fastest`` is timed (``fastest_path``);
    ``gemv`` and ``scaled_mm`` are run once per (shape, device) on activations of ``dtype`` and
    replaced by ``dequant`` (reason recorded) if the kernel refuses the shape or disagrees with
    the fp32 matmul on the dequantized weights."""
    if path == "fastest":
        return fastest_path(layer, dtype=dtype)
    if path not in PROBE_REL_ERR:
        return path
    reason = _refusal(layer, path, dtype)
    if reason:
        record_fallback(f"fp8 {path} refused for [{layer.out_features}, {layer.in_features}] "
                        f"on {layer.weight.device}: {reason}; using 'dequant'")
        return "dequant"
    return path


def _refusal(layer: FP8Linear, path: str, dtype: torch.dtype) -> str | None:
    """Why ``path`` cannot run ``layer``'s shape (None: it runs and agrees), probed once."""
    w = layer.weight
    key = (path, tuple(w.shape), str(w.device), dtype)
    if key in _settled:
        return _settled[key]
    if path == "scaled_mm" and (w.shape[0] % 16 or w.shape[1] % 16):
        _settled[key] = "_scaled_mm needs K and N multiples of 16"
        return _settled[key]
    _settled[key] = _probe(layer, path, dtype)
    return _settled[key]


def _probe(layer: FP8Linear, path: str, dtype: torch.dtype) -> str | None:
    """Run ``layer`` on ``path`` once against the dequantized matmul: None when it agrees, else
    why not."""
    w = layer.weight
    x = torch.randn(1, w.shape[1], device=w.device).to(dtype)  # [1, K], batch-1 decode
    previous = layer.path
    try:
        with torch.inference_mode():
            layer.path = path
            y = layer(x).float()
            ref = F.linear(x.float(), dequantize_rows(w, layer.scale, torch.float32))
        rel = float((y - ref).norm() / ref.norm().clamp(min=1e-30))
        ok = rel <= PROBE_REL_ERR[path]
        return None if ok else f"result off the dequantized matmul (relative error {rel:.3g})"
    except Exception as e:  # noqa: BLE001 - any refusal (compile error, unsupported shape) → dequant
        first = str(e).splitlines()[0] if str(e) else ""
        return f"{type(e).__name__}: {first[:200]}"
    finally:
        layer.path = previous


def fastest_path(layer: FP8Linear, batch: int = 1, repeats: int = 20,
                 dtype: torch.dtype = torch.bfloat16) -> str:
    """Time the weight-only kernels (``WEIGHT_ONLY``) that run this layer's shape on its device
    (once per (N, K, batch, device)); return the faster. Only meaningful on CUDA."""
    w = layer.weight
    key = (tuple(w.shape), batch, str(w.device), dtype)
    if key in _fastest:
        return _fastest[key]
    candidates = [p for p in WEIGHT_ONLY if settle_path(layer, p, dtype) == p]
    x = torch.randn(batch, w.shape[1], device=w.device).to(dtype)
    times, previous = {}, layer.path
    with torch.inference_mode():
        for path in candidates:
            layer.path = path
            times[path] = _time_calls(lambda: layer(x), w.device, repeats)
    layer.path = previous
    _fastest[key] = min(times, key=times.get)
    return _fastest[key]


def _time_calls(fn, device: torch.device, repeats: int) -> float:
    """Seconds for ``repeats`` calls of ``fn`` after 3 warm-up calls (device synchronized)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda _device: None)
    for _ in range(3):
        fn()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync(device)
    return time.perf_counter() - t0
