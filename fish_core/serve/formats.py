"""Audio response formats: wav and pcm (16-bit, streamable as they are made: ``StreamEncoder`` and
the bytes themselves come from ``fish_core.audio.wav``), flac, mp3 and opus (whole responses,
where the installed libsndfile can write them)."""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf
import torch

from ..audio.wav import STREAMABLE, StreamEncoder, pcm16, wav_header

CONTENT_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac",
                 "mp3": "audio/mpeg", "opus": "audio/ogg"}
OPUS_RATE = 48000  # libsndfile's Opus encoder takes 8/12/16/24/48 kHz only


def writable() -> list[str]:
    """The formats this installation can produce."""
    found = sf.available_formats()
    can = {"wav": True, "pcm": True, "flac": "FLAC" in found, "mp3": "MP3" in found,
           "opus": "OGG" in found and "OPUS" in sf.available_subtypes("OGG")}
    return [name for name, ok in can.items() if ok]


def encode(wave: torch.Tensor, sample_rate: int, fmt: str) -> bytes:
    """A whole waveform ``[T]`` as a file in ``fmt``."""
    if fmt == "pcm":
        return pcm16(wave)
    if fmt == "wav":
        return wav_header(sample_rate, wave.shape[0]) + pcm16(wave)
    x = np.clip(wave.detach().cpu().numpy().astype(np.float32), -1.0, 1.0)
    out = io.BytesIO()
    if fmt == "flac":
        sf.write(out, x, sample_rate, format="FLAC", subtype="PCM_16")
    elif fmt == "mp3":
        sf.write(out, x, sample_rate, format="MP3", subtype="MPEG_LAYER_III")
    elif fmt == "opus":
        import soxr

        sf.write(out, soxr.resample(x, sample_rate, OPUS_RATE, quality="HQ"), OPUS_RATE,
                 format="OGG", subtype="OPUS")
    else:
        raise ValueError(f"unknown audio format {fmt!r}")
    return out.getvalue()


__all__ = ["CONTENT_TYPES", "STREAMABLE", "OPUS_RATE", "StreamEncoder", "encode", "pcm16",
           "writable"]
