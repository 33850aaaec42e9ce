"""The Snake activation, ``x + sin(alpha * x)^2 / (alpha + 1e-9)`` per channel, as one kernel.

Eager ATen runs it as four passes over the activations (product, sine, square, scale-and-add);
the codec's decoder has two Snakes a residual unit, so on a GPU they are most of its small
kernels. ``torch.ops.sailfish.snake`` is one op: a Triton kernel on CUDA (when Triton imports;
under ``TRITON_INTERPRET=1`` on the CPU too, for the tests), the eager formula elsewhere. The
kernel computes in fp32 (the product, the sine, the square, the scale and the sum) and rounds
once to the output dtype; eager rounds each step to the activations' dtype. So in fp32 the two
differ by the sine's last bits only; in fp16 the kernel is the more accurate of the two
(``tests/test_codec_snake.py`` states both tolerances).

``inverse`` is ``1 / (alpha + 1e-9)`` in the activations' dtype (``Snake.inverse_for`` computes it
once per weights and dtype, not per call). On the CPU ``Snake`` runs the eager formula directly
(bit for bit what it ran before this op), and through the op inside ``fused.everywhere`` (what
``bench/count_ops.py`` counts as CUDA runs it).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..engine import fused
from ..engine.fused import tl, triton, triton_runs


def snake(x: Tensor, alpha: Tensor, inverse: Tensor) -> Tensor:
    """The activation as one expression (what ``Codec.compile_activations`` compiles)."""
    return x + torch.sin(alpha * x).pow(2) * inverse


def snake_eager(x: Tensor, alpha: Tensor, inverse: Tensor) -> Tensor:
    """The same formula in place: two ``[B, C, L]`` buffers at most."""
    y = torch.sin(alpha * x)
    y.pow_(2).mul_(inverse)
    return y.add_(x)


if triton is not None:
    @triton.jit
    def _snake_kernel(x_ptr, a_ptr, inv_ptr, y_ptr, C, L, stride_b, stride_c, stride_l,
                      BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)  # b * C + c
        cols = (tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)  # x strided
        live = cols < L
        b, c = row // C, row % C
        x = tl.load(x_ptr + b * stride_b + c * stride_c + cols * stride_l, mask=live, other=0.0)
        a = tl.load(a_ptr + c).to(tl.float32)
        inverse = tl.load(inv_ptr + c).to(tl.float32)
        xf = x.to(tl.float32)
        s = tl.sin(a * xf)
        y = xf + s * s * inverse
        tl.store(y_ptr + row * L + cols, y.to(y_ptr.dtype.element_ty), mask=live)


MAX_GRID_Y = 65_535  # CUDA's limit on a grid's second dimension (blocks of 1,024 samples)


def _snake(x: Tensor, alpha: Tensor, inverse: Tensor) -> Tensor:
    if not (triton_runs(x) and x.ndim == 3):
        return snake_eager(x, alpha, inverse)
    B, C, L = x.shape
    block = min(1024, triton.next_power_of_2(max(L, 1)))
    if triton.cdiv(L, block) > MAX_GRID_Y:  # ~25 min of audio in one call: past CUDA's grid
        return snake_eager(x, alpha, inverse)
    y = torch.empty(B, C, L, dtype=torch.promote_types(x.dtype, alpha.dtype), device=x.device)
    if y.numel():
        _snake_kernel[(B * C, triton.cdiv(L, block))](
            x, alpha.reshape(C).contiguous(), inverse.reshape(C).contiguous(), y, C, L,
            *x.stride(), BLOCK=block)
    return y


def _snake_fake(x, alpha, inverse):
    return torch.empty(x.shape, dtype=torch.promote_types(x.dtype, alpha.dtype),
                       device=x.device)


def _register():
    """``torch.ops.sailfish.snake``, defined once per process (the pack may be imported under
    two package names; see ``engine.fused``)."""
    try:
        return torch.ops.sailfish.snake
    except (AttributeError, RuntimeError):
        op = torch.library.custom_op("sailfish::snake", _snake, mutates_args=())
        op.register_fake(_snake_fake)
        return torch.ops.sailfish.snake


snake_op = _register()


def fused_snake(x: Tensor, alpha: Tensor, inverse: Tensor) -> Tensor:
    """One kernel on CUDA (``fused.routed``); the eager formula on the CPU."""
    return snake_op(x, alpha, inverse) if fused.routed(x) else snake_eager(x, alpha, inverse)
