"""The Qwen3 text model the audio embeddings feed: token embeddings, decoder layers (GQA
attention with per-head q/k RMSNorm, half-rotation RoPE from float positions, SwiGLU), a final
RMSNorm. The head (timestamp classes or vocabulary) sits in ``thinker.py``.

Positions are float ``[3, B, L]`` (M-RoPE's time/height/width rows; for audio+text prompts the
three rows are equal, so the interleaved M-RoPE reduces to plain RoPE, but it is computed as
written). ``positions_from_mask`` makes them from a padding mask as the reference does.

A static ``KVCache`` (gpt-fast's) is optional: the aligner runs one pass without one; a decoder
(the ASR) sets ``cache`` on each attention and passes ``input_pos``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..engine.layers import FeedForward, RMSNorm
from .config import TextConfig


def positions_from_mask(mask: Tensor) -> Tensor:
    """Float ``[3, B, L]`` positions for a ``[B, L]`` padding mask (1 = token): the count of
    tokens before, 1 on padding."""
    pos = mask.float().cumsum(-1) - 1
    pos = pos.masked_fill(mask == 0, 1)
    return pos.unsqueeze(0).expand(3, -1, -1)


def rope_tables(positions: Tensor, head_dim: int, theta: float, sections: tuple[int, ...],
                dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``cos, sin [B, L, head_dim]`` for float ``positions [3, B, L]``: angles in fp32, the
    three rows interleaved (row 1 on pair indices 1, 4, … below ``3 * sections[1]``, row 2 on
    2, 5, … below ``3 * sections[2]``, row 0 elsewhere), then cast to ``dtype``."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64,
                                         device=positions.device).float() / head_dim))
    angles = positions.float()[..., None] * inv  # [3, B, L, head_dim / 2]
    merged = angles[0].clone()
    for row in (1, 2):
        if len(sections) > row:
            index = slice(row, sections[row] * 3, 3)
            merged[..., index] = angles[row][..., index]
    full = torch.cat([merged, merged], dim=-1)
    return full.cos().to(dtype), full.sin().to(dtype)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE on ``x [B, H, L, Dh]`` by half-rotation (first half against second)."""
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None] + turned * sin[:, None]


class KVCache(nn.Module):
    """Static keys and values ``[B, kv_heads, max_len, head_dim]``, written at ``input_pos``."""

    def __init__(self, batch: int, kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype, device=None):
        super().__init__()
        shape = (batch, kv_heads, max_len, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, input_pos: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        self.k.index_copy_(2, input_pos, k)
        self.v.index_copy_(2, input_pos, v)
        return self.k, self.v


class Attention(nn.Module):
    def __init__(self, config: TextConfig):
        super().__init__()
        dim, dh = config.hidden_size, config.head_dim
        self.n_head, self.n_kv, self.head_dim = (config.num_attention_heads,
                                                 config.num_key_value_heads, dh)
        self.q_proj = nn.Linear(dim, self.n_head * dh, bias=False)
        self.k_proj = nn.Linear(dim, self.n_kv * dh, bias=False)
        self.v_proj = nn.Linear(dim, self.n_kv * dh, bias=False)
        self.o_proj = nn.Linear(self.n_head * dh, dim, bias=False)
        self.q_norm = RMSNorm(dh, config.rms_norm_eps)
        self.k_norm = RMSNorm(dh, config.rms_norm_eps)
        self.cache: KVCache | None = None

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None,
                input_pos: Tensor | None = None, filled: int | None = None) -> Tensor:
        """``filled``: the cache's slots in use after this write (keys past it are never
        attended, so they are left out rather than masked)."""
        b, length, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, length, self.n_head, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, length, self.n_kv, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, length, self.n_kv, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if self.cache is not None:
            k, v = self.cache.update(input_pos, k, v)
            if filled is not None:
                k, v = k[:, :, :filled], v[:, :, :filled]
                mask = mask[..., :filled] if mask is not None else None
        # grouped-query attention without copying the keys and values per head
        gqa = self.n_head != self.n_kv
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=length > 1, enable_gqa=gqa)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        return self.o_proj(out.transpose(1, 2).reshape(b, length, -1))


class DecoderLayer(nn.Module):
    def __init__(self, config: TextConfig):
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = FeedForward(config.hidden_size, config.intermediate_size)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None,
                input_pos: Tensor | None = None, filled: int | None = None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, input_pos, filled)
        return x + self.mlp(self.post_attention_layernorm(x))


def attention_mask(mask: Tensor, query_len: int | None = None, key_len: int | None = None,
                   input_pos: Tensor | None = None) -> Tensor:
    """Boolean ``[B, 1, Lq, Lk]`` (True = may attend): causal, and never onto padding.
    ``mask [B, Lk]`` marks real tokens; ``input_pos [Lq]`` are the queries' slots (default: the
    first ``Lq``). A query row on padding attends to nothing but itself, so it stays finite."""
    b, lk = mask.shape
    lk = key_len or lk
    lq = query_len or lk
    pos = input_pos if input_pos is not None else torch.arange(lq, device=mask.device)
    keys = torch.arange(lk, device=mask.device)
    allowed = (keys[None, :] <= pos[:, None])[None] & (mask[:, None, :lk] != 0)
    allowed = allowed | (keys[None, None, :] == pos[None, :, None])
    return allowed[:, None]


class TextModel(nn.Module):
    """``forward(embeds [B, L, D], positions [3, B, L], mask)`` → hidden ``[B, L, D]`` after
    the final norm; ``mask`` is None (causal, no padding) or from ``attention_mask``."""

    def __init__(self, config: TextConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def rope(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        c = self.config
        return rope_tables(positions, c.head_dim, c.rope_theta, c.mrope_section, dtype)

    def forward(self, embeds: Tensor, positions: Tensor, mask: Tensor | None = None,
                input_pos: Tensor | None = None, layers_out: list | None = None) -> Tensor:
        cos, sin = self.rope(positions, embeds.dtype)
        # With a cache, attention reads only the slots written so far (one host sync a pass)
        cached = input_pos is not None and self.layers[0].self_attn.cache is not None
        filled = int(input_pos.max()) + 1 if cached else None
        x = embeds
        for layer in self.layers:
            x = layer(x, cos, sin, mask, input_pos, filled)
            if layers_out is not None:
                layers_out.append(x)
        return self.norm(x)

    def setup_cache(self, batch: int, max_len: int, dtype: torch.dtype | None = None) -> None:
        """A static KV cache of ``max_len`` slots per row on every layer (for decoding)."""
        weight = self.embed_tokens.weight
        for layer in self.layers:
            attn = layer.self_attn
            layer.self_attn.cache = KVCache(batch, attn.n_kv, max_len, attn.head_dim,
                                            dtype or weight.dtype, weight.device)

    def drop_cache(self) -> None:
        for layer in self.layers:
            layer.self_attn.cache = None
