"""Audio response formats: wav and pcm (16-bit, streamable as they are made), flac, mp3 and opus
(whole responses, where the installed libsndfile can write them)."""

from __future__ import annotations

import io
import struct

import numpy as np
import soundfile as sf
import torch

CONTENT_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac",
                 "mp3": "audio/mpeg", "opus": "audio/ogg"}
STREAMABLE = ("wav", "pcm")
OPUS_RATE = 48000  # libsndfile's Opus encoder takes 8/12/16/24/48 kHz only
UNKNOWN_SIZE = 0xFFFFFFFF  # RIFF sizes of a stream whose length is not known yet


def writable() -> list[str]:
    """The formats this installation can produce."""
    found = sf.available_formats()
    can = {"wav": True, "pcm": True, "flac": "FLAC" in found, "mp3": "MP3" in found,
           "opus": "OGG" in found and "OPUS" in sf.available_subtypes("OGG")}
    return [name for name, ok in can.items() if ok]


def pcm16(wave: torch.Tensor) -> bytes:
    """float32 ``[T]`` → little-endian signed 16-bit samples, converted by libsndfile as
    ``fish_core.audio.files.save_audio`` converts them (sample by sample, so chunks concatenate to
    the whole)."""
    x = np.clip(wave.detach().cpu().numpy().astype(np.float32), -1.0, 1.0)
    out = io.BytesIO()
    sf.write(out, x, 44100, format="RAW", subtype="PCM_16", endian="LITTLE")
    return out.getvalue()


def wav_header(sample_rate: int, samples: int | None = None) -> bytes:
    """The 44-byte header of a mono 16-bit WAV; ``samples=None`` for a stream of unknown length."""
    data = UNKNOWN_SIZE if samples is None else 2 * samples
    riff = UNKNOWN_SIZE if samples is None else 36 + data
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, 2 * sample_rate, 2, 16)
            + b"data" + struct.pack("<I", data))


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


class StreamEncoder:
    """Chunks of one stream → bytes: a WAV header (unknown length) first, then 16-bit PCM."""

    def __init__(self, fmt: str, sample_rate: int):
        if fmt not in STREAMABLE:
            raise ValueError(f"only {', '.join(STREAMABLE)} can be streamed, got {fmt!r}")
        self.header = wav_header(sample_rate) if fmt == "wav" else b""

    def __call__(self, chunk: torch.Tensor) -> bytes:
        out, self.header = self.header + pcm16(chunk), b""
        return out
