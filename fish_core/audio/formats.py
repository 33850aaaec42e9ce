"""Audio file formats, by name: wav and pcm (16-bit, streamable as they are made: ``StreamEncoder``
and the bytes themselves come from ``audio.wav``), flac, mp3 and opus (whole files, where the
installed libsndfile can write them). The HTTP service answers in these and the CLI writes them
(``-o speech.mp3``); soundfile and soxr are imported only when a format needs them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .atomic import write_bytes
from .files import AudioError, import_soundfile, import_soxr
from .wav import pcm16, wav_header

CONTENT_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac",
                 "mp3": "audio/mpeg", "opus": "audio/ogg"}
SUFFIXES = {".wav": "wav", ".flac": "flac", ".mp3": "mp3", ".opus": "opus", ".ogg": "opus",
            ".pcm": "pcm"}  # a file's suffix → its format
OPUS_RATE = 48000  # libsndfile's Opus encoder takes 8/12/16/24/48 kHz only
NEEDS = {"flac": "FLAC", "mp3": "MP3 (libsndfile 1.1 or later)",
         "opus": "OGG/Opus (libsndfile 1.0.29 or later)"}


def writable() -> list[str]:
    """The formats this installation can produce."""
    sf = import_soundfile()
    found = sf.available_formats()
    can = {"wav": True, "pcm": True, "flac": "FLAC" in found, "mp3": "MP3" in found,
           "opus": "OGG" in found and "OPUS" in sf.available_subtypes("OGG")}
    return [name for name, ok in can.items() if ok]


def format_of(path, field: str = "path") -> str:
    """The format a file name asks for (``speech.mp3`` → ``mp3``), checked against what this
    installation can write; an AudioError naming ``field`` otherwise."""
    suffix = Path(path).suffix.lower()
    fmt = SUFFIXES.get(suffix)
    if fmt is None:
        raise AudioError(f"{field}: {Path(path).name!r} must end in "
                         f"{', '.join(SUFFIXES)}")
    if fmt not in ("wav", "pcm") and fmt not in writable():
        raise AudioError(f"{field}: this installation cannot write {suffix} (its soundfile/"
                         f"libsndfile lacks {NEEDS[fmt]}); use .wav or .flac")
    return fmt


def encode(wave: torch.Tensor, sample_rate: int, fmt: str) -> bytes:
    """A whole waveform ``[T]`` as a file in ``fmt``."""
    if fmt == "pcm":
        return pcm16(wave)
    if fmt == "wav":
        return wav_header(sample_rate, wave.shape[0]) + pcm16(wave)
    if fmt not in NEEDS:
        raise ValueError(f"unknown audio format {fmt!r}")
    import io

    sf = import_soundfile()
    x = np.clip(wave.detach().cpu().numpy().astype(np.float32), -1.0, 1.0)
    out = io.BytesIO()
    if fmt == "flac":
        sf.write(out, x, sample_rate, format="FLAC", subtype="PCM_16")
    elif fmt == "mp3":
        sf.write(out, x, sample_rate, format="MP3", subtype="MPEG_LAYER_III")
    else:  # opus
        sf.write(out, import_soxr().resample(x, sample_rate, OPUS_RATE, quality="HQ"),
                 OPUS_RATE, format="OGG", subtype="OPUS")
    return out.getvalue()


def write(path, wave: torch.Tensor, sample_rate: int) -> Path:
    """``wave`` ``[T]`` written to ``path`` in the format its suffix names (parent folders are
    made), atomically (``atomic.write_file``: a failed write leaves the old file). Returns the
    path."""
    path = Path(path)
    return write_bytes(path, encode(wave, sample_rate, format_of(path)))
