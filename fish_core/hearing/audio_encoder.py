"""The audio tower: log-mel frames → one embedding per 80 ms, the ``<|audio_pad|>`` fill.

The frames are cut into chunks of ``2 * n_window`` (100) frames, the last one zero-padded; three
stride-2 3×3 convolutions (GELU after each) turn a chunk into 13 steps, flattened over channels ×
remaining mel bins and projected to ``d_model``; sinusoidal positions restart in every chunk.
The valid steps of all chunks, concatenated, pass pre-LayerNorm transformer layers with FULL
bidirectional attention over the clip (what the reference computes with sdpa/eager, which is
how the goldens were made: it derives ``n_window_infer`` windows but only flash-attention-2
applies them), then LayerNorm, ``proj1`` → GELU → ``proj2`` to the text model's width.
``windowed=True`` restricts attention to windows of ``n_window_infer`` frames instead, as
flash-attention-2 and the reference's vLLM backend do (the same for clips up to one window).

Each clip is encoded on its own, as the reference does.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import AudioConfig


def chunk_steps(frames: int | Tensor) -> int | Tensor:
    """Steps one chunk of ``frames`` (≤ 2 * n_window) mel frames leaves after the convolutions."""
    for _ in range(3):
        frames = (frames - 1) // 2 + 1
    return frames


def encoded_length(frames: int, chunk_frames: int = 100) -> int:
    """Audio embeddings (``<|audio_pad|>`` tokens) for a clip of ``frames`` mel frames."""
    whole, tail = divmod(int(frames), chunk_frames)
    return whole * chunk_steps(chunk_frames) + (chunk_steps(tail) if tail else 0)


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> Tensor:
    """``[length, channels]``: sines then cosines of geometric time scales (Whisper's)."""
    step = math.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-step * torch.arange(channels // 2).float())
    angles = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


class AudioAttention(nn.Module):
    def __init__(self, config: AudioConfig):
        super().__init__()
        dim = config.d_model
        self.n_head = config.encoder_attention_heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:  # [N, D] → [N, D]
        n = x.shape[0]
        q, k, v = (proj(x).reshape(n, self.n_head, -1).transpose(0, 1).unsqueeze(0)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q, k, v)  # [1, H, N, Dh], full attention
        return self.out_proj(out.transpose(1, 2).reshape(n, -1))


class AudioLayer(nn.Module):
    def __init__(self, config: AudioConfig):
        super().__init__()
        dim = config.d_model
        self.self_attn = AudioAttention(config)
        self.self_attn_layer_norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, config.encoder_ffn_dim)
        self.fc2 = nn.Linear(config.encoder_ffn_dim, dim)
        self.final_layer_norm = nn.LayerNorm(dim)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        x = x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))
        if x.dtype == torch.float16:  # keep fp16 finite, as the reference does
            limit = torch.finfo(x.dtype).max - 1000
            x = x.clamp(-limit, limit)
        return x


class AudioEncoder(nn.Module):
    """``forward(features [n_mels, frames])`` → ``[encoded_length(frames), output_dim]``."""

    def __init__(self, config: AudioConfig, windowed: bool = False):
        super().__init__()
        self.config = config
        self.windowed = windowed
        width = config.downsample_hidden_size
        self.conv2d1 = nn.Conv2d(1, width, 3, 2, padding=1)
        self.conv2d2 = nn.Conv2d(width, width, 3, 2, padding=1)
        self.conv2d3 = nn.Conv2d(width, width, 3, 2, padding=1)
        self.conv_out = nn.Linear(width * config.conv_bins, config.d_model, bias=False)
        self.layers = nn.ModuleList(AudioLayer(config) for _ in range(config.encoder_layers))
        self.ln_post = nn.LayerNorm(config.d_model)
        self.proj1 = nn.Linear(config.d_model, config.d_model)
        self.proj2 = nn.Linear(config.d_model, config.output_dim)
        self.register_buffer("positions", sinusoids(config.max_source_positions, config.d_model),
                             persistent=False)

    def chunks(self, features: Tensor) -> tuple[Tensor, list[int]]:
        """``[n_chunks, 1, n_mels, chunk_frames]`` zero-padded chunks and each one's frames."""
        size = self.config.chunk_frames
        frames = features.shape[-1]
        lengths = [min(size, frames - start) for start in range(0, frames, size)]
        padded = F.pad(features, (0, len(lengths) * size - frames))
        chunks = padded.reshape(features.shape[0], len(lengths), size).transpose(0, 1)
        return chunks.unsqueeze(1), lengths

    def embed(self, features: Tensor) -> Tensor:
        """The convolution stem: ``[n_mels, frames]`` → ``[n_tokens, d_model]`` with positions."""
        chunks, lengths = self.chunks(features)
        outs = []
        for part in chunks.split(self.config.conv_chunksize, dim=0):
            h = F.gelu(self.conv2d1(part))
            h = F.gelu(self.conv2d2(h))
            outs.append(F.gelu(self.conv2d3(h)))
        h = torch.cat(outs, dim=0)  # [n, C, bins, steps]
        n, c, bins, steps = h.shape
        h = self.conv_out(h.permute(0, 3, 1, 2).reshape(n, steps, c * bins))
        h = h + self.positions[:steps].to(h.dtype)
        return torch.cat([h[i, :chunk_steps(length)] for i, length in enumerate(lengths)])

    @property
    def window_tokens(self) -> int:
        """Tokens in one attention window of ``n_window_infer`` frames (when ``windowed``)."""
        c = self.config
        return chunk_steps(c.chunk_frames) * (c.n_window_infer // c.chunk_frames)

    def forward(self, features: Tensor) -> Tensor:
        x = self.embed(features.to(self.proj1.weight.dtype))
        # Only attention mixes tokens: a window attended alone is the windowed attention.
        parts = x.split(self.window_tokens) if self.windowed else (x,)
        outs = []
        for part in parts:
            for layer in self.layers:
                part = layer(part)
            outs.append(part)
        x = torch.cat(outs) if len(outs) > 1 else outs[0]
        return self.proj2(F.gelu(self.proj1(self.ln_post(x))))
