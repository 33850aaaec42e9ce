"""The S2-Pro Dual-AR transformer: a slow AR over time and a fast AR over the codebooks of a frame.

Module and parameter names follow fish-speech's internal names (``layers.N.attention.wqkv``,
``fast_layers.N…``, ``codebook_embeddings`` …); ``checkpoint.py`` maps the HF names onto them.
Shapes: B batch, S sequence, D model dim, H query heads, Hkv key/value heads, Dh head dim,
K = num_codebooks, C = codebook size.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import fused
from .config import ModelConfig
from .device import to_device
from .layers import FeedForward, RMSNorm, apply_rope, rope_rotations


class HeadNorm(RMSNorm):
    """Per-head RMSNorm of q/k (``torch.nn.RMSNorm`` semantics, as the reference uses)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class KVCache(nn.Module):
    """Static per-layer cache ``[B, Hkv, L, Dh]``; rows are written in place at their positions."""

    def __init__(self, batch: int, heads: int, length: int, head_dim: int, dtype, device):
        super().__init__()
        shape = (batch, heads, length, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def write(self, pos: Tensor | int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store ``k, v [B, Hkv, S, Dh]`` and return the keys and values to attend to.

        ``pos`` is either ``[B, S]`` per-row absolute positions (returns the whole cache, for a
        mask to select from) or a Python int ``start``: the static slots ``start .. start+S-1``
        (returns slots ``0 .. start+S-1``, so no mask is needed)."""
        if isinstance(pos, int):
            end = pos + k.shape[2]
            self.k[:, :, pos:end] = k
            self.v[:, :, pos:end] = v
            return self.k[:, :, :end], self.v[:, :, :end]
        slots = pos[:, None, :, None].expand(k.shape)  # row b's tokens go to slots pos[b]
        self.k.scatter_(2, slots, k)
        self.v.scatter_(2, slots, v)
        return self.k, self.v


class Caches(nn.Module):
    """One generation's KV caches: ``slow[i]`` for slow layer i (``length`` slots), ``fast[i]``
    for fast layer i (K slots, one per codebook). Owned by whoever runs the model (an Engine),
    so several runners can share one model."""

    def __init__(self, config: ModelConfig, batch: int, length: int, dtype, device):
        super().__init__()
        t, f, K = config.text, config.fast, config.num_codebooks
        self.slow = nn.ModuleList(
            KVCache(batch, t.n_local_heads, length, t.head_dim, dtype, device)
            for _ in range(t.n_layer))
        self.fast = nn.ModuleList(
            KVCache(batch, f.n_local_heads, K, f.head_dim, dtype, device)
            for _ in range(f.n_layer))

    @property
    def shape(self) -> tuple[int, int]:
        """(batch, slow slots)."""
        k = self.slow[0].k
        return k.shape[0], k.shape[2]

    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers())

    def rows(self, rows: slice | Sequence[int]) -> "CacheRows":
        """Some rows of every cache, as a ``Caches`` whose writes land in this one: a request
        joining a running decode is prefilled into its rows only."""
        return CacheRows(self, rows)


class KVRows:
    """Rows of a ``KVCache``, written in place like one. Consecutive rows (a ``slice``) are a
    view ``[n, Hkv, L, Dh]``; other rows (``index``, a tensor of row numbers) are written by
    index and read as a gathered copy."""

    def __init__(self, cache: KVCache, rows: slice | Tensor):
        self.cache, self.index = cache, None if isinstance(rows, slice) else rows
        if self.index is None:
            self.k, self.v = cache.k[rows], cache.v[rows]

    def write(self, pos: Tensor | int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.index is None:
            return KVCache.write(self, pos, k, v)
        c, index = self.cache, self.index
        if isinstance(pos, int):
            end = pos + k.shape[2]
            c.k[index, :, pos:end] = k
            c.v[index, :, pos:end] = v
            return c.k[index, :, :end], c.v[index, :, :end]
        c.k[index[:, None], :, pos] = k.transpose(1, 2)
        c.v[index[:, None], :, pos] = v.transpose(1, 2)
        return c.k[index], c.v[index]


class CacheRows:
    """``Caches.rows``: the same ``slow``/``fast``/``shape`` as a ``Caches`` of those rows."""

    def __init__(self, caches: Caches, rows: slice | Sequence[int]):
        if not isinstance(rows, slice):
            rows = list(rows)
            if rows == list(range(rows[0], rows[0] + len(rows))):
                rows = slice(rows[0], rows[0] + len(rows))
            else:
                rows = to_device(torch.tensor(rows), caches.slow[0].k.device)
        count = (len(range(*rows.indices(caches.shape[0]))) if isinstance(rows, slice)
                 else rows.shape[0])
        self.slow = [KVRows(c, rows) for c in caches.slow]
        self.fast = [KVRows(c, rows) for c in caches.fast]
        self.shape = (count, caches.shape[1])


class Attention(nn.Module):
    def __init__(self, dim: int, n_head: int, n_kv: int, head_dim: int, qk_norm: bool, eps: float):
        super().__init__()
        self.n_head, self.n_kv, self.head_dim = n_head, n_kv, head_dim
        self.wqkv = nn.Linear(dim, (n_head + 2 * n_kv) * head_dim, bias=False)
        self.wo = nn.Linear(n_head * head_dim, dim, bias=False)
        self.q_norm = HeadNorm(head_dim, eps) if qk_norm else None
        self.k_norm = HeadNorm(head_dim, eps) if qk_norm else None

    def project(self, x: Tensor, rope: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q ``[B, H, S, Dh]``, k and v ``[B, Hkv, S, Dh]`` with QK-norm and RoPE applied (q
        and k rotated together: one RoPE for both)."""
        B, S, _ = x.shape
        H, Hkv = self.n_head, self.n_kv
        qkv = self.wqkv(x).view(B, S, H + 2 * Hkv, self.head_dim)
        qk, v = qkv[:, :, :H + Hkv], qkv[:, :, H + Hkv:]
        if self.q_norm is None:
            qk = apply_rope(qk, rope)
        else:  # QK-norm and RoPE in one kernel (fused.qk_rope)
            qk = fused.qk_rope(qk, self.q_norm.weight, self.k_norm.weight, rope, H,
                               self.q_norm.eps)
        qk = qk.transpose(1, 2)
        return qk[:, :H], qk[:, H:], v.transpose(1, 2)

    def forward(self, x: Tensor, rope: Tensor, pos: Tensor | int, mask: Tensor | None,
                cache: KVCache | None = None) -> Tensor:
        """Attention of ``x [B, S, D]`` at ``pos`` (see ``KVCache.write``).

        With ``mask [B, 1, S, W]`` (an additive ``attention_bias``): over the cache's first
        ``W`` slots (the whole cache for a decode step, the filled ones for a join). Without: a
        causal run from slot 0 (a prompt; the fast AR's first pass) or one query at static slot
        ``pos`` attending to every slot up to it (the fast AR's later codebooks)."""
        B, S, _ = x.shape
        if cache is not None and getattr(cache, "index", None) is None and fused.routed(x):
            q, keys, values = self.project_store(x, rope, pos, mask, cache)
            k = v = None
        else:
            q, k, v = self.project(x, rope)
            keys, values = (k, v) if cache is None else cache.write(pos, k, v)
        if mask is not None:  # each row picks its slots from the first mask-width ones
            width = mask.shape[-1]
            if width < keys.shape[2]:  # a join's filled slots (a decode step spans the cache)
                keys, values = keys[:, :, :width], values[:, :, :width]
            y = grouped_attention(q, keys, values, mask)
        elif isinstance(pos, int):  # static slots: attend to the cache up to them
            y = F.scaled_dot_product_attention(q, keys, values, is_causal=S > 1, enable_gqa=True)
        else:  # a prompt from slot 0: attend to itself (the slots it was stored in)
            y = F.scaled_dot_product_attention(q, keys if k is None else k,
                                               values if v is None else v, is_causal=S > 1,
                                               enable_gqa=True)
        return self.wo(y.transpose(1, 2).reshape(B, S, -1))

    def project_store(self, x: Tensor, rope: Tensor, pos: Tensor | int, mask: Tensor | None,
                      cache: KVCache) -> tuple[Tensor, Tensor, Tensor]:
        """``project`` and the KV write in one kernel (QK-norm, RoPE and the store into the
        cache, or a view of its rows): the queries ``[B, H, S, Dh]`` and the keys and values to
        attend to: the whole cache with a ``mask`` (``forward`` keeps its first mask-width slots),
        else its slots up to the last one written."""
        B, S, _ = x.shape
        qkv = self.wqkv(x).view(B, S, -1, self.head_dim)
        q = fused.qk_rope_store(
            qkv, None if self.q_norm is None else self.q_norm.weight,
            None if self.k_norm is None else self.k_norm.weight, rope, self.n_head,
            0.0 if self.q_norm is None else self.q_norm.eps, cache.k, cache.v,
            None if isinstance(pos, int) else pos, pos if isinstance(pos, int) else 0)
        q = q.transpose(1, 2)
        end = pos + S if isinstance(pos, int) else S
        keys, values = ((cache.k, cache.v) if mask is not None
                        else (cache.k[:, :, :end], cache.v[:, :, :end]))
        return q, keys, values


def grouped_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """Masked attention of ``q [B, H, S, Dh]`` over ``k, v [B, Hkv, L, Dh]`` with an additive
    ``bias [B, 1, S, L]`` (0 = attend, -inf = not: ``attention_bias``), as one SDPA call
    without repeating k/v per query head: the G = H / Hkv query heads that share a kv head are
    stacked as extra query rows, so the cache is read once, not G times (and no backend needs
    to support grouped-query attention with a mask)."""
    B, H, S, Dh = q.shape
    Hkv = k.shape[1]
    G = H // Hkv
    if S > 1:  # query row g * S + s of a kv head is head g's position s
        bias = bias.repeat(1, 1, G, 1)
    y = F.scaled_dot_product_attention(q.reshape(B, Hkv, G * S, Dh), k, v, attn_mask=bias)
    return y.view(B, H, S, Dh)


def attention_bias(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean mask (True = attend) as the additive bias SDPA adds to the scores, made once
    for all layers (SDPA would convert a boolean mask in every call)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
        ~mask, float("-inf"))


class TransformerBlock(nn.Module):
    def __init__(self, dim, n_head, n_kv, head_dim, hidden, qk_norm, eps):
        super().__init__()
        self.attention = Attention(dim, n_head, n_kv, head_dim, qk_norm, eps)
        self.feed_forward = FeedForward(dim, hidden)
        self.attention_norm = RMSNorm(dim, eps)
        self.ffn_norm = RMSNorm(dim, eps)

    def forward(self, x: Tensor, rope: Tensor, pos: Tensor | int, mask: Tensor | None,
                cache: KVCache | None = None) -> Tensor:
        return self.run(x, self.attention_norm(x), rope, pos, mask, cache)[0]

    def run(self, x: Tensor, normed: Tensor, rope: Tensor, pos: Tensor | int,
            mask: Tensor | None, cache: KVCache | None = None,
            next_norm: RMSNorm | None = None) -> tuple[Tensor, Tensor | None]:
        """The block on ``x`` whose attention norm ``normed`` is already made; returns its
        output and ``next_norm`` of it (the next block's attention norm, or the final norm):
        each residual add and the norm after it are one kernel (``fused.add_rms_norm``)."""
        h, normed = fused.add_rms_norm(x, self.attention(normed, rope, pos, mask, cache),
                                       self.ffn_norm.weight, self.ffn_norm.eps)
        y = self.feed_forward(normed)
        if next_norm is None:
            return h + y, None
        return fused.add_rms_norm(h, y, next_norm.weight, next_norm.eps)


def run_blocks(blocks: Sequence[TransformerBlock], final_norm: RMSNorm, x: Tensor, rope: Tensor,
               pos: Tensor | int, mask: Tensor | None, caches: Sequence | None) -> Tensor:
    """``final_norm`` of the blocks run in turn on ``x`` (block i in ``caches[i]``)."""
    normed = blocks[0].attention_norm(x)
    for i, block in enumerate(blocks):
        nxt = blocks[i + 1].attention_norm if i + 1 < len(blocks) else final_norm
        x, normed = block.run(x, normed, rope, pos, mask, None if caches is None else caches[i],
                              nxt)
    return normed


class DualAR(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        t, f = config.text, config.fast
        K, C = config.num_codebooks, config.codebook_size
        # Slow AR. codebook_embeddings is its input (stored under audio_decoder. in the checkpoint).
        self.embeddings = nn.Embedding(t.vocab_size, t.dim)
        self.codebook_embeddings = nn.Embedding(K * C, t.dim)
        self.layers = nn.ModuleList(
            TransformerBlock(t.dim, t.n_head, t.n_local_heads, t.head_dim, t.intermediate_size,
                  t.attention_qk_norm, t.norm_eps) for _ in range(t.n_layer))
        self.norm = RMSNorm(t.dim, t.norm_eps)
        # Fast AR. The reference builds it with the text norm_eps and rope_base.
        self.fast_embeddings = nn.Embedding(C, f.dim)
        self.fast_layers = nn.ModuleList(
            TransformerBlock(f.dim, f.n_head, f.n_local_heads, f.head_dim, f.intermediate_size,
                  f.attention_qk_norm, t.norm_eps) for _ in range(f.n_layer))
        self.fast_norm = RMSNorm(f.dim, t.norm_eps)
        self.fast_output = nn.Linear(f.dim, C, bias=False)
        self.reset_buffers()

    def reset_buffers(self, device=None) -> None:
        """(Re)build the non-persistent buffers, e.g. on the real device after a meta build."""
        t, f, K = self.config.text, self.config.fast, self.config.num_codebooks
        offsets = torch.arange(K, device=device) * self.config.codebook_size
        self.register_buffer("codebook_offsets", offsets, persistent=False)
        self.register_buffer("rope", rope_rotations(t.max_seq_len, t.head_dim, t.rope_base,
                                                    device), persistent=False)
        self.register_buffer("fast_rope", rope_rotations(K, f.head_dim, t.rope_base, device),
                             persistent=False)

    # ---- slow AR ----
    def embed(self, tokens: Tensor) -> Tensor:
        """``tokens [B, 1 + K, S]`` → ``[B, S, D]``: token embedding plus, at semantic positions,
        the sum of the K codebook embeddings, all divided by sqrt(K + 1)."""
        ids, codes = tokens[:, 0], tokens[:, 1:]
        vq = self.codebook_embeddings(codes + self.codebook_offsets[None, :, None])  # [B,K,S,D]
        vq_sum = vq.sum(dim=1)
        c = self.config
        is_semantic = ((ids >= c.semantic_start_token_id) & (ids <= c.semantic_end_token_id))
        is_semantic = is_semantic.unsqueeze(-1)
        x = self.embeddings(ids) + torch.where(is_semantic, vq_sum, torch.zeros_like(vq_sum))
        return torch.where(is_semantic, x / math.sqrt(c.num_codebooks + 1), x)

    def slow_forward(self, tokens: Tensor, pos: Tensor, mask: Tensor | None,
                     caches: Caches | None = None) -> Tensor:
        """Run the slow layers; returns the final-normed hidden states ``[B, S, D]``.

        ``pos [B, S]`` are the absolute positions (RoPE rows and cache slots). ``mask``: see
        ``Attention.forward``; ``caches`` None runs a prompt without storing it."""
        x = self.embed(tokens)
        rope = self.rope[pos]
        if mask is not None and mask.dtype == torch.bool:
            mask = attention_bias(mask, x.dtype)
        return run_blocks(self.layers, self.norm, x, rope, pos, mask,
                          None if caches is None else caches.slow)

    def head_rows(self, ids: Tensor) -> Tensor:
        """Rows ``ids`` of the tied output head (= the token embedding) in the model dtype,
        through the embedding module, so a quantized table (``quant.FP8Embedding``) works too."""
        return self.embeddings(ids)

    def vocab_logits(self, hidden: Tensor) -> Tensor:
        """Full-vocabulary logits through the tied embedding."""
        if isinstance(self.embeddings, nn.Embedding):
            return F.linear(hidden, self.embeddings.weight)  # no copy of the whole table
        ids = torch.arange(self.config.text.vocab_size, device=hidden.device)
        return F.linear(hidden, self.head_rows(ids))

    @property
    def dtype(self) -> torch.dtype:
        return self.norm.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.norm.weight.device

    # ---- fast AR ----
    def fast_forward(self, x: Tensor, start: int, caches: Caches) -> Tensor:
        """Fast layers over ``x [B, S, D]`` at codebook positions ``start .. start+S-1``
        (Python ints, so the frame loop unrolls into static slices; S > 1 only from 0).
        Returns logits ``[B, S, C]``."""
        rope = self.fast_rope[start:start + x.shape[1]].unsqueeze(0)
        return self.fast_output(run_blocks(self.fast_layers, self.fast_norm, x, rope, start,
                                           None, caches.fast))

    def make_caches(self, batch: int, length: int, dtype=None, device=None) -> Caches:
        """Static KV caches for ``batch`` rows: ``length`` slots for the slow AR, K for the fast."""
        return Caches(self.config, batch, length, dtype or self.dtype, device or self.device)
