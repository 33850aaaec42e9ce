"""The codec's channels-first causal transformer, attention limited to the last ``window``
positions; each attention layer carries its last ``window - 1`` keys/values between chunks and
each transformer its position counter."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import TransformerConfig
from .layers import State, Stateful
from ..engine.layers import FeedForward, RMSNorm, apply_rope, rope_rotations


def window_mask(n_query: int, n_key: int, window: int, device) -> Tensor:
    """Bool [1, 1, n_query, n_key]: the queries are the last n_query keys; each sees itself and
    the window-1 keys before it."""
    q = torch.arange(n_key - n_query, n_key, device=device)[:, None]
    k = torch.arange(n_key, device=device)[None, :]
    return ((k <= q) & (k > q - window))[None, None]


class LayerScale(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma


class Attention(nn.Module):
    """Multi-head causal attention limited to the last ``window`` positions."""

    def __init__(self, dim: int, config: TransformerConfig):
        super().__init__()
        self.n_head, self.head_dim, self.window = config.n_head, config.head_dim, config.window
        self.wqkv = nn.Linear(dim, 3 * config.n_head * config.head_dim, bias=False)
        self.wo = nn.Linear(config.n_head * config.head_dim, dim, bias=False)

    def forward(self, x: Tensor, rope: Tensor, state: State) -> Tensor:  # [B, T, D]
        bsz, length, _ = x.shape
        qkv = self.wqkv(x).view(bsz, length, 3 * self.n_head, self.head_dim)
        qk = apply_rope(qkv[:, :, :2 * self.n_head], rope)  # q and k rotated together
        q, k, v = qk[:, :, :self.n_head], qk[:, :, self.n_head:], qkv[:, :, 2 * self.n_head:]
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, Dh]
        past = state.get(self)
        if past is not None:  # keys/values of the previous window-1 positions
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        if self.window > 1:
            state[self] = (k[:, :, 1 - self.window:].clone(), v[:, :, 1 - self.window:].clone())
        mask = window_mask(length, k.shape[2], self.window, x.device)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(y.transpose(1, 2).reshape(bsz, length, -1))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int, config: TransformerConfig):
        super().__init__()
        self.attention = Attention(dim, config)
        self.feed_forward = FeedForward(dim, config.intermediate_size)
        self.attention_norm = RMSNorm(dim, config.norm_eps)
        self.ffn_norm = RMSNorm(dim, config.norm_eps)
        self.attention_layer_scale = LayerScale(dim)
        self.ffn_layer_scale = LayerScale(dim)

    def forward(self, x: Tensor, rope: Tensor, state: State) -> Tensor:
        h = x + self.attention_layer_scale(self.attention(self.attention_norm(x), rope, state))
        return h + self.ffn_layer_scale(self.feed_forward(self.ffn_norm(h)))


class WindowedTransformer(Stateful, nn.Module):
    """Channels-first causal transformer with window-limited attention and a final RMSNorm."""

    def __init__(self, dim: int, config: TransformerConfig):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(TransformerBlock(dim, config) for _ in range(config.n_layer))
        self.norm = RMSNorm(dim, config.norm_eps)

    def forward(self, x: Tensor, state: State) -> Tensor:  # [B, D, T] -> [B, D, T]
        # RoPE at absolute positions: the bf16-rounded table is not shift-invariant, so a chunk
        # must use the positions it has in the whole input.
        start = state.get(self, 0)
        state[self] = start + x.shape[-1]
        rope = rope_rotations(x.shape[-1], self.config.head_dim, self.config.rope_base,
                              x.device, start)[None]  # [1, T, Dh/2, 2, 2]
        h = x.transpose(1, 2).contiguous()  # [B, T, D]; a strided view would make Linear use bmm
        for layer in self.layers:
            h = layer(h, rope, state)
        return self.norm(h).transpose(1, 2)

