"""Fish Audio S2-Pro codec (``codec.pth``): a causal, modified DAC with a semantic + residual RVQ.

    audio [B, 1, T] @ 44.1 kHz
      -> Encoder: conv k7, 4 x (3 residual units, Snake, strided conv), windowed transformer, Snake, conv k3
      -> z [B, D, T/512]
      -> Quantizer.encode: 2 x (conv k2 s2, ConvNeXt) -> pre transformer -> 1 semantic VQ + 9 residual VQ
      -> codes [B, 10, T/2048]
    codes -> Quantizer.decode: VQ lookups -> post transformer -> 2 x (transposed conv k2 s2, ConvNeXt)
      -> Decoder: conv k7, 4 x (Snake, transposed conv, 3 residual units), Snake, conv k7, tanh
      -> audio [B, 1, n * 2048]

Every layer is causal (left-padded convolutions, causal window-limited attention), so long inputs are
processed chunk by chunk with a ``state`` dict that carries each layer's exact left context between
chunks: the last ``k - stride`` input samples of every conv, the last ``window - 1`` keys/values of
every attention layer and each transformer's position counter. A chunked run therefore computes the
same function as a whole-input run while its memory depends only on the chunk size.

Weight norm is folded once at load. Module names mirror the checkpoint's key layout, so loading is
a plain ``load_state_dict`` after folding.
"""

import json
import math
import pickle
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .audio import MAX_SECONDS, load_audio, save_audio
from .model import FeedForward, RMSNorm, apply_rope, rope_table

CHECKPOINT_NAME = "codec.pth"
CONFIG_NAME = "codec_config.json"
# Frames per chunk when encode/decode chunk automatically: ~1.5 s of audio, ~1 GB of fp32
# activations for the real decoder on CPU, no slower than larger chunks (bench/bench_codec.py).
DEFAULT_CHUNK_FRAMES = 32

# Checkpoint key suffixes of the two weight-norm styles: (g, v); weight = g * v / ||v||.
WN_PARAMETRIZATIONS = ("parametrizations.weight.original0", "parametrizations.weight.original1")
WN_LEGACY = ("weight_g", "weight_v")

State = dict  # module -> carried left context (tensor, (k, v) pair or position counter)


class CodecLoadError(ValueError):
    """codec.pth (or codec_config.json) cannot be loaded into the codec."""


# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransformerConfig:
    n_layer: int
    n_head: int
    head_dim: int
    intermediate_size: int
    window: int  # causal attention window, the query position included
    rope_base: float = 10000.0
    norm_eps: float = 1e-5


@dataclass(frozen=True)
class CodecConfig:
    """Hyper-parameters; the defaults are the real S2-Pro codec (``modded_dac_vq.yaml``)."""

    sample_rate: int = 44100
    encoder_dim: int = 64
    encoder_rates: tuple = (2, 4, 8, 8)
    encoder_transformer_layers: tuple = (0, 0, 0, 4)
    latent_dim: int = 1024
    decoder_dim: int = 1536
    decoder_rates: tuple = (8, 8, 4, 2)
    # Encoder transformers: n_head = dim // 64 and FFN = 3 * dim are fixed by the reference; these
    # come from its `transformer_general_config` (window 512 unless that config sets one).
    encoder_window: int = 512
    head_dim: int = 64
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    # Quantizer: pre_module and post_module share this shape (a yaml anchor in the reference).
    quantizer_transformer: TransformerConfig = field(
        default_factory=lambda: TransformerConfig(8, 16, 64, 3072, 128))
    downsample_factors: tuple = (2, 2)
    n_codebooks: int = 9
    codebook_size: int = 1024
    semantic_codebook_size: int = 4096
    codebook_dim: int = 8

    @property
    def frame_length(self) -> int:
        return math.prod(self.encoder_rates) * math.prod(self.downsample_factors)

    def encoder_transformer(self, dim: int, n_layer: int) -> TransformerConfig:
        return TransformerConfig(n_layer, dim // 64, self.head_dim, 3 * dim, self.encoder_window,
                                 self.rope_base, self.norm_eps)

    @classmethod
    def from_json(cls, path) -> "CodecConfig":
        """Defaults overridden by a ``codec_config.json`` (keys mirror the reference yaml)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise CodecLoadError(f"cannot read codec config {path}: {err}") from err
        return cls().with_json(data, str(path))

    def with_json(self, data: dict, name: str = "codec config") -> "CodecConfig":
        out = {k: data[k] for k in ("sample_rate", "encoder_dim", "latent_dim", "decoder_dim")
               if data.get(k) is not None}
        for key in ("encoder_rates", "encoder_transformer_layers", "decoder_rates"):
            if data.get(key) is not None:
                out[key] = tuple(data[key])
        general = data.get("transformer_general_config") or {}
        for key in ("head_dim", "rope_base", "norm_eps"):
            if key in general:
                out[key] = general[key]
        window = (data.get("encoder_transformer") or {}).get("window_size", general.get("window_size"))
        if window is not None:
            out["encoder_window"] = window

        quant = data.get("quantizer") or {}
        for key in ("n_codebooks", "codebook_size", "semantic_codebook_size", "codebook_dim"):
            if key in quant:
                out[key] = quant[key]
        if "downsample_factor" in quant:
            out["downsample_factors"] = tuple(quant["downsample_factor"])
        if isinstance(quant.get("pre_module"), dict):
            pre = _transformer_from_json(quant["pre_module"], self.quantizer_transformer)
            post = quant.get("post_module")
            if isinstance(post, dict) and _transformer_from_json(post, pre) != pre:
                raise CodecLoadError(f"{name}: quantizer pre_module and post_module must have the "
                                     f"same shape and window")
            out["quantizer_transformer"] = pre
        return replace(self, **out)


def _transformer_from_json(module: dict, base: TransformerConfig) -> TransformerConfig:
    cfg = module.get("config") or {}
    return replace(
        base,
        n_layer=cfg.get("n_layer", base.n_layer),
        n_head=cfg.get("n_head", base.n_head),
        head_dim=cfg.get("head_dim", base.head_dim),
        intermediate_size=cfg.get("intermediate_size", base.intermediate_size),
        window=module.get("window_size", base.window),
        rope_base=cfg.get("rope_base", base.rope_base),
        norm_eps=cfg.get("norm_eps", base.norm_eps),
    )


def receptive_field(config: CodecConfig) -> dict:
    """Exact left context (in 44.1 kHz samples) behind one encoded frame / one decoded sample.

    Causal conv (kernel k, dilation d, stride s): (k-1)*d+1-s input steps. Causal transposed conv
    with kernel 2s: one input step. Windowed attention composes across layers: n_layer*(window-1)
    positions. Nothing looks right, so a chunk needs only this much history.
    """
    residual_units = sum(6 * d for d in (1, 3, 9))  # three k7 convs, dilations 1, 3, 9
    enc, step = 6, 1  # first conv k7 at 44.1 kHz
    for rate, layers in zip(config.encoder_rates, config.encoder_transformer_layers):
        enc += residual_units * step + rate * step  # residual units, then conv k=2*rate
        step *= rate
        enc += layers * (config.encoder_window - 1) * step
    enc += 2 * step  # last conv k3
    q = config.quantizer_transformer
    for factor in config.downsample_factors:
        step *= factor  # conv k=s: no overlap
        enc += 6 * step  # ConvNeXt depthwise k7
    enc += q.n_layer * (q.window - 1) * step

    step = config.frame_length
    dec = q.n_layer * (q.window - 1) * step
    for factor in reversed(config.downsample_factors):
        step //= factor  # transposed conv k=s: no overlap
        dec += 6 * step
    dec += 6 * step  # first decoder conv k7
    for rate in config.decoder_rates:
        dec += step  # transposed conv k=2*rate reaches one input step back
        step //= rate
        dec += residual_units * step
    dec += 6 * step  # last conv k7
    frame = config.frame_length
    return {"encode_samples": enc, "encode_frames": -(-enc // frame),
            "decode_samples": dec, "decode_frames": -(-dec // frame)}


# ----------------------------------------------------------------------------------------------
# Building blocks
# ----------------------------------------------------------------------------------------------


class Stateful:
    """Marker: ``forward(x, state)``, where ``state`` carries left context from the previous chunk."""


class Chain(Stateful, nn.Sequential):
    """nn.Sequential that hands ``state`` to the layers that need it."""

    def forward(self, x: Tensor, state: State) -> Tensor:
        for layer in self:
            x = layer(x, state) if isinstance(layer, Stateful) else layer(x)
        return x


class Block(Stateful, nn.Module):
    """A chain stored as ``.block`` (mirrors the checkpoint's ``...block.N...`` keys)."""

    def __init__(self, *layers: nn.Module):
        super().__init__()
        self.block = Chain(*layers)

    def forward(self, x: Tensor, state: State) -> Tensor:
        return self.block(x, state)


class CausalConv1d(Stateful, nn.Module):
    """Conv1d zero-padded on the left by (k-1)*d+1-stride; output length ceil(L / stride)."""

    def __init__(self, c_in, c_out, kernel_size, stride=1, dilation=1, groups=1, weight_norm=False):
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel_size, stride=stride, dilation=dilation, groups=groups)
        if weight_norm:
            self.conv.weight_norm_keys = WN_PARAMETRIZATIONS
        self.stride = stride
        self.context = (kernel_size - 1) * dilation + 1 - stride

    def forward(self, x: Tensor, state: State) -> Tensor:  # [B, C_in, L] -> [B, C_out, ceil(L/s)]
        # The reference's "extra right padding" rule; with a left pad of k_eff - s it reduces to
        # padding L to a multiple of the stride. Chunks are whole frames, so within a stream it
        # never fires (a standalone odd length is necessarily the end of its stream).
        extra = -x.shape[-1] % self.stride
        if self.context > 0:
            prev = state.get(self)
            if prev is None:  # stream start: zeros, as the reference pads
                prev = x.new_zeros(x.shape[0], x.shape[1], self.context)
            x = torch.cat([prev, x], dim=-1)
            state[self] = x[..., x.shape[-1] - self.context:].clone()  # not a view of the chunk
        return self.conv(F.pad(x, (0, extra)) if extra else x)


class CausalConvTranspose1d(Stateful, nn.Module):
    """ConvTranspose1d whose right overhang (k - stride) is dropped: output length L * stride."""

    def __init__(self, c_in, c_out, kernel_size, stride, weight_norm=False):
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, kernel_size, stride=stride)
        if weight_norm:
            self.conv.weight_norm_keys = WN_PARAMETRIZATIONS
        self.stride = stride
        self.context = -(-(kernel_size - stride) // stride)  # input steps whose overhang reaches us

    def forward(self, x: Tensor, state: State) -> Tensor:  # [B, C_in, L] -> [B, C_out, L*s]
        length = x.shape[-1] * self.stride
        prev = state.get(self)  # None at stream start: nothing overhangs from the left
        if prev is not None:
            x = torch.cat([prev, x], dim=-1)
        if self.context > 0:
            state[self] = x[..., -self.context:].clone()
        skip = 0 if prev is None else prev.shape[-1] * self.stride
        return self.conv(x)[..., skip:skip + length]


class Snake(nn.Module):
    """x + sin(alpha * x)^2 / (alpha + 1e-9), per channel."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: Tensor) -> Tensor:  # [B, C, L]
        y = torch.sin(self.alpha * x)
        y.pow_(2).mul_((self.alpha + 1e-9).reciprocal())
        return y.add_(x)


class ResidualUnit(Block):
    """x + conv1x1(snake(conv7_dilated(snake(x))))."""

    def __init__(self, dim: int, dilation: int):
        super().__init__(
            Snake(dim),
            CausalConv1d(dim, dim, 7, dilation=dilation, weight_norm=True),
            Snake(dim),
            CausalConv1d(dim, dim, 1, weight_norm=True),
        )

    def forward(self, x: Tensor, state: State) -> Tensor:
        return x + self.block(x, state)


class ConvNeXtBlock(Stateful, nn.Module):
    """x + gamma * pw2(gelu(pw1(layernorm(causal depthwise conv k7(x)))))."""

    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor, state: State) -> Tensor:  # [B, C, L]
        y = self.dwconv(x, state).transpose(1, 2)  # [B, L, C]
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
        return x + (self.gamma * y).transpose(1, 2)


# ----------------------------------------------------------------------------------------------
# Window-limited transformer
# ----------------------------------------------------------------------------------------------


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

    def __init__(self, dim: int, cfg: TransformerConfig):
        super().__init__()
        self.n_head, self.head_dim, self.window = cfg.n_head, cfg.head_dim, cfg.window
        self.wqkv = nn.Linear(dim, 3 * cfg.n_head * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_head * cfg.head_dim, dim, bias=False)

    def forward(self, x: Tensor, rope: Tensor, state: State) -> Tensor:  # [B, T, D]
        bsz, length, _ = x.shape
        q, k, v = self.wqkv(x).view(bsz, length, 3 * self.n_head, self.head_dim).split(self.n_head, 2)
        q, k = apply_rope(q, rope), apply_rope(k, rope)
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
    def __init__(self, dim: int, cfg: TransformerConfig):
        super().__init__()
        self.attention = Attention(dim, cfg)
        self.feed_forward = FeedForward(dim, cfg.intermediate_size)
        self.attention_norm = RMSNorm(dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(dim, cfg.norm_eps)
        self.attention_layer_scale = LayerScale(dim)
        self.ffn_layer_scale = LayerScale(dim)

    def forward(self, x: Tensor, rope: Tensor, state: State) -> Tensor:
        h = x + self.attention_layer_scale(self.attention(self.attention_norm(x), rope, state))
        return h + self.ffn_layer_scale(self.feed_forward(self.ffn_norm(h)))


class WindowedTransformer(Stateful, nn.Module):
    """Channels-first causal transformer with window-limited attention and a final RMSNorm."""

    def __init__(self, dim: int, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(TransformerBlock(dim, cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(dim, cfg.norm_eps)

    def forward(self, x: Tensor, state: State) -> Tensor:  # [B, D, T] -> [B, D, T]
        # RoPE at absolute positions: the bf16-rounded table is not shift-invariant, so a chunk
        # must use the positions it has in the whole input.
        start = state.get(self, 0)
        state[self] = start + x.shape[-1]
        rope = rope_table(x.shape[-1], self.cfg.head_dim, self.cfg.rope_base, x.device,
                          start)[None]  # [1, T, Dh/2, 2]
        h = x.transpose(1, 2).contiguous()  # [B, T, D]; a strided view would make Linear use bmm
        for layer in self.layers:
            h = layer(h, rope, state)
        return self.norm(h).transpose(1, 2)


# ----------------------------------------------------------------------------------------------
# Quantizer
# ----------------------------------------------------------------------------------------------


def _pointwise_wn(c_in: int, c_out: int) -> nn.Conv1d:
    """Weight-normed 1x1 conv (checkpoint layout); applied channels-last by ``_project``."""
    conv = nn.Conv1d(c_in, c_out, 1)
    conv.weight_norm_keys = WN_LEGACY
    return conv


def _project(conv: nn.Conv1d, x: Tensor) -> Tensor:  # [B, T, C_in] -> [B, T, C_out]
    return F.linear(x, conv.weight[..., 0], conv.bias)


class VectorQuantizer(nn.Module):
    """One codebook: project to codebook_dim, nearest row by cosine, project the raw row back."""

    def __init__(self, dim: int, size: int, codebook_dim: int):
        super().__init__()
        self.in_proj = _pointwise_wn(dim, codebook_dim)
        self.out_proj = _pointwise_wn(codebook_dim, dim)
        self.codebook = nn.Embedding(size, codebook_dim)

    def quantize(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x [B, D, T] -> codes [B, T], quantized [B, D, T]."""
        z_e = _project(self.in_proj, x.transpose(1, 2))  # [B, T, d]
        bsz, length, dim = z_e.shape
        enc = F.normalize(z_e.reshape(-1, dim))
        book = F.normalize(self.codebook.weight)
        # Squared distance of unit vectors (the reference's formula; argmin = max cosine).
        dist = enc.pow(2).sum(1, keepdim=True) - 2 * enc @ book.t() + book.pow(2).sum(1)[None]
        codes = (-dist).max(1).indices.view(bsz, length)
        z_q = F.embedding(codes, self.codebook.weight)  # [B, T, d]
        # z_e + (z_q - z_e) is the reference's straight-through form; it differs from z_q by
        # rounding, and the residual chain (hence later codes) depends on it.
        return codes, _project(self.out_proj, z_e + (z_q - z_e)).transpose(1, 2)

    def lookup(self, codes: Tensor) -> Tensor:  # [B, T] -> [B, D, T]
        return _project(self.out_proj, F.embedding(codes, self.codebook.weight)).transpose(1, 2)


class ResidualVQ(nn.Module):
    def __init__(self, dim: int, n_codebooks: int, size: int, codebook_dim: int):
        super().__init__()
        self.quantizers = nn.ModuleList(VectorQuantizer(dim, size, codebook_dim)
                                        for _ in range(n_codebooks))

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x [B, D, T] -> codes [B, n, T], residual left after all stages [B, D, T]."""
        codes = []
        for vq in self.quantizers:
            idx, z_q = vq.quantize(x)
            x = x - z_q
            codes.append(idx)
        return torch.stack(codes, dim=1), x

    def decode(self, codes: Tensor) -> Tensor:  # [B, n, T] -> [B, D, T]
        z = self.quantizers[0].lookup(codes[:, 0])
        for i in range(1, len(self.quantizers)):
            z = z + self.quantizers[i].lookup(codes[:, i])
        return z


class Quantizer(nn.Module):
    """Downsample x4, pre transformer, semantic VQ + residual RVQ; decode mirrors it."""

    def __init__(self, cfg: CodecConfig):
        super().__init__()
        dim = cfg.latent_dim
        self.semantic_quantizer = ResidualVQ(dim, 1, cfg.semantic_codebook_size, cfg.codebook_dim)
        self.quantizer = ResidualVQ(dim, cfg.n_codebooks, cfg.codebook_size, cfg.codebook_dim)
        self.downsample = Chain(*(Chain(CausalConv1d(dim, dim, f, stride=f), ConvNeXtBlock(dim))
                                  for f in cfg.downsample_factors))
        self.upsample = Chain(*(Chain(CausalConvTranspose1d(dim, dim, f, stride=f), ConvNeXtBlock(dim))
                                for f in reversed(cfg.downsample_factors)))
        self.pre_module = WindowedTransformer(dim, cfg.quantizer_transformer)
        self.post_module = WindowedTransformer(dim, cfg.quantizer_transformer)

    def encode(self, z: Tensor, state: State) -> Tensor:  # [B, D, 4n] -> codes [B, 10, n]
        z = self.pre_module(self.downsample(z, state), state)
        semantic, residual = self.semantic_quantizer.encode(z)
        acoustic, _ = self.quantizer.encode(residual)
        return torch.cat([semantic, acoustic], dim=1)

    def decode(self, codes: Tensor, state: State) -> Tensor:  # in-range codes [B, 10, n] -> [B, D, 4n]
        z = self.semantic_quantizer.decode(codes[:, :1]) + self.quantizer.decode(codes[:, 1:])
        return self.upsample(self.post_module(z, state), state)


# ----------------------------------------------------------------------------------------------
# Encoder / decoder
# ----------------------------------------------------------------------------------------------


class Encoder(Block):
    def __init__(self, cfg: CodecConfig):
        dim = cfg.encoder_dim
        layers = [CausalConv1d(1, dim, 7, weight_norm=True)]
        for stride, n_layer in zip(cfg.encoder_rates, cfg.encoder_transformer_layers):
            block = [ResidualUnit(dim, 1), ResidualUnit(dim, 3), ResidualUnit(dim, 9), Snake(dim),
                     CausalConv1d(dim, 2 * dim, 2 * stride, stride=stride, weight_norm=True)]
            dim *= 2
            if n_layer:
                block.append(WindowedTransformer(dim, cfg.encoder_transformer(dim, n_layer)))
            layers.append(Block(*block))
        layers += [Snake(dim), CausalConv1d(dim, cfg.latent_dim, 3, weight_norm=True)]
        super().__init__(*layers)


class Decoder(Stateful, nn.Module):
    def __init__(self, cfg: CodecConfig):
        super().__init__()
        dim = cfg.decoder_dim
        layers = [CausalConv1d(cfg.latent_dim, dim, 7, weight_norm=True)]
        for stride in cfg.decoder_rates:
            out = dim // 2
            layers.append(Block(
                Snake(dim),
                CausalConvTranspose1d(dim, out, 2 * stride, stride, weight_norm=True),
                ResidualUnit(out, 1), ResidualUnit(out, 3), ResidualUnit(out, 9),
            ))
            dim = out
        layers += [Snake(dim), CausalConv1d(dim, 1, 7, weight_norm=True), nn.Tanh()]
        self.model = Chain(*layers)

    def forward(self, z: Tensor, state: State) -> Tensor:  # [B, D, 4n] -> [B, 1, 2048n]
        return self.model(z, state)


# ----------------------------------------------------------------------------------------------
# Codec
# ----------------------------------------------------------------------------------------------


class Codec(nn.Module):
    """The S2-Pro audio codec. ``encode``: audio -> codes; ``decode``: codes -> audio.

    Both run chunk by chunk (``chunk_frames`` frames of 2048 samples, default
    ``DEFAULT_CHUNK_FRAMES``; ``None`` = one chunk) and give the whole-input result.
    For streaming, call ``encode_chunk`` / ``decode_chunk`` with one ``state = {}`` per stream.
    """

    def __init__(self, config: CodecConfig | None = None):
        super().__init__()
        self.config = config or CodecConfig()
        self.encoder = Encoder(self.config)
        self.quantizer = Quantizer(self.config)
        self.decoder = Decoder(self.config)

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    @property
    def frame_length(self) -> int:
        """Samples per code frame (2048)."""
        return self.config.frame_length

    @property
    def num_codebooks(self) -> int:
        return 1 + self.config.n_codebooks

    @property
    def device(self) -> torch.device:
        return self.decoder.model[0].conv.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.decoder.model[0].conv.weight.dtype

    @classmethod
    def from_file(cls, path, device="cpu", dtype=torch.float32) -> "Codec":
        """Load ``codec.pth`` (a file, or a folder holding it) and ``codec_config.json`` beside it."""
        path = Path(path)
        if path.is_dir():
            path = path / CHECKPOINT_NAME
        config_path = path.with_name(CONFIG_NAME)
        config = CodecConfig.from_json(config_path) if config_path.is_file() else CodecConfig()
        return cls.from_state_dict(read_checkpoint(path), config, device, dtype, name=str(path))

    @classmethod
    def from_state_dict(cls, state_dict: dict, config: CodecConfig | None = None, device="cpu",
                        dtype=torch.float32, name: str = "state dict") -> "Codec":
        """Build from a checkpoint-style state dict (either weight-norm style, or folded weights).

        Shapes in the state dict decide the architecture; ``config`` supplies the rest.
        """
        weights = fold_weight_norm(normalize_keys(state_dict))
        with torch.device("meta"):
            codec = cls(infer_config(weights, config or CodecConfig()))
        _check_keys(codec, weights, name)
        codec.load_state_dict(weights, strict=True, assign=True)
        return codec.to(device=device, dtype=dtype).eval().requires_grad_(False)

    def checkpoint_shapes(self) -> dict[str, tuple]:
        """Key -> shape as stored in the real ``codec.pth`` (weight norm unfolded into g/v)."""
        shapes = {k: tuple(v.shape) for k, v in self.state_dict().items()}
        for name, module in self.named_modules():
            keys = getattr(module, "weight_norm_keys", None)
            if keys:
                weight = shapes.pop(f"{name}.weight")
                shapes[f"{name}.{keys[0]}"] = (weight[0],) + (1,) * (len(weight) - 1)
                shapes[f"{name}.{keys[1]}"] = weight
        return shapes

    def clamp_codes(self, codes: Tensor) -> Tensor:
        """New tensor with row 0 <= semantic_size-1 and rows 1.. <= codebook_size-1 (the reference
        clamps the caller's tensor in place; we never modify it)."""
        if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
            raise ValueError(f"codes must be an integer tensor, got {codes.dtype}")
        if codes.ndim not in (2, 3) or codes.shape[-2] != self.num_codebooks or codes.shape[-1] == 0:
            raise ValueError(f"codes must be shaped [{self.num_codebooks}, n] or "
                             f"[B, {self.num_codebooks}, n] with n >= 1, got {list(codes.shape)}")
        if bool((codes < 0).any()):
            raise ValueError("codes must be non-negative")
        limits = torch.full((self.num_codebooks, 1), self.config.codebook_size - 1, device=codes.device)
        limits[0] = self.config.semantic_codebook_size - 1
        return torch.minimum(codes.long(), limits)

    @torch.no_grad()
    def encode(self, audio: Tensor, chunk_frames: int | None = DEFAULT_CHUNK_FRAMES) -> Tensor:
        """audio [T], [B, T] or [B, 1, T] at ``sample_rate`` -> codes [B, 10, ceil(T / 2048)]."""
        if audio.ndim == 1:
            audio = audio[None]
        if audio.ndim == 2:
            audio = audio[:, None]
        if not audio.dtype.is_floating_point:
            raise ValueError(f"audio must be float samples in [-1, 1], got {audio.dtype} "
                             f"(use fish_core.audio.prepare_audio to convert PCM)")
        if audio.ndim != 3 or audio.shape[1] != 1 or audio.shape[-1] == 0:
            raise ValueError(f"audio must be mono, shaped [T], [B, T] or [B, 1, T] with T >= 1, got "
                             f"{list(audio.shape)} (use fish_core.audio.prepare_audio to downmix)")
        frames = -(-audio.shape[-1] // self.frame_length)
        audio = audio.to(self.device, self.dtype)
        audio = F.pad(audio, (0, frames * self.frame_length - audio.shape[-1]))
        state, step = {}, chunk_frames or frames
        chunks = [self.encode_chunk(audio[..., i * self.frame_length:(i + step) * self.frame_length], state)
                  for i in range(0, frames, step)]
        return torch.cat(chunks, dim=-1)

    @torch.no_grad()
    def encode_chunk(self, audio: Tensor, state: State) -> Tensor:
        """One chunk of a stream: audio [B, 1, k * 2048] -> codes [B, 10, k]."""
        if audio.shape[-1] == 0 or audio.shape[-1] % self.frame_length:
            raise ValueError(f"a stream chunk must be a whole number of {self.frame_length}-sample "
                             f"frames, got {audio.shape[-1]} samples")
        return self.quantizer.encode(self.encoder(audio, state), state)

    @torch.no_grad()
    def decode(self, codes: Tensor, chunk_frames: int | None = DEFAULT_CHUNK_FRAMES) -> Tensor:
        """codes [10, n] or [B, 10, n] -> float32 audio [B, 1, n * 2048]. Out-of-range codes are
        clamped on a copy; the caller's tensor is never modified."""
        codes = self.clamp_codes(codes)  # validates before any work
        codes = codes[None] if codes.ndim == 2 else codes
        state, step = {}, chunk_frames or codes.shape[-1]
        chunks = [self._decode_clamped(codes[..., i:i + step], state)
                  for i in range(0, codes.shape[-1], step)]
        return torch.cat(chunks, dim=-1)

    @torch.no_grad()
    def decode_chunk(self, codes: Tensor, state: State) -> Tensor:
        """One chunk of a stream: codes [B, 10, k] -> float32 audio [B, 1, k * 2048]."""
        return self._decode_clamped(self.clamp_codes(codes), state)

    def _decode_clamped(self, codes: Tensor, state: State) -> Tensor:
        z = self.quantizer.decode(codes.to(self.device), state)
        return self.decoder(z, state).float()


# ----------------------------------------------------------------------------------------------
# Checkpoint handling
# ----------------------------------------------------------------------------------------------


def read_checkpoint(path) -> dict:
    """torch.load with ``weights_only=True`` only: a pickle that carries code is refused."""
    path = Path(path)
    if not path.is_file():
        raise CodecLoadError(f"codec checkpoint not found: {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        detail = next((line for line in lines if "Unsupported" in line or "allowed global" in line),
                      lines[0] if lines else "")
        raise CodecLoadError(f"refusing to load {path}: torch.load(weights_only=True) rejected it. "
                             f"It is corrupt, or it holds pickled objects other than tensors, which "
                             f"could run code. Detail: {detail}") from err
    except (RuntimeError, OSError, EOFError, ValueError) as err:
        raise CodecLoadError(f"cannot read codec checkpoint {path}: {err}") from err


def normalize_keys(obj) -> dict:
    """Unwrap ``{"state_dict": ...}`` and keep only ``generator.*`` (prefix stripped) when present,
    as the reference does for training checkpoints."""
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise CodecLoadError(f"codec checkpoint must hold a state dict, got {type(obj).__name__}")
    if any(k.startswith("generator.") for k in obj):
        obj = {k[len("generator."):]: v for k, v in obj.items() if k.startswith("generator.")}
    bad = [k for k, v in obj.items() if not isinstance(v, Tensor)]
    if bad:
        raise CodecLoadError(f"codec checkpoint has non-tensor entries: {bad[:10]}")
    return obj


def fold_weight_norm(state_dict: dict) -> dict:
    """Replace every (g, v) pair of either style with ``weight = g * v / ||v||`` (norm over all dims
    but 0), computed once in fp32. Unpaired halves are left for the key check to report."""
    out = dict(state_dict)
    for g_suffix, v_suffix in (WN_PARAMETRIZATIONS, WN_LEGACY):
        for key in [k for k in state_dict if k.endswith("." + g_suffix)]:
            prefix = key[: -len(g_suffix)]
            if prefix + v_suffix in state_dict:
                g, v = out.pop(key).float(), out.pop(prefix + v_suffix).float()
                out[prefix + "weight"] = torch._weight_norm(v, g, 0)
    return out


def infer_config(weights: dict, base: CodecConfig) -> CodecConfig:
    """Channel counts, strides, layer counts and codebook sizes read from (folded) weight shapes."""

    def shape(key):
        return tuple(weights[key].shape) if key in weights else None

    def count(prefix):  # number of consecutive indices i with some key starting prefix + "i."
        i = 0
        while any(k.startswith(f"{prefix}{i}.") for k in weights):
            i += 1
        return i

    out = {}
    if shape("encoder.block.0.conv.weight"):
        out["encoder_dim"] = shape("encoder.block.0.conv.weight")[0]
    n_enc = count("encoder.block.") - 3  # first conv, blocks, Snake, last conv
    if n_enc > 0:
        kernels = [shape(f"encoder.block.{i}.block.4.conv.weight") for i in range(1, n_enc + 1)]
        if all(kernels):
            out["encoder_rates"] = tuple(k[-1] // 2 for k in kernels)
            out["encoder_transformer_layers"] = tuple(
                count(f"encoder.block.{i}.block.5.layers.") for i in range(1, n_enc + 1))
        if shape(f"encoder.block.{n_enc + 2}.conv.weight"):
            out["latent_dim"] = shape(f"encoder.block.{n_enc + 2}.conv.weight")[0]
    if shape("decoder.model.0.conv.weight"):
        out["decoder_dim"] = shape("decoder.model.0.conv.weight")[0]
    kernels = [shape(f"decoder.model.{i}.block.1.conv.weight")
               for i in range(1, count("decoder.model.") - 2)]
    if kernels and all(kernels):
        out["decoder_rates"] = tuple(k[-1] // 2 for k in kernels)
    kernels = [shape(f"quantizer.downsample.{i}.0.conv.weight")
               for i in range(count("quantizer.downsample."))]
    if kernels and all(kernels):
        out["downsample_factors"] = tuple(k[-1] for k in kernels)

    n_res = count("quantizer.quantizer.quantizers.")
    book = shape("quantizer.quantizer.quantizers.0.codebook.weight")
    semantic = shape("quantizer.semantic_quantizer.quantizers.0.codebook.weight")
    if n_res and book:
        out.update(n_codebooks=n_res, codebook_size=book[0], codebook_dim=book[1])
    if semantic:
        out["semantic_codebook_size"] = semantic[0]

    q = base.quantizer_transformer
    prefix = "quantizer.pre_module.layers."
    wo, w1 = shape(prefix + "0.attention.wo.weight"), shape(prefix + "0.feed_forward.w1.weight")
    if wo and w1:
        q = replace(q, n_layer=count(prefix), n_head=wo[1] // q.head_dim, intermediate_size=w1[0])
    return replace(base, quantizer_transformer=q, **out)


def _check_keys(codec: Codec, weights: dict, name: str) -> None:
    expected = {k: tuple(v.shape) for k, v in codec.state_dict().items()}
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    mismatched = sorted(f"{k}: checkpoint {tuple(weights[k].shape)} vs model {expected[k]}"
                        for k in set(expected) & set(weights) if tuple(weights[k].shape) != expected[k])
    if missing or unexpected or mismatched:
        def listing(title, items):
            shown = "\n    ".join(items[:20]) + (f"\n    ... and {len(items) - 20} more" if len(items) > 20 else "")
            return f"\n  {title} ({len(items)}):\n    {shown}" if items else ""

        raise CodecLoadError(
            f"{name} does not match the codec architecture (inferred: {asdict(codec.config)})."
            f" Weight-normed `.weight` keys may be stored as {WN_PARAMETRIZATIONS} or {WN_LEGACY} pairs."
            + listing("missing keys", missing) + listing("unexpected keys", unexpected)
            + listing("shape mismatches", mismatched))


def build_codec(config: CodecConfig | None = None, device="meta") -> Codec:
    """A codec from config alone (default: the real S2-Pro size on the meta device, no memory)."""
    with torch.device(device):
        return Codec(config).eval().requires_grad_(False)


# ----------------------------------------------------------------------------------------------
# File-level helpers for the CLI
# ----------------------------------------------------------------------------------------------


def encode_file(codec: Codec, path, *, max_seconds: float = MAX_SECONDS,
                chunk_frames: int | None = DEFAULT_CHUNK_FRAMES) -> Tensor:
    """Audio file -> codes [num_codebooks, n] (int64, CPU). Raises AudioError for unusable audio."""
    wave = load_audio(path, target_sr=codec.sample_rate, max_seconds=max_seconds)
    return codec.encode(wave, chunk_frames=chunk_frames)[0].cpu()


def decode_to_file(codec: Codec, codes: Tensor, path, *, subtype: str | None = None,
                   chunk_frames: int | None = DEFAULT_CHUNK_FRAMES) -> Path:
    """Codes [num_codebooks, n] -> audio file (.wav/.flac, 16-bit PCM by default). Returns the path."""
    if codes.ndim != 2:
        raise ValueError(f"codes must be shaped [{codec.num_codebooks}, n], got {list(codes.shape)}")
    wave = codec.decode(codes, chunk_frames=chunk_frames)[0]
    return save_audio(path, wave.cpu(), codec.sample_rate, subtype=subtype)
