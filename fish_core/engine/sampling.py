"""The reference sampler (top-p, top-k, temperature, exponential race) and Repetition-Aware
Sampling.

All arithmetic runs in the logits' dtype (the model dtype), with ``temperature`` and ``top_p``
given as tensors of that dtype, exactly as fish-speech does: in bf16, 0.7 becomes 0.69921875.
Random numbers are passed in (``rand``, uniform in [0, 1)), so callers control the generator
and the order of draws, and the function compiles into a graph without host syncs.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

RAS_WINDOW = 10  # main tokens remembered by Repetition-Aware Sampling
RAS_HIGH_TEMPERATURE = 1.0
RAS_HIGH_TOP_P = 0.9


def logits_to_probs(logits: Tensor, temperature: Tensor, top_p: Tensor, top_k) -> Tensor:
    """Probabilities over the last dim of ``logits [..., N]``.

    top-p is decided on the *untempered* probabilities; the most likely token always survives.
    ``temperature`` and ``top_p`` broadcast against ``logits[..., :1]``; ``top_k`` is an int or a
    tensor broadcasting the same way.
    """
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    cum_probs = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
    rank = torch.arange(logits.shape[-1], device=logits.device)
    remove_sorted = ((cum_probs > top_p) | (rank >= top_k)) & (rank != 0)
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    logits = torch.where(remove, float("-inf"), logits) / torch.clamp(temperature, min=1e-5)
    return torch.softmax(logits, dim=-1)


def exponential_race(probs: Tensor, rand: Tensor) -> Tensor:
    """Draw one index per row: argmax(p / Exp(1)), i.e. multinomial sampling without a sync."""
    return torch.argmax(probs / -torch.log(rand), dim=-1)


def sample(logits: Tensor, temperature: Tensor, top_p: Tensor, top_k, rand: Tensor) -> Tensor:
    """The reference's draw (``exponential_race(logits_to_probs(...), rand)``), through
    ``prepare`` and ``draw``: the same index, in fewer kernels."""
    return draw(logits, prepare(temperature, top_p, top_k, logits.shape[-1]), torch.log(rand))


class Settings(NamedTuple):
    """A row's sampling settings made ready once for every draw of one width in a frame (the
    9 fast codebooks share one): ``temperature`` clamped as the reference clamps it, ``cut``,
    the ranks past ``top_k`` ``[B, N]`` (never rank 0), and ``top_p`` per rank ``[B, N]``:
    +inf at rank 0 (the most likely token always survives), -inf where ``cut`` (removed
    whatever the cumulative probability, which is never -inf), else ``top_p``."""

    temperature: Tensor
    top_p: Tensor
    cut: Tensor


def prepare(temperature: Tensor, top_p: Tensor, top_k, width: int,
            cut: Tensor | None = None) -> Settings:
    rank = torch.arange(width, device=temperature.device)
    if cut is None:
        cut = (rank >= top_k) & (rank != 0)
    top_p = torch.where(cut, float("-inf"), torch.where(rank == 0, float("inf"), top_p))
    return Settings(torch.clamp(temperature, min=1e-5), top_p, cut)


def draw(logits: Tensor, settings: Settings, log_rand: Tensor) -> Tensor:
    """``sample`` with ``prepare``d settings and ``log_rand = log(rand)``: the same arithmetic
    in the same dtype, so the same index, bit for bit.

    ``(cum > top_p | rank >= top_k) & rank != 0`` is ``cum > top_p'`` (``Settings.top_p``);
    ``where(remove, -inf, x)`` is ``masked_fill``; and ``argmax(p / -log r)`` is
    ``argmin(p / log r)`` (IEEE division is exact under a sign change, and both take the first
    index of their extreme)."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    cum_probs = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
    remove_sorted = cum_probs > settings.top_p
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    probs = torch.softmax(logits.masked_fill(remove, float("-inf")) / settings.temperature,
                          dim=-1)
    return torch.argmin(probs / log_rand, dim=-1)


def ras_select(normal: Tensor, high: Tensor, window: Tensor, semantic_lo: int,
               semantic_hi: int) -> Tensor:
    """Repetition-Aware Sampling: take the high-temperature draw where the normal draw is a
    semantic token already among the last ``RAS_WINDOW`` main tokens (``window [B, W]``)."""
    repeated = (window == normal.unsqueeze(-1)).any(dim=-1)
    semantic = (normal >= semantic_lo) & (normal <= semantic_hi)
    return torch.where(repeated & semantic, high, normal)
