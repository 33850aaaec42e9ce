"""A clip made ready for Qwen3-ASR: mono 16 kHz float32 in [-1, 1], and cut into pieces the
model can take where the official package cuts them (golden/units/split_audio.json,
golden/units/normalize_audio.safetensors).

A clip longer than the limit (20 minutes for a transcript, 3 minutes when word times are asked
for: the aligner's limit) is cut near every multiple of the limit, at the quietest point within
``search_seconds`` of it: the window of ``window_ms`` with the least total magnitude, and in it
the quietest sample. The pieces put back together are the clip, sample for sample; a piece
shorter than half a second is padded with silence at its end (the model's shortest input).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SAMPLE_RATE = 16_000
MAX_ASR_SECONDS = 1200.0  # one piece for a transcript
MAX_ALIGN_SECONDS = 180.0  # one piece when word times are asked for
MIN_SECONDS = 0.5  # shorter pieces are padded with silence
SEARCH_SECONDS = 5.0  # how far from the limit a cut may move
WINDOW_MS = 100.0  # the stretch whose quiet is measured


@dataclass(frozen=True)
class Piece:
    """One piece of a clip: its samples and where it starts in the clip, in seconds."""
    wave: np.ndarray
    offset: float


def to_mono(audio: np.ndarray) -> np.ndarray:
    """1-D audio as it is; 2-D as channels × samples or samples × channels (at most 8 channels
    lying along the shorter axis), averaged over the channels."""
    if audio.ndim == 1:
        return audio
    if audio.ndim != 2:
        raise ValueError(f"audio has {audio.ndim} dimensions; give samples or channels × samples")
    channels_first = audio.shape[0] <= 8 and audio.shape[1] > audio.shape[0]
    frames = audio.T if channels_first else audio
    return np.mean(frames, axis=-1).astype(np.float32)


def in_range(audio: np.ndarray) -> np.ndarray:
    """float32 within [-1, 1]: audio peaking above 1 (integer samples, a hot mix) is scaled down
    by its peak, then everything is clipped."""
    audio = audio.astype(np.float32)
    if audio.size == 0:
        return audio
    peak = float(np.max(np.abs(audio)))
    if peak == 0.0:
        return audio
    if peak > 1.0:
        audio = audio / peak
    return np.clip(audio, -1.0, 1.0)


def prepare(audio, sample_rate: int) -> np.ndarray:
    """Any clip (array-like, mono or 2-D, any rate) → mono 16 kHz float32 in [-1, 1]."""
    mono = to_mono(np.asarray(audio))
    if int(sample_rate) != SAMPLE_RATE:
        from ..audio.files import import_soxr
        mono = import_soxr().resample(np.asarray(mono, dtype=np.float32), int(sample_rate),
                                      SAMPLE_RATE, quality="HQ").astype(np.float32)
    return in_range(mono)


def _quietest(wave: np.ndarray, lo: int, hi: int, window: int) -> int:
    """The quietest sample of the quietest ``window`` samples in ``wave[lo:hi]``."""
    magnitude = np.abs(wave[lo:hi])
    loudness = np.convolve(magnitude, np.ones(window, dtype=np.float32), mode="valid")
    first = int(np.argmin(loudness))
    return lo + first + int(np.argmin(magnitude[first:first + window]))


def split(wave: np.ndarray, sample_rate: int = SAMPLE_RATE, max_seconds: float = MAX_ASR_SECONDS,
          search_seconds: float = SEARCH_SECONDS, window_ms: float = WINDOW_MS,
          min_seconds: float = MIN_SECONDS) -> list[Piece]:
    """``wave`` (mono) cut into pieces of at most about ``max_seconds`` at quiet points."""
    wave = np.asarray(wave, dtype=np.float32)
    total = int(wave.shape[0])
    if total / float(sample_rate) <= max_seconds:
        cuts = [(wave, 0.0)]
    else:
        longest = int(max_seconds * sample_rate)
        reach = int(search_seconds * sample_rate)
        window = max(4, int(window_ms / 1000.0 * sample_rate))
        cuts, start, offset = [], 0, 0.0
        while total - start > longest:
            aim = start + longest
            lo, hi = max(start, aim - reach), min(total, aim + reach)
            cut = aim if hi - lo <= window else _quietest(wave, lo, hi, window)
            cut = min(max(cut, start + 1), total)
            cuts.append((wave[start:cut], offset))
            offset += (cut - start) / float(sample_rate)
            start = cut
        cuts.append((wave[start:total], offset))
    shortest = int(min_seconds * sample_rate)
    return [Piece(np.pad(w, (0, shortest - w.shape[0])) if w.shape[0] < shortest else w, off)
            for w, off in cuts]
