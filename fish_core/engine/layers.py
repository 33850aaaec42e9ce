"""The transformer pieces the language model and the codec share: rotary position tables,
RMSNorm and the SwiGLU feed-forward (gpt-fast's building blocks)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from . import fused


def rope_table(length: int, head_dim: int, base: float, device=None, start: int = 0) -> Tensor:
    """``[length, head_dim // 2, 2]`` (cos, sin) table for positions ``start …``, computed in
    fp32 and rounded to bf16 (each row on its own: a slice of a longer table is the same).

    The bf16 rounding is what the model was trained with; an exact fp32 table garbles audio.
    """
    freqs = 1.0 / base ** (torch.arange(0, head_dim, 2, device=device)[: head_dim // 2].float()
                           / head_dim)
    angles = torch.outer(torch.arange(start, start + length, device=device).float(), freqs)
    unit = torch.polar(torch.ones_like(angles), angles)
    table = torch.stack([unit.real, unit.imag], dim=-1)
    return table.to(torch.bfloat16).float()


def rope_rotations(length: int, head_dim: int, base: float, device=None,
                   start: int = 0) -> Tensor:
    """``[length, head_dim // 2, 2, 2]`` rotation of each interleaved pair at positions
    ``start …``: ``[[cos, sin], [-sin, cos]]`` of the bf16-rounded ``rope_table`` (fp32), so that
    ``apply_rope`` is one product and one sum of two: ``x0*cos - x1*sin`` and
    ``x0*sin + x1*cos``, each product and sum rounded in fp32 exactly as the reference's."""
    return rotations(rope_table(length, head_dim, base, device, start))


def rotations(table: Tensor) -> Tensor:
    """``rope_table``'s ``[..., Dh/2, 2]`` (cos, sin) as ``[..., Dh/2, 2, 2]`` rotations."""
    cos, sin = table[..., 0], table[..., 1]
    return torch.stack([torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], -2)


def apply_rope(x: Tensor, rotation: Tensor) -> Tensor:
    """Rotate interleaved pairs (x0, x1) of ``x [B, S, H, Dh]`` by ``rotation [B or 1, S, Dh/2,
    2, 2]`` (``rope_rotations``) in fp32, cast back to ``x``'s dtype (``fused.qk_rope``).

    Exactly the reference's ``stack([x0*cos - x1*sin, x1*cos + x0*sin])`` in fp32: each output
    is one fp32 sum of the same two fp32-rounded products (negation and the order of a sum of
    two are exact)."""
    return fused.qk_rope(x, None, None, rotation, x.shape[2], 0.0)


class RMSNorm(nn.Module):
    """Normalise in fp32, cast back, then scale by the (model-dtype) weight.

    ``F.rms_norm`` of the fp32 input is bit-equal to ``x * rsqrt(mean(x²) + eps)`` (one fused
    kernel instead of five); the weight is applied after the cast, as the reference does (a
    fused bf16 ``rms_norm`` with the weight rounds once, not twice: not the reference)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return fused.rms_norm(x, self.weight, self.eps)


class FeedForward(nn.Module):
    """SwiGLU: ``w2(silu(w1 x) · w3 x)``. ``join`` puts ``w1`` and ``w3`` in one layer, ``w13``
    (their rows stacked: one GEMV, one launch), as the loader does on CUDA."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w13 = None

    def join(self, w13: nn.Module) -> None:
        """Use ``w13`` (``w1``'s rows then ``w3``'s) for both; ``w1`` and ``w3`` are dropped."""
        del self.w1, self.w3
        self.w13 = w13

    def forward(self, x: Tensor) -> Tensor:
        if self.w13 is None:
            return self.w2(fused.silu_mul(self.w1(x), self.w3(x)))
        y = self.w13(x)
        half = y.shape[-1] // 2
        return self.w2(fused.silu_mul(y[..., :half], y[..., half:]))
