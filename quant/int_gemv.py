"""Weight-only int8 and int4 GEMVs for CUDA in Triton, in the FP8 GEMV's design (``fp8_gemv.py``).

At batch 1 a decode step reads every weight once; these kernels read the codes once (1 byte a
weight for int8, half a byte plus a (scale, zero) pair per 128 for int4), convert them in
registers and accumulate in fp32. torchao's int8 weight-only casts the whole weight to bf16 on
every call outside a compile that decomposes the M = 1 matmul (its Inductor options), which
moves ~5 bytes a weight; this does not depend on a compile:

    y = torch.ops.sailfish.int8_triton_gemv(x, codes, scale)   # x [M, K], codes [N, K] int8,
                                                  # scale [N] → y [M, N] in x's dtype
    y = torch.ops.sailfish.int4_triton_gemv(x, packed, params)  # packed [N, K / 2] uint8
                          # (``pack``), params [K / (2 GROUP), N, 2, 2] (``order_params``)

Numerics: int8 ``y = (x · codes) · scale``; int4 ``w = (q - 8) · scale + zero`` per group of
``GROUP`` columns (``int_linear.quantize_int4``'s codes and parameters), products and sums in
fp32, one rounding to ``x``'s dtype: the fp32 matmul on the dequantized weights within fp32
rounding. int4 computes each group as ``scale · Σ (q - c) x`` with ``c = 8 - zero / scale``
(the zero folded into the codes' offset, one division per group and block of outputs), so no
program sums the activation over a group: the group sums are not computed once per call, they
are not needed at all (no extra launch; per weight the one subtract ``q - 8`` was). The
scales must be nonzero (``quantize_int4``'s are, in every dtype). Up to ``MAX_ROWS`` rows of
``x`` (decode); the layers multiply more rows (prefill) by the dequantized weight
(compute-bound: cuBLAS).

int4 layout (``pack``): byte ``j`` of row ``n`` holds column ``j`` in its low nibble and column
``j + K / 2`` in its high nibble, so both halves of ``x`` are read as contiguous vectors. The
CPU kernel's layout (``int_linear.pack_int4``) is another, blocked one.

Block shapes per device class: int8 as the FP8 GEMV (``fp8_gemv.CLASS_CONFIGS``), int4 its own
(``INT4_CLASS_CONFIGS``: half the bytes per block, two codes unpacked per byte). The ops have
fake implementations (FakeTensor, ``torch.compile``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import fp8_gemv
from .ops import custom_op

try:
    import triton
    import triton.language as tl
except ImportError:  # the ops still trace (fake implementations)
    triton = tl = None

MAX_ROWS = fp8_gemv.MAX_ROWS
GROUP = 128  # int4 columns per (scale, zero) pair: int_linear.GROUP
K_MULTIPLE = 2 * GROUP  # int4: K a multiple of this (both halves whole groups)
ACTIVATION_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
INTERPRETED = fp8_gemv.INTERPRETED
GemvError = fp8_gemv.GemvError


def unavailable(device: torch.device) -> str | None:
    """Why the kernels cannot run on ``device`` (None: they can)."""
    device = torch.device(device)
    if triton is None:
        return "Triton is not installed"
    if device.type == "cpu":
        return (None if INTERPRETED else
                "the Triton GEMV runs on CUDA (CPU only under TRITON_INTERPRET=1)")
    if device.type != "cuda":
        return f"the Triton GEMV runs on CUDA, not {device.type}"
    cap = torch.cuda.get_device_capability(device)
    if cap < fp8_gemv.BITS_CAPABILITY:
        return f"the GEMV needs compute capability >= 8.0, {device} has {cap[0]}.{cap[1]}"
    return None


def pack(codes: Tensor) -> Tensor:
    """int4 ``codes [N, K]`` in 0..15 → ``[N, K / 2]`` uint8: low nibble column ``j``, high
    nibble column ``j + K / 2``."""
    half = codes.shape[1] // 2
    c = codes.to(torch.uint8)
    return (c[:, :half] | (c[:, half:] << 4)).contiguous()


def unpack(packed: Tensor) -> Tensor:
    """``pack``'s inverse: ``[N, K / 2]`` uint8 → codes ``[N, K]`` int32."""
    return torch.cat([packed & 15, packed >> 4], dim=1).to(torch.int32)


def order_params(params: Tensor) -> Tensor:
    """``quantize_int4``'s ``[K / GROUP, N, 2]`` (scale, zero) → the order the kernel reads them,
    ``[K / (2 GROUP), N, 2, 2]``: group ``g``'s pair (low nibbles, column ``j``) next to group
    ``g + K / (2 GROUP)``'s (high nibbles, ``j + K / 2``), which the same K step reads. A block
    of ``BLOCK_N`` rows then reads, per step, ``GROUPS`` runs of ``8 · BLOCK_N`` bytes (bf16)
    rather than ``2 · GROUPS`` runs of ``4 · BLOCK_N`` bytes ``N · 4`` bytes apart. Rows stay the
    second dimension (joined rows concatenate there)."""
    groups, n, _ = params.shape
    return torch.cat(params.view(2, groups // 2, n, 1, 2).unbind(0), dim=2)


def unorder_params(ordered: Tensor) -> Tensor:
    """``order_params``'s inverse: ``[K / (2 GROUP), N, 2, 2]`` → ``[K / GROUP, N, 2]``."""
    return torch.cat(ordered.unbind(2))


def _x_problems(x: Tensor, k: int, device) -> list[str]:
    problems = []
    if (x.dim() != 2 or x.shape[-1] != k or x.dtype not in ACTIVATION_DTYPES
            or not x.is_contiguous()):
        problems.append(f"x must be a contiguous [M, {k}] bf16/fp16/fp32 tensor, got {x.dtype} "
                        f"{list(x.shape)}")
    elif x.shape[0] > MAX_ROWS:
        problems.append(f"x: at most {MAX_ROWS} rows (batch × tokens), got {x.shape[0]}")
    if x.device != device:
        problems.append(f"x must be on the weights' device {device}, got {x.device}")
    return problems


def check_int8(x: Tensor, codes: Tensor, scale: Tensor) -> None:
    """Raise ``GemvError`` naming every argument ``int8_gemv`` cannot take."""
    problems = []
    if codes.dim() != 2 or codes.dtype != torch.int8 or not codes.is_contiguous():
        problems.append(f"codes must be a contiguous [N, K] int8 tensor, got {codes.dtype} "
                        f"{list(codes.shape)}")
    n, k = codes.shape if codes.dim() == 2 else (-1, -1)
    if scale.shape != (n,) or scale.dtype not in ACTIVATION_DTYPES or scale.device != codes.device:
        problems.append(f"scale must be a [{n}] float tensor on {codes.device}, got {scale.dtype} "
                        f"{list(scale.shape)}")
    problems += _x_problems(x, k, codes.device)
    if problems:
        raise GemvError("int8_gemv: " + "; ".join(problems))


def check_int4(x: Tensor, packed: Tensor, params: Tensor) -> None:
    """Raise ``GemvError`` naming every argument ``int4_gemv`` cannot take."""
    problems = []
    if packed.dim() != 2 or packed.dtype != torch.uint8 or not packed.is_contiguous():
        problems.append(f"packed must be a contiguous [N, K / 2] uint8 tensor, got {packed.dtype} "
                        f"{list(packed.shape)}")
    n, k = (packed.shape[0], 2 * packed.shape[1]) if packed.dim() == 2 else (-1, -1)
    if k % K_MULTIPLE:
        problems.append(f"packed: K = 2 × columns must be a multiple of {K_MULTIPLE}, got {k}")
    want = (k // (2 * GROUP), n, 2, 2)  # order_params's
    if (tuple(params.shape) != want or params.dtype not in ACTIVATION_DTYPES
            or not params.is_contiguous() or params.device != packed.device):
        problems.append(f"params must be a contiguous {list(want)} float tensor on "
                        f"{packed.device}, got {params.dtype} {list(params.shape)}")
    problems += _x_problems(x, k, packed.device)
    if problems:
        raise GemvError("int4_gemv: " + "; ".join(problems))


# int4's (BLOCK_N, BLOCK_K columns, warps, stages, SPLIT_K) per device class: a byte holds two
# codes, each unpacked into fp32 with its group's scale and zero, so a thread holds at most 16
# bytes of a K step (<= 128 registers, no spills on sm_80-sm_90: ``bench/gemv_registers.py``).
# SPLIT_K > 1: K in slices combined by the last program to arrive, as the FP8 GEMV
# (``fp8_gemv.CLASS_CONFIGS``), tried for N <= ``fp8_gemv.SPLIT_MAX_N``.
INT4_CLASS_CONFIGS = {
    "datacenter": [(4, 1024, 8, 4, 1), (2, 2048, 8, 4, 1), (8, 512, 8, 4, 1), (4, 512, 4, 4, 1),
                   (2, 1024, 4, 4, 1), (2, 2048, 4, 4, 1),
                   (4, 512, 4, 4, 2), (4, 512, 4, 4, 4), (4, 1024, 8, 4, 4),
                   (2, 1024, 4, 4, 4)],
    "consumer": [(4, 512, 2, 4, 1), (4, 1024, 8, 3, 1), (2, 1024, 4, 3, 1), (4, 512, 4, 3, 1),
                 (2, 2048, 4, 3, 1),
                 (4, 512, 4, 3, 2), (4, 512, 2, 4, 2)],
}


def class_configs(kernel: str) -> dict[str, list[tuple[int, int, int, int, int]]]:
    """The configurations the autotuner may pick for ``kernel`` (``"int8"``: the FP8 GEMV's,
    ``"int4"``), per device class."""
    return INT4_CLASS_CONFIGS if kernel == "int4" else fp8_gemv.CLASS_CONFIGS


if triton is not None:
    def _configs(kernel: str):
        halve_k = kernel == "int4"
        return [triton.Config({"BLOCK_N": n, "BLOCK_K": k // 2 if halve_k else k, "SPLIT_K": sk},
                              num_warps=w, num_stages=st)
                for rows in class_configs(kernel).values() for n, k, w, st, sk in rows]

    def _pruner(kernel: str):
        def prune(configs, named_args, **kwargs):
            x = named_args.get("x_ptr")
            cls = fp8_gemv.device_class(x.device) if isinstance(x, Tensor) else "consumer"
            halve = 2 if kernel == "int4" else 1
            keys = {(n, k // halve, w, st, sk) for n, k, w, st, sk in class_configs(kernel)[cls]}
            kept = fp8_gemv.split_configs(
                [c for c in configs if fp8_gemv.config_key(c) in keys], named_args["N"])
            return kept or configs
        return prune

    @triton.jit
    def _int8_kernel(x_ptr, q_ptr, s_ptr, y_ptr, part_ptr, count_ptr, N, ROWS, K: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
        # ROWS: the M bucket (``fp8_gemv.rows_bucket``), only a key of the autotuner's choice
        row = tl.program_id(1)
        outs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        cols = tl.arange(0, BLOCK_K)
        live = outs < N
        if SPLIT_K == 1:
            k_lo = 0
            k_hi = K
        else:  # this program's slice of K (``fp8_gemv.split_range``)
            PER: tl.constexpr = (K + BLOCK_K * SPLIT_K - 1) // (BLOCK_K * SPLIT_K) * BLOCK_K
            k_lo = tl.program_id(2) * PER
            k_hi = k_lo + PER
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)  # reduced every K step: few registers
        for k0 in range(k_lo, k_hi, BLOCK_K):
            ks = k0 + cols
            in_k = ks < K
            x = tl.load(x_ptr + row * K + ks, mask=in_k, other=0.0).to(tl.float32)
            q = tl.load(q_ptr + outs[:, None] * K + ks[None, :],
                        mask=live[:, None] & in_k[None, :], other=0)
            acc += tl.sum(q.to(tl.float32) * x[None, :], axis=1)
        total, keep = fp8_gemv._split_total(acc, part_ptr, count_ptr, outs, live, N, SPLIT_K,
                                            BLOCK_N)
        scale = tl.load(s_ptr + outs, mask=keep, other=0.0).to(tl.float32)
        y = total * scale
        tl.store(y_ptr + row * N + outs, y.to(y_ptr.dtype.element_ty), mask=keep)

    @triton.jit
    def _int4_kernel(x_ptr, p_ptr, sz_ptr, y_ptr, part_ptr, count_ptr, N, ROWS, K: tl.constexpr,
                     GROUP_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     SPLIT_K: tl.constexpr):
        # BLOCK_K bytes of each row (a multiple of GROUP_SIZE): columns j (low nibble) and
        # j + K / 2 (high nibble). Per group: scale · Σ (q - c) x, c = 8 - zero / scale.
        GROUPS: tl.constexpr = BLOCK_K // GROUP_SIZE  # groups per block, in each half
        row = tl.program_id(1)
        outs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        cols = tl.arange(0, BLOCK_K)
        live = outs < N
        if SPLIT_K == 1:
            j_lo = 0
            j_hi = K // 2
        else:  # this program's slice of the K / 2 bytes
            PER: tl.constexpr = (K // 2 + BLOCK_K * SPLIT_K - 1) // (BLOCK_K * SPLIT_K) * BLOCK_K
            j_lo = tl.program_id(2) * PER
            j_hi = j_lo + PER
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)  # reduced every K step: few registers
        for j0 in range(j_lo, j_hi, BLOCK_K):
            js = j0 + cols
            in_k = js < K // 2
            x_lo = tl.load(x_ptr + row * K + js, mask=in_k, other=0.0).to(tl.float32)
            x_hi = tl.load(x_ptr + row * K + K // 2 + js, mask=in_k, other=0.0).to(tl.float32)
            b = tl.load(p_ptr + outs[:, None] * (K // 2) + js[None, :],
                        mask=live[:, None] & in_k[None, :], other=0)
            # (scale, zero) of each group and of its high-nibble partner, side by side:
            # params [K / (2 GROUP), N, 2, 2] (``order_params``)
            g_lo = j0 // GROUP_SIZE + tl.arange(0, GROUPS)
            ok = live[:, None] & (g_lo < (K // 2) // GROUP_SIZE)[None, :]
            at = g_lo[None, :] * (4 * N) + outs[:, None] * 4  # [BLOCK_N, GROUPS]
            s_lo = tl.load(sz_ptr + at, mask=ok, other=1.0).to(tl.float32)
            z_lo = tl.load(sz_ptr + at + 1, mask=ok, other=0.0).to(tl.float32)
            s_hi = tl.load(sz_ptr + at + 2, mask=ok, other=1.0).to(tl.float32)
            z_hi = tl.load(sz_ptr + at + 3, mask=ok, other=0.0).to(tl.float32)
            # the zero folded into the codes' offset: (q - 8) s + z = s (q - c), c = 8 - z / s,
            # so no group sum of x is needed (the module docstring)
            c_lo = 8.0 - tl.fdiv(z_lo, s_lo)  # div.full: 2 ulp, a few instructions
            c_hi = 8.0 - tl.fdiv(z_hi, s_hi)
            q_lo = (tl.reshape((b & 15).to(tl.float32), (BLOCK_N, GROUPS, GROUP_SIZE))
                    - c_lo[:, :, None])
            q_hi = (tl.reshape((b >> 4).to(tl.float32), (BLOCK_N, GROUPS, GROUP_SIZE))
                    - c_hi[:, :, None])
            x3_lo = tl.reshape(x_lo, (GROUPS, GROUP_SIZE))
            x3_hi = tl.reshape(x_hi, (GROUPS, GROUP_SIZE))
            dot_lo = tl.sum(q_lo * x3_lo[None, :, :], axis=2)  # [BLOCK_N, GROUPS]
            dot_hi = tl.sum(q_hi * x3_hi[None, :, :], axis=2)
            acc += tl.sum(s_lo * dot_lo + s_hi * dot_hi, axis=1)
        total, keep = fp8_gemv._split_total(acc, part_ptr, count_ptr, outs, live, N, SPLIT_K,
                                            BLOCK_N)
        tl.store(y_ptr + row * N + outs, total.to(y_ptr.dtype.element_ty), mask=keep)

    _int8_tuned = triton.autotune(
        configs=_configs("int8")[:1] if INTERPRETED else _configs("int8"), key=["N", "K", "ROWS"],
        prune_configs_by={"early_config_prune": _pruner("int8")})(_int8_kernel)
    _int4_tuned = triton.autotune(
        configs=_configs("int4")[:1] if INTERPRETED else _configs("int4"), key=["N", "K", "ROWS"],
        prune_configs_by={"early_config_prune": _pruner("int4")})(_int4_kernel)


def tuned_choices() -> dict[str, list[dict]]:
    """What the autotuner has chosen so far in this process, per kernel (``"fp8"``, ``"int8"``,
    ``"int4"``): each key it tuned (N, K, [BITS,] M bucket, dtypes) with the winning
    ``[BLOCK_N, BLOCK_K, warps, stages, SPLIT_K]`` (int4's BLOCK_K in columns), so that a GPU
    run can say where split-K won."""
    if triton is None:
        return {}
    out = {}
    for name, tuned in (("fp8", fp8_gemv._tuned_kernel), ("int8", _int8_tuned),
                        ("int4", _int4_tuned)):
        rows = []
        for key, config in tuned.cache.items():
            bn, bk, warps, stages, split = fp8_gemv.config_key(config)
            rows.append({"key": [k if isinstance(k, (bool, int)) else str(k) for k in key],
                         "config": [bn, 2 * bk if name == "int4" else bk, warps, stages, split]})
        out[name] = rows
    return out


def _ready(x: Tensor) -> None:
    reason = unavailable(x.device)
    if reason:
        raise GemvError(f"int GEMV cannot run: {reason}")


def int8_launch(x: Tensor, codes: Tensor, scale: Tensor, config: tuple | None = None) -> Tensor:
    """The int8 kernel; ``config`` = ``(BLOCK_N, BLOCK_K, warps, stages, SPLIT_K)`` instead of
    the tuned choice (tests run every one)."""
    check_int8(x, codes, scale)
    _ready(x)
    (m, k), n = x.shape, codes.shape[0]
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    bucket = fp8_gemv.rows_bucket(m)
    if config is None:
        parts, count = fp8_gemv.tuned_split_buffers(_int8_tuned.configs, n, m, x.device)
        _int8_tuned[lambda meta: fp8_gemv.grid_for(n, m, meta["BLOCK_N"], meta["SPLIT_K"])](
            x, codes, scale, y, parts, count, n, bucket, k)
    else:
        bn, bk, w, st, sk = config
        parts, count = fp8_gemv.split_buffers(n, m, x.device, sk, bn)
        _int8_kernel[fp8_gemv.grid_for(n, m, bn, sk)](
            x, codes, scale, y, parts, count, n, bucket, k, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=sk,
            num_warps=w, num_stages=st)
    return y


def int4_launch(x: Tensor, packed: Tensor, params: Tensor, config: tuple | None = None) -> Tensor:
    """The int4 kernel; ``config`` as ``int8_launch`` (its BLOCK_K counts columns: bytes × 2)."""
    check_int4(x, packed, params)
    _ready(x)
    (m, k), n = x.shape, packed.shape[0]
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    bucket = fp8_gemv.rows_bucket(m)
    if config is None:
        parts, count = fp8_gemv.tuned_split_buffers(_int4_tuned.configs, n, m, x.device)
        _int4_tuned[lambda meta: fp8_gemv.grid_for(n, m, meta["BLOCK_N"], meta["SPLIT_K"])](
            x, packed, params, y, parts, count, n, bucket, k, GROUP)
    else:
        bn, bk, w, st, sk = config
        parts, count = fp8_gemv.split_buffers(n, m, x.device, sk, bn)
        _int4_kernel[fp8_gemv.grid_for(n, m, bn, sk)](
            x, packed, params, y, parts, count, n, bucket, k, GROUP, BLOCK_N=bn,
            BLOCK_K=bk // 2, SPLIT_K=sk, num_warps=w, num_stages=st)
    return y


def _int8_run(x: Tensor, codes: Tensor, scale: Tensor) -> Tensor:
    return int8_launch(x, codes, scale)


def _int4_run(x: Tensor, packed: Tensor, params: Tensor) -> Tensor:
    return int4_launch(x, packed, params)


def _int8_fake(x: Tensor, codes: Tensor, scale: Tensor) -> Tensor:
    check_int8(x, codes, scale)
    return x.new_empty(x.shape[0], codes.shape[0])


def _int4_fake(x: Tensor, packed: Tensor, params: Tensor) -> Tensor:
    check_int4(x, packed, params)
    return x.new_empty(x.shape[0], packed.shape[0])


int8_gemv = custom_op("int8_triton_gemv", _int8_run, _int8_fake)  # (int8_gemv: cpu_gemv's)
int4_gemv = custom_op("int4_triton_gemv", _int4_run, _int4_fake)
