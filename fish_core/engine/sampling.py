"""The reference sampler (top-p, top-k, temperature, exponential race) and Repetition-Aware
Sampling.

All arithmetic runs in the logits' dtype (the model dtype), with ``temperature`` and ``top_p``
given as tensors of that dtype, exactly as fish-speech does: in bf16, 0.7 becomes 0.69921875.
Random numbers are passed in (``rand``, uniform in [0, 1)), so callers control the generator
and the order of draws, and the function compiles into a graph without host syncs.
"""

from __future__ import annotations

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
    return exponential_race(logits_to_probs(logits, temperature, top_p, top_k), rand)


def ras_select(normal: Tensor, high: Tensor, window: Tensor, semantic_lo: int,
               semantic_hi: int) -> Tensor:
    """Repetition-Aware Sampling: take the high-temperature draw where the normal draw is a
    semantic token already among the last ``RAS_WINDOW`` main tokens (``window [B, W]``)."""
    repeated = (window == normal.unsqueeze(-1)).any(dim=-1)
    semantic = (normal >= semantic_lo) & (normal <= semantic_hi)
    return torch.where(repeated & semantic, high, normal)
