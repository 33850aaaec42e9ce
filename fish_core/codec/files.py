"""Audio files in and out of the codec (for the CLI): soundfile and soxr are needed only here,
through ``audio``."""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from ..audio.files import MAX_SECONDS, load_audio, save_audio
from .model import Codec


def encode_file(codec: Codec, path, *, max_seconds: float = MAX_SECONDS,
                chunk_frames: int | str | None = "auto") -> Tensor:
    """Audio file -> codes [num_codebooks, n] (int64, CPU). Raises AudioError for unusable audio."""
    wave = load_audio(path, target_sr=codec.sample_rate, max_seconds=max_seconds)
    return codec.encode(wave, chunk_frames=chunk_frames)[0].cpu()


def decode_to_file(codec: Codec, codes: Tensor, path, *, subtype: str | None = None,
                   chunk_frames: int | str | None = "auto") -> Path:
    """Codes [num_codebooks, n] -> audio file (.wav/.flac, 16-bit PCM by default). Returns the
    path."""
    if codes.ndim != 2:
        raise ValueError(f"codes must be shaped [{codec.num_codebooks}, n], "
                         f"got {list(codes.shape)}")
    wave = codec.decode(codes, chunk_frames=chunk_frames)[0]
    return save_audio(path, wave.cpu(), codec.sample_rate, subtype=subtype)
