"""Fish Audio S2-Pro codec (``codec.pth``): a causal, modified DAC with a semantic + residual RVQ.

    audio [B, 1, T] @ 44.1 kHz
      -> Encoder: conv k7, 4 x (3 residual units, Snake, strided conv), windowed transformer,
         Snake, conv k3
      -> z [B, D, T/512]
      -> Quantizer.encode: 2 x (conv k2 s2, ConvNeXt) -> pre transformer
         -> 1 semantic VQ + 9 residual VQ
      -> codes [B, 10, T/2048]
    codes -> Quantizer.decode: VQ lookups -> post transformer
         -> 2 x (transposed conv k2 s2, ConvNeXt)
      -> Decoder: conv k7, 4 x (Snake, transposed conv, 3 residual units), Snake, conv k7, tanh
      -> audio [B, 1, n * 2048]

Every layer is causal (left-padded convolutions, causal window-limited attention), so long inputs
are processed chunk by chunk with a ``state`` dict that carries each layer's exact left context
between chunks: the last ``k - stride`` input samples of every conv, the last ``window - 1``
keys/values of every attention layer and each transformer's position counter. A chunked run
therefore computes the same function as a whole-input run while its memory depends only on the
chunk size.

Modules: ``codec_config`` (hyper-parameters, JSON), ``codec_layers`` (causal convs),
``codec_transformer`` (windowed attention), ``codec_quantizer`` (RVQ), this file (encoder, decoder,
``Codec``), ``codec_checkpoint`` (reading ``codec.pth``), ``codec_files`` (audio files).
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..params import CHUNK_FRAMES, FIRST_FRAMES
from .checkpoint import (fold_weight_norm, infer_config, load_weights, normalize_keys,
                         read_checkpoint)
from .config import CONFIG_NAME, CodecConfig, CodecLoadError
from .graph import FirstChunkGraphs
from .layers import (Block, CausalConv1d, CausalConvTranspose1d, Chain, ResidualUnit, Snake,
                     State, Stateful, cudnn_flag)
from .quantizer import Quantizer
from .snake import snake
from .transformer import WindowedTransformer

CHECKPOINT_NAME = "codec.pth"
# Frames per chunk when encode/decode chunk automatically (``chunk_frames="auto"``). CPU: ~1.5 s
# of audio, ~1 GB of fp32 activations for the real decoder, no slower than larger chunks
# (bench/bench_codec.py). GPU: ~6 s, ~2 GB of fp16 activations for the real decoder; larger
# chunks keep a big GPU busy (bench/gpu_first.py's codec stage times both).
DEFAULT_CHUNK_FRAMES = 32
GPU_CHUNK_FRAMES = 128


def chunk_frames_for(device: torch.device) -> int:
    """Frames per chunk of an automatically chunked encode/decode on ``device``."""
    return DEFAULT_CHUNK_FRAMES if torch.device(device).type == "cpu" else GPU_CHUNK_FRAMES


def _stream_lengths() -> frozenset[int]:
    """Chunk lengths (frames) a stream and an automatic encode/decode use: ``FIRST_FRAMES``
    doubling up to ``CHUNK_FRAMES`` (``local.driver.ChunkDecoder``'s rule), and the automatic
    chunks."""
    lengths, n = {CHUNK_FRAMES, DEFAULT_CHUNK_FRAMES, GPU_CHUNK_FRAMES}, FIRST_FRAMES
    while n < CHUNK_FRAMES:
        lengths.add(n)
        n *= 2
    return frozenset(lengths)


# cuDNN benchmarks a convolution's algorithms once per shape (the pass costs several runs of
# each candidate): it pays for shapes that recur, the lengths above, not for a text batch's
# ragged last chunk (its own length each time: cuDNN's heuristic choice serves it).
BENCHMARKED_FRAMES = _stream_lengths()


def cudnn_benchmark_pays(device: torch.device, frames: int) -> bool:
    """Whether a chunk of ``frames`` frames on ``device`` runs with ``cudnn.benchmark``: on CUDA
    for the recurring lengths, unless the caller asked for reproducible algorithms
    (``cudnn.deterministic``, ``torch.use_deterministic_algorithms``: benchmarking may choose
    another algorithm on another run)."""
    return (torch.device(device).type == "cuda" and frames in BENCHMARKED_FRAMES
            and not torch.backends.cudnn.deterministic
            and not torch.are_deterministic_algorithms_enabled())


def convolution_flags(device: torch.device, frames: int):
    """``cudnn.benchmark`` on around one codec call where it pays (``cudnn_benchmark_pays``),
    back as it was after, no other flag touched (``layers.cudnn_flag``): a ComfyUI pack leaves
    the user's global torch settings alone."""
    return cudnn_flag("benchmark", True) if cudnn_benchmark_pays(device, frames) else nullcontext()


class Encoder(Block):
    def __init__(self, config: CodecConfig):
        dim = config.encoder_dim
        layers = [CausalConv1d(1, dim, 7, weight_norm=True)]
        for stride, n_layer in zip(config.encoder_rates, config.encoder_transformer_layers):
            block = [ResidualUnit(dim, 1), ResidualUnit(dim, 3), ResidualUnit(dim, 9), Snake(dim),
                     CausalConv1d(dim, 2 * dim, 2 * stride, stride=stride, weight_norm=True)]
            dim *= 2
            if n_layer:
                block.append(WindowedTransformer(dim, config.encoder_transformer(dim, n_layer)))
            layers.append(Block(*block))
        layers += [Snake(dim), CausalConv1d(dim, config.latent_dim, 3, weight_norm=True)]
        super().__init__(*layers)


class Decoder(Stateful, nn.Module):
    def __init__(self, config: CodecConfig):
        super().__init__()
        dim = config.decoder_dim
        layers = [CausalConv1d(config.latent_dim, dim, 7, weight_norm=True)]
        for stride in config.decoder_rates:
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

    Both run chunk by chunk (``chunk_frames`` frames of 2048 samples; ``"auto"``:
    ``chunk_frames_for(device)``; ``None`` = one chunk) and give the whole-input result.
    For streaming, call ``encode_chunk`` / ``decode_chunk`` with one ``state = {}`` per stream.
    """

    def __init__(self, config: CodecConfig | None = None):
        super().__init__()
        self.config = config or CodecConfig()
        self.encoder = Encoder(self.config)
        self.quantizer = Quantizer(self.config)
        self.decoder = Decoder(self.config)
        self.first_chunk_graphs = FirstChunkGraphs(self)

    def _apply(self, fn, *args, **kwargs):
        self.first_chunk_graphs.clear()  # the graphs read the weights being cast or moved
        return super()._apply(fn, *args, **kwargs)

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
        """The decode precision (``decode_dtype``)."""
        return self.decode_dtype

    @property
    def decode_dtype(self) -> torch.dtype:
        """Precision of the decode path (post transformer, upsample, decoder)."""
        return self.decoder.model[0].conv.weight.dtype

    @property
    def encode_dtype(self) -> torch.dtype:
        """Precision of the encode path (encoder, downsample, pre transformer, VQ codebooks)."""
        return self.encoder.block[0].conv.weight.dtype

    def set_precision(self, encode: torch.dtype | None = None,
                      decode: torch.dtype | None = None) -> "Codec":
        """Cast the encode path to ``encode`` and the decode path to ``decode`` (None: keep).

        The two paths share no weights but the VQ codebooks, which run with the encode path, so
        each can have its own precision: on a GPU, decode in fp16 (fast, within a tested
        tolerance of fp32) and encode in fp32 (codes exactly as fp32 gives them: one flipped
        nearest-codebook choice changes the voice's codes). Returns ``self``."""
        quantizer = self.quantizer
        groups = {encode: (self.encoder, quantizer.downsample, quantizer.pre_module,
                           quantizer.semantic_quantizer, quantizer.quantizer),
                  decode: (quantizer.post_module, quantizer.upsample, self.decoder)}
        for dtype in (encode, decode):
            if dtype is not None and not dtype.is_floating_point:
                raise ValueError(f"codec precision must be a float dtype, got {dtype}")
        for dtype, modules in groups.items():
            for module in modules if dtype is not None else ():
                module.to(dtype)
        self.first_chunk_graphs.clear()
        return self

    def compile_activations(self) -> "Codec":
        """Run every Snake activation as one kernel compiled by ``torch.compile``. On CUDA a
        Snake is already one kernel without it (``snake.py``'s Triton op, no compile wait); on
        the CPU eager runs it as four passes over the activations, which this fuses (the
        convolutions are cuDNN's/oneDNN's either way).
        Shapes are dynamic: chunks of any length share the compiled kernel (one per dtype). The
        result is within rounding of eager (the fused kernel's sin and products round in a
        different order). The first call pays the compile. Returns ``self``."""
        compiled = torch.compile(snake, dynamic=True)
        for module in self.modules():
            if isinstance(module, Snake):
                module.compiled = compiled
        return self

    @classmethod
    def from_file(cls, path, device="cpu", dtype=torch.float32,
                  decode_dtype: torch.dtype | None = None) -> "Codec":
        """Load ``codec.pth`` (a file, or a folder holding it) and ``codec_config.json`` beside
        it, in ``dtype`` (the decode path in ``decode_dtype`` if given: ``set_precision``)."""
        path = Path(path)
        if path.is_dir():
            path = path / CHECKPOINT_NAME
        config_path = path.with_name(CONFIG_NAME)
        config = CodecConfig.from_json(config_path) if config_path.is_file() else CodecConfig()
        codec = cls.from_state_dict(read_checkpoint(path), config, device, dtype, name=str(path))
        return codec.set_precision(decode=decode_dtype)

    @classmethod
    def from_state_dict(cls, state_dict: dict, config: CodecConfig | None = None, device="cpu",
                        dtype=torch.float32, name: str = "state dict") -> "Codec":
        """Build from a checkpoint-style state dict (either weight-norm style, or folded weights).

        Shapes in the state dict decide the architecture; ``config`` supplies the rest.
        """
        weights = fold_weight_norm(normalize_keys(state_dict))
        try:
            with torch.device("meta"):
                codec = cls(infer_config(weights, config or CodecConfig()))
        except CodecLoadError:
            raise
        except (ValueError, TypeError, IndexError, ZeroDivisionError, RuntimeError,
                AssertionError) as e:  # shapes no codec has (a damaged or crafted file)
            raise CodecLoadError(f"{name}: its weight shapes describe no codec "
                                 f"({type(e).__name__}: {str(e)[:200]})") from None
        load_weights(codec, weights, name, device, dtype)
        return codec.eval()

    def clamp_codes(self, codes: Tensor) -> Tensor:
        """New tensor with row 0 <= semantic_size-1 and rows 1.. <= codebook_size-1 (the reference
        clamps the caller's tensor in place; we never modify it)."""
        if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
            raise ValueError(f"codes must be an integer tensor, got {codes.dtype}")
        n_books = self.num_codebooks
        if codes.ndim not in (2, 3) or codes.shape[-2] != n_books or codes.shape[-1] == 0:
            raise ValueError(f"codes must be shaped [{self.num_codebooks}, n] or "
                             f"[B, {self.num_codebooks}, n] with n >= 1, got {list(codes.shape)}")
        if bool((codes < 0).any()):
            raise ValueError("codes must be non-negative")
        limits = torch.full((n_books, 1), self.config.codebook_size - 1, device=codes.device)
        limits[0] = self.config.semantic_codebook_size - 1
        return torch.minimum(codes.long(), limits)

    @torch.no_grad()
    def encode(self, audio: Tensor, chunk_frames: int | str | None = "auto") -> Tensor:
        """audio [T], [B, T] or [B, 1, T] at ``sample_rate`` -> codes [B, 10, ceil(T / 2048)]."""
        if audio.ndim == 1:
            audio = audio[None]
        if audio.ndim == 2:
            audio = audio[:, None]
        if not audio.dtype.is_floating_point:
            raise ValueError(f"audio must be float samples in [-1, 1], got {audio.dtype} "
                             f"(use fish_core.audio.files.prepare_audio to convert PCM)")
        if audio.ndim != 3 or audio.shape[1] != 1 or audio.shape[-1] == 0:
            raise ValueError(f"audio must be mono, shaped [T], [B, T] or [B, 1, T] with T >= 1, "
                             f"got {list(audio.shape)} (use fish_core.audio.files.prepare_audio to "
                             "downmix)")
        frames = -(-audio.shape[-1] // self.frame_length)
        audio = audio.to(self.device, self.encode_dtype)
        audio = F.pad(audio, (0, frames * self.frame_length - audio.shape[-1]))
        state, step = {}, self._chunk(chunk_frames) or frames
        length = self.frame_length
        chunks = [self.encode_chunk(audio[..., i * length:(i + step) * length], state)
                  for i in range(0, frames, step)]
        return torch.cat(chunks, dim=-1)

    def _chunk(self, chunk_frames: int | str | None) -> int | None:
        return chunk_frames_for(self.device) if chunk_frames == "auto" else chunk_frames

    @torch.no_grad()
    def encode_chunk(self, audio: Tensor, state: State) -> Tensor:
        """One chunk of a stream: audio [B, 1, k * 2048] -> codes [B, 10, k]."""
        if audio.shape[-1] == 0 or audio.shape[-1] % self.frame_length:
            raise ValueError(f"a stream chunk must be a whole number of {self.frame_length}-sample "
                             f"frames, got {audio.shape[-1]} samples")
        with convolution_flags(self.device, audio.shape[-1] // self.frame_length):
            return self.quantizer.encode(self.encoder(audio.to(self.encode_dtype), state), state)

    @torch.no_grad()
    def decode(self, codes: Tensor, chunk_frames: int | str | None = "auto") -> Tensor:
        """codes [10, n] or [B, 10, n] -> float32 audio [B, 1, n * 2048]. Out-of-range codes are
        clamped on a copy; the caller's tensor is never modified."""
        codes = self.clamp_codes(codes)  # validates before any work
        codes = codes[None] if codes.ndim == 2 else codes
        state, step = {}, self._chunk(chunk_frames) or codes.shape[-1]
        chunks = [self._decode_clamped(codes[..., i:i + step], state)
                  for i in range(0, codes.shape[-1], step)]
        return torch.cat(chunks, dim=-1)

    @torch.no_grad()
    def decode_chunk(self, codes: Tensor, state: State) -> Tensor:
        """One chunk of a stream: codes [B, 10, k] -> float32 audio [B, 1, k * 2048]. On CUDA a
        stream's first chunk replays a CUDA graph (``graph.FirstChunkGraphs``)."""
        codes = self.clamp_codes(codes).to(self.device)
        if not state:
            with convolution_flags(self.device, codes.shape[-1]):
                audio = self.first_chunk_graphs.decode(codes, state)
            if audio is not None:
                return audio
        return self._decode_clamped(codes, state)

    def _decode_clamped(self, codes: Tensor, state: State) -> Tensor:
        with convolution_flags(self.device, codes.shape[-1]):
            return self.decode_state(codes.to(self.device), state)

    def decode_state(self, codes: Tensor, state: State) -> Tensor:
        """In-range codes [B, 10, k] on the device -> float32 audio, ``state`` carried."""
        z = self.quantizer.decode(codes, state)
        return self.decoder(z, state).float()


def build_codec(config: CodecConfig | None = None, device="meta") -> Codec:
    """A codec from config alone (default: the real S2-Pro size on the meta device, no memory)."""
    with torch.device(device):
        return Codec(config).eval().requires_grad_(False)

