"""The transformer pieces the language model and the codec share: rotary position tables,
RMSNorm and the SwiGLU feed-forward (gpt-fast's building blocks)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


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


def apply_rope(x: Tensor, table: Tensor) -> Tensor:
    """Rotate interleaved pairs (x0, x1) of ``x [B, S, H, Dh]`` by
    ``table [B or 1, S, Dh/2, 2]``."""
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    cos, sin = table[..., 0].unsqueeze(2), table[..., 1].unsqueeze(2)  # [B, S, 1, Dh/2]
    x0, x1 = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1)
    return rotated.flatten(3).type_as(x)


class RMSNorm(nn.Module):
    """Normalise in fp32, cast back, then scale by the (model-dtype) weight."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))
