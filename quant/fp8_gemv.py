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

Each program computes ``BLOCK_N`` outputs of one row of ``x`` (grid: ``N / BLOCK_N`` × ``M``);
for M > 1 the codes are read again from L2. Larger M (prefill) is compute-bound: there the layer
dequantizes and calls cuBLAS (``MAX_ROWS``). Triton's native e4m3 conversion needs compute
capability >= 8.9; ``unavailable`` says why the kernel cannot run on a device. The op is
registered with a fake (meta) implementation, so it traces under ``torch.compile(fullgraph=True)``
and FakeTensor, where ``check`` enforces the same constraints as a real call.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

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


def unavailable(device: torch.device) -> str | None:
    """Why the kernel cannot run on ``device`` (None: it can)."""
    device = torch.device(device)
    if triton is None:
        return "Triton is not installed"
    if device.type == "cpu":
        return None if INTERPRETED else "the Triton GEMV runs on CUDA (CPU only under TRITON_INTERPRET=1)"
    if device.type != "cuda":
        return f"the Triton GEMV runs on CUDA, not {device.type}"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        return f"e4m3 conversion in Triton needs compute capability >= 8.9, {device} has {major}.{minor}"
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
    if x.dim() != 2 or x.shape[-1] != k or x.dtype not in ACTIVATION_DTYPES or not x.is_contiguous():
        problems.append(f"x must be a contiguous [M, {k}] bf16/fp16/fp32 tensor, got {x.dtype} "
                        f"{list(x.shape)}")
    elif x.shape[0] > MAX_ROWS:
        problems.append(f"x: at most {MAX_ROWS} rows (batch × tokens), got {x.shape[0]}")
    if x.device != q.device or scale.device != q.device:
        problems.append(f"x, q and scale must be on one device, got {x.device}, {q.device}, "
                        f"{scale.device}")
    if problems:
        raise GemvError("fp8_gemv: " + "; ".join(problems))


if triton is not None:
    # Configurations tried once per (N, K) on the first call; the interpreter takes the first.
    CONFIGS = [triton.Config({"BLOCK_N": n, "BLOCK_K": k}, num_warps=4, num_stages=s)
               for n, k, s in [(8, 512, 3), (16, 256, 4), (16, 512, 3), (32, 256, 3),
                               (4, 1024, 3), (32, 128, 4)]]

    @triton.autotune(configs=CONFIGS[:1] if INTERPRETED else CONFIGS, key=["N", "K"])
    @triton.jit
    def _gemv_kernel(x_ptr, q_ptr, scale_ptr, y_ptr, N, K: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        row = tl.program_id(1)  # which row of x
        outs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N] output features
        cols = tl.arange(0, BLOCK_K)  # [BLOCK_K]
        live = outs < N
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + cols
            in_k = ks < K
            x = tl.load(x_ptr + row * K + ks, mask=in_k, other=0.0).to(tl.float32)  # [BLOCK_K]
            codes = tl.load(q_ptr + outs[:, None] * K + ks[None, :],
                            mask=live[:, None] & in_k[None, :], other=0.0)  # [BLOCK_N, BLOCK_K]
            acc += codes.to(tl.float32) * x[None, :]
        scale = tl.load(scale_ptr + outs, mask=live, other=0.0)  # [BLOCK_N]
        y = tl.sum(acc, axis=1) * scale
        tl.store(y_ptr + row * N + outs, y.to(y_ptr.dtype.element_ty), mask=live)


def _launch(x: Tensor, q: Tensor, scale: Tensor) -> Tensor:
    check(x, q, scale)
    reason = unavailable(x.device)
    if reason:
        raise GemvError(f"fp8_gemv cannot run: {reason}")
    (m, k), n = x.shape, q.shape[0]
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_N"]), m)

    _gemv_kernel[grid](x, q, scale, y, n, k)
    return y


def _fake(x: Tensor, q: Tensor, scale: Tensor) -> Tensor:
    check(x, q, scale)
    return x.new_empty(x.shape[0], q.shape[0])


def _register():
    """``torch.ops.sailfish.fp8_gemv``, registered once per process (the pack may be imported
    under two package names: ComfyUI's and the tests')."""
    try:
        return torch.ops.sailfish.fp8_gemv
    except (AttributeError, RuntimeError):
        pass
    op = torch.library.custom_op("sailfish::fp8_gemv", _launch, mutates_args=())
    op.register_fake(_fake)
    return torch.ops.sailfish.fp8_gemv


fp8_gemv = _register()


def gemv_linear(x: Tensor, q: Tensor, scale: Tensor) -> Tensor:
    """``x [..., K]`` (at most ``MAX_ROWS`` rows) times ``q [N, K]`` e4m3 with ``scale [N, 1]``
    → ``[..., N]`` in ``x``'s dtype."""
    shape = x.shape
    y = fp8_gemv(x.reshape(-1, shape[-1]).contiguous(), q, scale)  # [M, N]
    return y.reshape(*shape[:-1], q.shape[0])
