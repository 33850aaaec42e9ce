"""Loudness: integrated loudness by ITU-R BS.1770-4 (pyloudnorm's meter), a gain to a target
in LUFS, held under a peak ceiling.

``Loudness(target, ceiling=-1.0, true_peak=True, per="mix")``: the target integrated loudness
(−16 podcasts, −23 broadcast (EBU R128), −14 streaming services), and the highest peak allowed
after the gain, as true peak (dBTP: BS.1770-4 Annex 2, 4× oversampled) or sample peak (dBFS).
A gain that would push a peak over the ceiling is lowered until it does not (no limiter: the
audio is never clipped or compressed), and the result says so (``Gain.held``). ``per`` is
what a whole result is normalised as: the ``mix``, each speaker ``track``, or each ``line``
(``speech.finishing``).

Streams cannot know the whole: ``StreamGain`` fixes the gain from the first text batch of at
least one measuring block (0.4 s) and keeps it (later samples past the ceiling are clamped to
it, as sample peak); ``WholeGain`` holds everything and normalises it at the end.

pyloudnorm (and scipy for the oversampling) are imported only when a loudness is asked for; a
missing one is a ``LoudnessError`` naming the pip command.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

DEFAULT_CEILING = -1.0
LOWEST, HIGHEST = -70.0, -5.0  # targets (LUFS) accepted
CEILINGS = (-20.0, 0.0)  # ceilings (dB) accepted
BLOCK_SECONDS = 0.4  # BS.1770's gating block: the shortest audio that has a loudness
PER = ("mix", "track", "line")
OVERSAMPLE = 4


class LoudnessError(ValueError):
    """A loudness setting out of range, or pyloudnorm missing."""


@dataclass(frozen=True)
class Loudness:
    target: float
    ceiling: float = DEFAULT_CEILING
    true_peak: bool = True
    per: str = "mix"

    def __post_init__(self):
        check_target(self.target)
        c = self.ceiling
        if (isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c)
                or not CEILINGS[0] <= c <= CEILINGS[1]):
            raise LoudnessError(f"ceiling must be a number of dB in {CEILINGS[0]:g} .. "
                                f"{CEILINGS[1]:g}, got {c!r}")
        if self.per not in PER:
            raise LoudnessError(f"loudness per must be one of {', '.join(PER)}, got {self.per!r}")

    @property
    def unit(self) -> str:
        return "dBTP" if self.true_peak else "dBFS"

    def as_dict(self) -> dict:
        return {"target": self.target, "ceiling": self.ceiling, "true_peak": self.true_peak,
                "per": self.per}


def check_target(value, field: str = "loudness") -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not LOWEST <= value <= HIGHEST):
        raise LoudnessError(f"{field} must be a target in LUFS from {LOWEST:g} to {HIGHEST:g} "
                            f"(e.g. -16 for podcasts, -23 for broadcast), got {value!r}")
    return float(value)


def as_loudness(value, field: str = "loudness") -> Loudness | None:
    """None, a ``Loudness``, or a target in LUFS."""
    if value is None or isinstance(value, Loudness):
        return value
    return Loudness(check_target(value, field))


def import_pyloudnorm():
    try:
        import pyloudnorm
    except ImportError:
        raise LoudnessError("loudness normalisation needs pyloudnorm: pip install pyloudnorm"
                            ) from None
    return pyloudnorm


def _numpy(wave) -> np.ndarray:
    if isinstance(wave, torch.Tensor):
        return wave.detach().to("cpu", torch.float64).numpy()
    return np.asarray(wave, dtype=np.float64)


def measure(wave, sample_rate: int) -> float | None:
    """Integrated loudness in LUFS (BS.1770-4, gated); None for audio shorter than one block
    or silent (below the −70 LUFS gate)."""
    data = _numpy(wave)
    if data.shape[-1] < round(BLOCK_SECONDS * sample_rate) or not np.any(data):
        return None
    meter = import_pyloudnorm().Meter(sample_rate)  # BS.1770-4 K-weighting and gating
    value = float(meter.integrated_loudness(data))
    return value if math.isfinite(value) else None


def peak_db(wave, sample_rate: int, true_peak: bool = True) -> float:
    """The highest peak in dB: sample peak (dBFS), or true peak (dBTP, 4× oversampled)."""
    data = _numpy(wave)
    if data.size == 0:
        return -math.inf
    if true_peak:
        import_pyloudnorm()  # brings scipy
        from scipy.signal import resample_poly

        data = resample_poly(data, OVERSAMPLE, 1)
    peak = float(np.max(np.abs(data)))
    return 20 * math.log10(peak) if peak > 0 else -math.inf


@dataclass(frozen=True)
class Gain:
    db: float  # applied
    measured: float | None  # LUFS before
    peak: float  # dB before (of the kind the ceiling uses)
    held: bool  # the ceiling lowered the gain

    @property
    def factor(self) -> float:
        return 10 ** (self.db / 20)


def gain_for(wave, sample_rate: int, loudness: Loudness) -> Gain:
    """The gain that brings ``wave`` to the target, lowered to keep its peak under the
    ceiling; 0 dB for audio without a loudness (too short or silent)."""
    measured = measure(wave, sample_rate)
    peak = peak_db(wave, sample_rate, loudness.true_peak)
    if measured is None:
        return Gain(0.0, None, peak, False)
    db = loudness.target - measured
    held = peak + db > loudness.ceiling
    if held:
        db = loudness.ceiling - peak
    return Gain(db, measured, peak, held)


def normalize(wave: torch.Tensor, sample_rate: int, loudness: Loudness) -> tuple[torch.Tensor,
                                                                                 Gain]:
    gain = gain_for(wave, sample_rate, loudness)
    return wave * gain.factor, gain


def report(wave: torch.Tensor, sample_rate: int, loudness: Loudness, gains: list[Gain]) -> dict:
    """What a finished result says about its loudness (the timeline JSON carries it)."""
    measured = measure(wave, sample_rate)
    return {**loudness.as_dict(),
            "measured": None if measured is None else round(measured, 2),
            "peak": round(peak_db(wave, sample_rate, loudness.true_peak), 2),
            "gains_db": [round(g.db, 2) for g in gains],
            "held_by_ceiling": any(g.held for g in gains)}


# ---------------------------------------------------------------- streams
OnChunk = Callable[[torch.Tensor, int], None]


class Passthrough:
    """A layout's output without loudness: chunks go straight to ``on_chunk``."""

    def __init__(self, on_chunk: OnChunk, sample_rate: int):
        self.on_chunk, self.sample_rate = on_chunk, sample_rate

    def __call__(self, samples: torch.Tensor) -> None:
        if samples.shape[0]:
            self.on_chunk(samples, self.sample_rate)

    def end_batch(self) -> None:
        pass

    def close(self) -> None:
        pass


class StreamGain(Passthrough):
    """Streamed loudness: chunks are held until a text batch ends with at least one block of
    audio held; the gain measured on that (``gain_for``) is then fixed for the whole stream.
    Later samples past the ceiling are clamped to it (a sample-peak ceiling)."""

    def __init__(self, on_chunk: OnChunk, sample_rate: int, loudness: Loudness):
        super().__init__(on_chunk, sample_rate)
        self.loudness = loudness
        self.held: list[torch.Tensor] = []
        self.gain: Gain | None = None
        self.limit = 10 ** (loudness.ceiling / 20)

    def __call__(self, samples: torch.Tensor) -> None:
        if self.gain is None:
            self.held.append(samples)
        else:
            super().__call__((samples * self.gain.factor).clamp(-self.limit, self.limit))

    def end_batch(self) -> None:
        if (self.gain is None and sum(c.shape[0] for c in self.held)
                >= round(BLOCK_SECONDS * self.sample_rate)):
            self.close()

    def close(self) -> None:
        if self.gain is None:
            held = torch.cat(self.held) if self.held else torch.zeros(0)
            self.gain, self.held = gain_for(held, self.sample_rate, self.loudness), []
            self(held)


class WholeGain(Passthrough):
    """Loudness of a whole answer given in chunks: everything is held and normalised at the
    end (the HTTP service's non-streamed answers)."""

    def __init__(self, on_chunk: OnChunk, sample_rate: int, loudness: Loudness):
        super().__init__(on_chunk, sample_rate)
        self.loudness = loudness
        self.held: list[torch.Tensor] = []
        self.gain: Gain | None = None

    def __call__(self, samples: torch.Tensor) -> None:
        self.held.append(samples)

    def close(self) -> None:
        if self.held:
            wave, self.gain = normalize(torch.cat(self.held), self.sample_rate, self.loudness)
            self.held = []
            super().__call__(wave)


def output(on_chunk: OnChunk, sample_rate: int, loudness: Loudness | None, whole: bool = False
           ) -> Passthrough:
    """Where a layout sends its samples: straight on, or through a stream's or a whole
    answer's loudness."""
    if loudness is None:
        return Passthrough(on_chunk, sample_rate)
    return (WholeGain if whole else StreamGain)(on_chunk, sample_rate, loudness)
