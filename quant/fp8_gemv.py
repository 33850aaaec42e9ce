"""FP8 weight-only GEMV: ``y = (x @ q.T) * scale`` reading each e4m3 code once (one byte a weight).

At batch 1 a decode step is memory-bound: its time is the bytes it reads. Dequantizing in
``forward`` (``q.float() * scale``, then a bf16 matmul) reads the codes, writes and reads an fp32
and a bf16 copy: ~21 bytes moved per weight against 2 for bf16. This Triton kernel converts the
codes in registers and multiplies them into an fp32 accumulator, so a layer reads ~1 byte per
weight plus its activations:

    y = torch.ops.sailfish.fp8_gemv(x, q, scale)   # x [M, K] (M <= MAX_ROWS), q [N, K] e4m3,
                                                   # scale [N, 1] fp32 → y [M, N] in x's dtype

Numerics: every product ``x * q`` and the sum are fp32, the row scale is applied to the sum, and
the result is rounded once to ``x``'s dtype; i.e. the fp32 matmul on the dequantized weights,
within fp32 rounding (closer to it than the ``dequant`` path, which rounds the weights to bf16).

Each program computes ``BLOCK_N`` outputs of one row of ``x`` (grid: ``N / BLOCK_N`` × ``M``
× ``SPLIT_K``), over all of K or, split, over a slice of it (``CLASS_CONFIGS``); for M > 1 the
codes are read again from L2. Larger M (prefill) is compute-bound: there the layer
dequantizes and calls cuBLAS (``MAX_ROWS``). The op is registered with a fake (meta)
implementation, so it traces under ``torch.compile(fullgraph=True)`` and FakeTensor, where
``check`` enforces the same constraints as a real call.

Block shapes (``CONFIGS``): a memory-bound GEMV is as fast as the bytes it keeps in flight. The
big parts (H100/H200: >= 100 multiprocessors) get wide blocks and more warps and stages, so
every multiprocessor has tens of KB of loads outstanding; consumer cards (20-80 SMs, smaller L2)
get narrower rows so that even N = 2560 makes several waves. Triton times the configurations of
the device's class once per (N, K) on the first call.

Decoding the codes (``decode_mode``): Triton converts e4m3 natively on compute capability >= 8.9.
Below (A100, RTX 30xx: 8.0-8.6) the kernel decodes them itself with bit operations: the sign and
the 7 exponent-mantissa bits placed into an fp16 (``s eeee mmm`` → ``s 0eeee mmm0000000``) give
the e4m3 value times 2^-8 exactly, subnormals included, and the 2^8 goes into the row scale
(exact: a power of two). ``SAILFISH_FP8_DECODE=bits`` forces it on any device (to measure it on
an H100/H200), ``native`` forbids it; default ``auto``.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from .ops import custom_op

try:
    import triton
    import triton.language as tl
except ImportError:  # the op still traces (fake implementation); a real call says what is missing
    triton = tl = None

FP8 = torch.float8_e4m3fn
MAX_ROWS = 8  # rows of x (batch × tokens) up to which the GEMV runs; above: dequant + cuBLAS
K_MULTIPLE = 16  # K a multiple of 16: 16-byte code loads, no partial vectors
ACTIVATION_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's CPU interpreter (tests)


class GemvError(ValueError):
    """The GEMV cannot take these tensors (shape, dtype, layout) or cannot run on this device."""


DECODE_MODES = ("auto", "native", "bits")
NATIVE_CAPABILITY = (8, 9)  # Triton converts e4m3 itself from here on
BITS_CAPABILITY = (8, 0)  # the bit decode's oldest target (A100)


def decode_mode(device: torch.device) -> str:
    """``"native"`` (Triton's e4m3 conversion) or ``"bits"`` (our bit decode) on ``device``:
    ``$SAILFISH_FP8_DECODE`` when set to one of them, else native where the device has it."""
    asked = os.environ.get("SAILFISH_FP8_DECODE") or "auto"
    if asked not in DECODE_MODES:
        raise GemvError(f"SAILFISH_FP8_DECODE must be one of {', '.join(DECODE_MODES)}, "
                        f"got {asked!r}")
    if asked != "auto":
        return asked
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < NATIVE_CAPABILITY:
        return "bits"
    return "native"


def unavailable(device: torch.device) -> str | None:
    """Why the kernel cannot run on ``device`` (None: it can)."""
    device = torch.device(device)
    if triton is None:
        return "Triton is not installed"
    if device.type == "cpu":
        return (None if INTERPRETED else
                "the Triton GEMV runs on CUDA (CPU only under TRITON_INTERPRET=1)")
    if device.type != "cuda":
        return f"the Triton GEMV runs on CUDA, not {device.type}"
    cap = torch.cuda.get_device_capability(device)
    try:
        mode = decode_mode(device)
    except GemvError as e:
        return str(e)
    if mode == "native" and cap < NATIVE_CAPABILITY:
        return (f"e4m3 conversion in Triton needs compute capability >= 8.9, {device} has "
                f"{cap[0]}.{cap[1]} (SAILFISH_FP8_DECODE=native; 'auto' decodes the bits)")
    if cap < BITS_CAPABILITY:
        return (f"the GEMV needs compute capability >= 8.0, {device} has {cap[0]}.{cap[1]}")
    return None


def check(x: Tensor, q: Tensor, scale: Tensor) -> None:
    """Raise ``GemvError`` naming every argument that the kernel cannot take."""
    problems = []
    if q.dim() != 2 or q.dtype != FP8 or not q.is_contiguous():
        problems.append(f"q must be a contiguous [N, K] float8_e4m3fn tensor, got {q.dtype} "
                        f"{list(q.shape)}")
    n, k = q.shape if q.dim() == 2 else (-1, -1)
    if k % K_MULTIPLE:
        problems.append(f"q: K must be a multiple of {K_MULTIPLE}, got {k}")
    if scale.shape != (n, 1) or scale.dtype != torch.float32 or not scale.is_contiguous():
        problems.append(f"scale must be a contiguous [{n}, 1] float32 tensor, got {scale.dtype} "
                        f"{list(scale.shape)}")
    if (x.dim() != 2 or x.shape[-1] != k or x.dtype not in ACTIVATION_DTYPES
            or not x.is_contiguous()):
        problems.append(f"x must be a contiguous [M, {k}] bf16/fp16/fp32 tensor, got {x.dtype} "
                        f"{list(x.shape)}")
    elif x.shape[0] > MAX_ROWS:
        problems.append(f"x: at most {MAX_ROWS} rows (batch × tokens), got {x.shape[0]}")
    if x.device != q.device or scale.device != q.device:
        problems.append(f"x, q and scale must be on one device, got {x.device}, {q.device}, "
                        f"{scale.device}")
    if problems:
        raise GemvError("fp8_gemv: " + "; ".join(problems))


# (BLOCK_N, BLOCK_K, num_warps, num_stages, SPLIT_K) per device class, tried on the first call
# per (N, K, M bucket) on a device of that class. BLOCK_N <= 16 keeps the narrowest S2-Pro layer
# (N = 2560) at >= 160 programs: a full wave on 132 multiprocessors, two on a consumer card's
# <= 80. Each thread holds at most 32 codes of a K step (BLOCK_N × BLOCK_K / threads), reduced
# into a [BLOCK_N] accumulator every step: <= 128 registers and no spills on sm_80-sm_90
# (``bench/gemv_registers.py``), so several blocks share a multiprocessor and keep loads in
# flight; deeper pipelines (stages) rather than wider tiles carry the bytes.
#
# Split-K (SPLIT_K > 1): a full wave is still only ~2-5 blocks of 4-8 warps per multiprocessor
# for N = 2560, too few loads in flight; SPLIT_K programs then share one block of outputs, each
# reducing a slice of K (``split_range``) into an fp32 partial, and the last of them to arrive
# adds the partials in slice order, applies the scale and stores ``y`` (``_split_total``): one
# launch, no memset, no cast kernel, and the same bits on every run (the order does not depend on
# which program arrives last). The split configurations sit beside the unsplit ones and the
# autotuner keeps whichever it measures fastest; they are offered only where N <= SPLIT_MAX_N.
BIG_GPU_SMS = 100  # H100 (114-132 SMs), H200 (132), B200 (148): "datacenter"
CLASS_CONFIGS = {
    "datacenter": [(8, 512, 4, 4, 1), (4, 1024, 4, 4, 1), (8, 1024, 8, 4, 1),
                   (4, 2048, 8, 4, 1), (16, 512, 8, 4, 1), (4, 1024, 8, 4, 1),
                   (2, 2048, 4, 4, 1),
                   (8, 512, 4, 4, 2), (8, 512, 4, 4, 4), (16, 512, 8, 4, 4),
                   (4, 1024, 4, 4, 4)],
    "consumer": [(8, 512, 4, 3, 1), (4, 1024, 4, 3, 1), (16, 256, 4, 4, 1),
                 (2, 2048, 4, 3, 1), (8, 512, 4, 2, 1), (4, 512, 2, 4, 1),
                 (8, 512, 4, 3, 2), (16, 256, 4, 4, 2)],
}
SPLIT_MAX_N = 4096  # split configurations are tried for N up to this (S2-Pro: wo, w2: 2560)


def device_class(device: torch.device) -> str:
    """``"datacenter"`` (>= ``BIG_GPU_SMS`` multiprocessors) or ``"consumer"``."""
    device = torch.device(device)
    if device.type != "cuda":
        return "consumer"
    return ("datacenter" if torch.cuda.get_device_properties(device).multi_processor_count
            >= BIG_GPU_SMS else "consumer")


def rows_bucket(m: int) -> int:
    """The M bucket the autotuner keys its choice on (1, 2-4, 5-8 rows): a serving batch of 8
    rows reads each block of codes 8 times from L2 and may want other blocks than one row."""
    return 1 if m <= 1 else 4 if m <= 4 else 8


def grid_for(n: int, m: int, block_n: int, split_k: int = 1) -> tuple[int, int, int]:
    """Programs of a launch: ``ceil(N / BLOCK_N)`` blocks of outputs × ``M`` rows × ``SPLIT_K``
    slices of K."""
    return (-(-n // block_n), m, split_k)


def split_range(k: int, block_k: int, split_k: int) -> int:
    """Columns of K each of ``split_k`` programs reduces (whole ``block_k`` steps; the last
    slice may be shorter, or empty)."""
    steps = -(-k // block_k)
    return -(-steps // split_k) * block_k


def split_configs(configs, n: int):
    """``configs`` without the split ones where ``N`` is above ``SPLIT_MAX_N``."""
    return [c for c in configs if n <= SPLIT_MAX_N or c.kwargs["SPLIT_K"] == 1]


_COUNTERS: dict = {}  # device → int32 arrival counters, zero between launches
_RETIRED: list = []  # outgrown counters: a captured CUDA graph may still point at one


def counters(count: int, device: torch.device) -> Tensor:
    """At least ``count`` int32 arrival counters on ``device``, all zero: each split launch's
    last program puts back the zeros it found, so one buffer per device serves every launch that
    follows another (stream order; the engine's warm-up stream waits for, and is waited on by,
    the one it leaves; a graph replays in its caller's stream). The same buffer serves a CUDA
    graph's capture (no memset in the graph); one grown during capture is the graph's own."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    key = str(device)
    have = _COUNTERS.get(key)
    if have is not None and have.numel() >= count:
        return have
    fresh = torch.zeros(max(count, 1024), dtype=torch.int32, device=device)
    if cuda and torch.cuda.is_current_stream_capturing():
        return fresh
    if have is not None:
        _RETIRED.append(have)
    _COUNTERS[key] = fresh
    return fresh


def split_buffers(n: int, m: int, device: torch.device, split_k: int, block_n: int
                  ) -> tuple[Tensor, Tensor]:
    """(fp32 partials ``[split_k, M, N]``, arrival counters) for a launch of up to ``split_k``
    slices with blocks of at least ``block_n`` outputs (one element each when unsplit)."""
    if split_k == 1:
        return (torch.empty(1, dtype=torch.float32, device=device), counters(1, device))
    partials = torch.empty(split_k, m, n, dtype=torch.float32, device=device)
    return partials, counters(grid_for(n, m, block_n)[0] * m, device)


def tuned_split_buffers(configs, n: int, m: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """``split_buffers`` large enough for every configuration the autotuner may run."""
    known = _EXTENTS.get((id(configs), n))
    if known is None:  # once per kernel and layer shape, not per call
        known = _EXTENTS[id(configs), n] = (configs, split_extent(configs, n))
    return split_buffers(n, m, device, *known[1])


# (id of a kernel's config list, N) → (that list, kept so its id is never another's; extent)
_EXTENTS: dict = {}


def split_extent(configs, n: int) -> tuple[int, int]:
    """The largest ``SPLIT_K`` and smallest ``BLOCK_N`` among the split configurations of
    ``configs`` for ``n`` outputs ((1, 1) when none splits)."""
    split = [c for c in split_configs(configs, n) if c.kwargs["SPLIT_K"] > 1]
    if not split:
        return 1, 1
    return (max(c.kwargs["SPLIT_K"] for c in split), min(c.kwargs["BLOCK_N"] for c in split))


if triton is not None:
    CONFIGS = [triton.Config({"BLOCK_N": n, "BLOCK_K": k, "SPLIT_K": sk}, num_warps=w,
                             num_stages=st)
               for cls in CLASS_CONFIGS.values() for n, k, w, st, sk in cls]
    _CLASS_KEYS = {cls: set(rows) for cls, rows in CLASS_CONFIGS.items()}

    def config_key(c) -> tuple:
        """A ``triton.Config``'s ``(BLOCK_N, BLOCK_K, num_warps, num_stages, SPLIT_K)``."""
        return (c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_warps, c.num_stages,
                c.kwargs["SPLIT_K"])

    def _prune(configs, named_args, **kwargs):
        """Keep the configurations of the device class of ``x``'s device (split ones only for
        a small N)."""
        x = named_args.get("x_ptr")
        keys = _CLASS_KEYS[device_class(x.device) if isinstance(x, Tensor) else "consumer"]
        kept = split_configs([c for c in configs if config_key(c) in keys], named_args["N"])
        return kept or configs

    @triton.jit
    def _split_total(acc, part_ptr, count_ptr, outs, live, N,
                     SPLIT_K: tl.constexpr, BLOCK_N: tl.constexpr):
        """(the sum over the K slices of this block of outputs, where to store it): each
        program stores its partial; the one that arrives last (``SPLIT_K - 1`` before it) adds
        them all in slice order, so the bits do not depend on the order of arrival, and resets
        the counter for the next launch. The others store nothing."""
        if SPLIT_K == 1:
            total = acc
            keep = live
        else:
            row = tl.program_id(1)
            rows = tl.num_programs(1)
            tl.store(part_ptr + (tl.program_id(2) * rows + row) * N + outs, acc, mask=live)
            tl.debug_barrier()  # every thread's partial written before the arrival
            ticket = count_ptr + row * tl.num_programs(0) + tl.program_id(0)
            before = tl.atomic_add(ticket, 1, sem="acq_rel", scope="gpu")
            keep = live & ((tl.full((BLOCK_N,), 0, tl.int32) + before) == SPLIT_K - 1)
            total = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                total += tl.load(part_ptr + (s * rows + row) * N + outs, mask=keep, other=0.0,
                                 cache_modifier=".cg")  # from L2: written by other programs
            tl.store(ticket, 0, mask=before == SPLIT_K - 1)
        return total, keep

    @triton.jit
    def _gemv_kernel(x_ptr, q_ptr, scale_ptr, y_ptr, part_ptr, count_ptr, N, ROWS,
                     K: tl.constexpr, BITS: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
        # ROWS: the M bucket (``rows_bucket``), only a key of the autotuner's choice
        row = tl.program_id(1)  # which row of x
        outs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N] output features
        cols = tl.arange(0, BLOCK_K)  # [BLOCK_K]
        live = outs < N
        if SPLIT_K == 1:
            k_lo = 0
            k_hi = K
        else:  # this program's slice of K (``split_range``)
            PER: tl.constexpr = (K + BLOCK_K * SPLIT_K - 1) // (BLOCK_K * SPLIT_K) * BLOCK_K
            k_lo = tl.program_id(2) * PER
            k_hi = k_lo + PER
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)  # reduced every K step: few registers
        for k0 in range(k_lo, k_hi, BLOCK_K):
            ks = k0 + cols
            in_k = ks < K
            x = tl.load(x_ptr + row * K + ks, mask=in_k, other=0.0).to(tl.float32)  # [BLOCK_K]
            where = q_ptr + outs[:, None] * K + ks[None, :]  # [BLOCK_N, BLOCK_K] codes
            inside = live[:, None] & in_k[None, :]
            if BITS:  # uint8 codes: s eeee mmm → fp16 s 0eeee mmm0000000 = value * 2^-8
                b = tl.load(where, mask=inside, other=0).to(tl.uint16)
                half = ((b & 0x80) << 8) | ((b & 0x7F) << 7)
                w = half.to(tl.float16, bitcast=True).to(tl.float32)
            else:
                w = tl.load(where, mask=inside, other=0.0).to(tl.float32)
            acc += tl.sum(w * x[None, :], axis=1)
        total, keep = _split_total(acc, part_ptr, count_ptr, outs, live, N, SPLIT_K, BLOCK_N)
        scale = tl.load(scale_ptr + outs, mask=keep, other=0.0)  # [BLOCK_N]
        if BITS:
            scale = scale * 256.0  # the 2^-8 of the decode, exactly
        y = total * scale
        tl.store(y_ptr + row * N + outs, y.to(y_ptr.dtype.element_ty), mask=keep)

    _tuned_kernel = triton.autotune(configs=CONFIGS[:1] if INTERPRETED else CONFIGS,
                                    key=["N", "K", "BITS", "ROWS"],
                                    prune_configs_by={"early_config_prune": _prune})(_gemv_kernel)


def _launch(x: Tensor, q: Tensor, scale: Tensor, config: tuple | None = None) -> Tensor:
    """The kernel on ``x``, ``q``, ``scale``; ``config`` (``(BLOCK_N, BLOCK_K, warps, stages,
    SPLIT_K)``) instead of the tuned choice (tests run every one)."""
    check(x, q, scale)
    reason = unavailable(x.device)
    if reason:
        raise GemvError(f"fp8_gemv cannot run: {reason}")
    (m, k), n = x.shape, q.shape[0]
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    bits = decode_mode(x.device) == "bits"
    codes = q.view(torch.uint8) if bits else q
    if config is None:
        parts, count = tuned_split_buffers(_tuned_kernel.configs, n, m, x.device)
        _tuned_kernel[lambda meta: grid_for(n, m, meta["BLOCK_N"], meta["SPLIT_K"])](
            x, codes, scale, y, parts, count, n, rows_bucket(m), k, bits)
    else:
        block_n, block_k, warps, stages, split_k = config
        parts, count = split_buffers(n, m, x.device, split_k, block_n)
        _gemv_kernel[grid_for(n, m, block_n, split_k)](
            x, codes, scale, y, parts, count, n, rows_bucket(m), k, bits, BLOCK_N=block_n,
            BLOCK_K=block_k, SPLIT_K=split_k, num_warps=warps, num_stages=stages)
    return y


def launch_with(x: Tensor, q: Tensor, scale: Tensor, config: tuple) -> Tensor:
    """``fp8_gemv`` with a given ``(BLOCK_N, BLOCK_K, num_warps, num_stages, SPLIT_K)``
    (tests, tuning)."""
    return _launch(x, q, scale, config)


def _run(x: Tensor, q: Tensor, scale: Tensor) -> Tensor:
    return _launch(x, q, scale)


def _fake(x: Tensor, q: Tensor, scale: Tensor) -> Tensor:
    check(x, q, scale)
    return x.new_empty(x.shape[0], q.shape[0])


fp8_gemv = custom_op("fp8_gemv", _run, _fake)


def gemv_linear(x: Tensor, q: Tensor, scale: Tensor) -> Tensor:
    """``x [..., K]`` (at most ``MAX_ROWS`` rows) times ``q [N, K]`` e4m3 with ``scale [N, 1]``
    → ``[..., N]`` in ``x``'s dtype."""
    shape = x.shape
    y = fp8_gemv(x.reshape(-1, shape[-1]).contiguous(), q, scale)  # [M, N]
    return y.reshape(*shape[:-1], q.shape[0])
