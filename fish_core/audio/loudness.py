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
it, as sample peak).

Finishing costs what the speech costs, not what the silence costs: silence is exact zeros, so
loudness and peak are computed on a ``Kept`` copy of the waveform (its sounding ranges with the
zeros around them that can still matter, float64) with pyloudnorm's K-weighting and BS.1770's
blocks and gates: the same value pyloudnorm gives on the whole waveform (tests compare them),
never a float64 copy of the whole. A track is measured as a ``Sparse`` waveform (the mix's
length, zero outside its parts) without building it.

pyloudnorm (and scipy for the oversampling) are imported only when a loudness is asked for; a
missing one is a ``LoudnessError`` naming the pip command.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ..params import FieldError, Rule

DEFAULT_CEILING = -1.0
LOWEST, HIGHEST = -70.0, -5.0  # targets (LUFS) accepted
CEILINGS = (-20.0, 0.0)  # ceilings (dB) accepted
BLOCK_SECONDS = 0.4  # BS.1770's gating block: the shortest audio that has a loudness
PER = ("mix", "track", "line")
OVERSAMPLE = 4


TARGET = Rule(LOWEST, HIGHEST)  # the one rule of a loudness target (every door, the docs)
CEILING = Rule(*CEILINGS)


class LoudnessError(FieldError):
    """A loudness setting out of its rule, or pyloudnorm missing (a ``RequestError``)."""

    FIELD = "loudness"


@dataclass(frozen=True)
class Loudness:
    target: float
    ceiling: float = DEFAULT_CEILING
    true_peak: bool = True
    per: str = "mix"

    def __post_init__(self):
        check_target(self.target)
        c = self.ceiling
        if not CEILING.holds(c):
            raise LoudnessError(f"ceiling must be a number of dB in {CEILINGS[0]:g} .. "
                                f"{CEILINGS[1]:g}, got {c!r}", "ceiling", c, CEILING)
        if self.per not in PER:
            raise LoudnessError(f"loudness per must be one of {', '.join(PER)}, got {self.per!r}",
                                "loudness_per", self.per)

    @property
    def unit(self) -> str:
        return "dBTP" if self.true_peak else "dBFS"

    def as_dict(self) -> dict:
        return {"target": self.target, "ceiling": self.ceiling, "true_peak": self.true_peak,
                "per": self.per}


def check_target(value, field: str = "loudness") -> float:
    if not TARGET.holds(value):
        raise LoudnessError(f"{field} must be a target in LUFS from {LOWEST:g} to {HIGHEST:g} "
                            f"(e.g. -16 for podcasts, -23 for broadcast), got {value!r}",
                            field, value, TARGET)
    return float(value)


def as_loudness(value, field: str = "loudness") -> Loudness | None:
    """None, a ``Loudness``, or a target in LUFS."""
    if value is None or isinstance(value, Loudness):
        return value
    return Loudness(check_target(value, field))


def gated_loudness(z: list[float]) -> float:
    """BS.1770-4's absolute (-70 LUFS) and relative (-10 LU) gates over block energies ``z``."""
    with np.errstate(divide="ignore"):
        loud = [-0.691 + 10.0 * np.log10(v) for v in z]
        gated = [v for v, lj in zip(z, loud) if lj >= -70.0]
        if not gated:
            return float("nan")
        relative = -0.691 + 10.0 * np.log10(np.mean(gated)) - 10.0
        gated = [v for v, lj in zip(z, loud) if lj > relative and lj > -70.0]
        mean = np.nan_to_num(np.mean(gated)) if gated else 0.0
        return float(-0.691 + 10.0 * np.log10(mean))


def import_pyloudnorm():
    try:
        import pyloudnorm
    except ImportError:
        raise LoudnessError("loudness normalisation needs pyloudnorm: pip install pyloudnorm"
                            ) from None
    return pyloudnorm


class Sparse:
    """Audio of ``length`` samples that is zero except ``parts`` (``(offset, samples)``, not
    overlapping): a speaker's track measured as its own file would be, without a copy of the
    mix's length."""

    def __init__(self, length: int, parts):
        self.length = int(length)
        self.parts = sorted(((int(o), p) for o, p in parts if p.shape[0]), key=lambda x: x[0])


# Silence is known exact zeros: a run of them is measured as far as it can matter and no
# further. After speech the K-weighting filter's tail is below 1e-50 within TAIL_SECONDS, so a
# gating block that lies in the silence past that (or before the next speech starts) has a
# loudness far under the -70 LUFS gate whatever its length: only the blocks within BLOCK_SECONDS
# + TAIL_SECONDS after speech and BLOCK_SECONDS before it are computed. A run shorter than that
# is kept whole.
TAIL_SECONDS = 0.5
WINDOW_SECONDS = 0.01  # zero runs are found in windows of this length
SCAN = 1 << 20  # samples looked at at once when finding them (a bounded temporary)
TRUE_PEAK_CHUNK = 1 << 18  # samples oversampled at once for the true peak
TRUE_PEAK_MARGIN = 64  # samples each side of a chunk (the resampling filter reaches 10)


class Kept:
    """What of a waveform loudness and peak need: the ranges ``[start, start + size)`` (its
    samples outside them are zeros far from any speech), their samples end to end as float64
    (``data``). Costs what the speech costs, not what the silence costs."""

    def __init__(self, wave, sample_rate: int):
        sparse = wave if isinstance(wave, Sparse) else Sparse(_length(wave), [(0, wave)])
        self.length, self.rate = sparse.length, sample_rate
        self.ranges = _kept_ranges(sparse, sample_rate)
        self.data = np.zeros(sum(n for _, n in self.ranges), dtype=np.float64)
        self.sounding = bool(self.ranges)
        self._copy_parts(sparse)

    def _copy_parts(self, sparse: Sparse) -> None:
        """The parts' samples that lie in the ranges into ``data``, end to end."""
        at, first = 0, 0
        for start, size in self.ranges:  # the parts' samples copied into each range
            while first < len(sparse.parts) and (sparse.parts[first][0]
                                                 + _length(sparse.parts[first][1]) <= start):
                first += 1  # parts wholly before this range (and every later one)
            for offset, part in sparse.parts[first:]:
                if offset >= start + size:
                    break
                lo, hi = max(start, offset), min(start + size, offset + _length(part))
                if hi > lo:  # cast to float64 as it is copied: no float64 copy of a part
                    self.data[at + lo - start:at + hi - start] = _array(part[lo - offset:
                                                                            hi - offset])
            at += size

    def integrated(self) -> float | None:
        """BS.1770-4 integrated loudness, as pyloudnorm's ``Meter.integrated_loudness`` computes
        it on the whole waveform: the same K-weighting, blocks, gates and sums (blocks that
        lie wholly in the dropped silence are the ones under the absolute gate)."""
        if self.length < round(BLOCK_SECONDS * self.rate) or not self.sounding:
            return None
        meter = import_pyloudnorm().Meter(self.rate)
        filters = getattr(meter, "_filters", None)
        if not isinstance(filters, dict):  # another pyloudnorm: its own meter, on everything
            value = float(meter.integrated_loudness(self.dense()))
            return value if math.isfinite(value) else None
        weighted = self.data
        for stage in filters.values():
            weighted = stage.apply_filter(weighted)
        z = self._block_energies(weighted, meter.block_size, 1.0 - meter.overlap)
        value = gated_loudness(z)
        return value if math.isfinite(value) else None

    def _block_energies(self, weighted, t_g: float, step: float) -> list[float]:
        """The mean square of every gating block that holds kept samples, in block order."""
        blocks = int(np.round((self.length / self.rate - t_g) / (t_g * step))) + 1
        span = t_g * step * self.rate
        energy: dict[int, float] = {}
        at = 0
        for start, size in self.ranges:
            first = max(0, int((start - t_g * self.rate) // span) - 2)
            last = min(blocks - 1, int((start + size) // span) + 2)
            for j in range(first, last + 1):
                lo = int(t_g * (j * step) * self.rate)
                hi = int(t_g * (j * step + 1) * self.rate)
                lo, hi = max(lo, start), min(hi, start + size)
                if hi > lo:
                    part = np.sum(np.square(weighted[at + lo - start:at + hi - start]))
                    energy[j] = energy.get(j, 0.0) + part
            at += size
        return [(1.0 / (t_g * self.rate)) * energy[j] for j in sorted(energy)]

    def peak(self, true_peak: bool = True) -> float:
        """The highest peak in dB: sample peak (dBFS) or true peak (dBTP, 4× oversampled, in
        bounded chunks)."""
        data = self.data
        if data.size == 0:
            return -math.inf
        if not true_peak:
            peak = float(np.max(np.abs(data)))
        else:
            import_pyloudnorm()  # brings scipy
            from scipy.signal import resample_poly

            peak, m = 0.0, TRUE_PEAK_MARGIN
            for a in range(0, data.size, TRUE_PEAK_CHUNK):
                b = min(data.size, a + TRUE_PEAK_CHUNK)
                lo, hi = max(0, a - m), min(data.size, b + m)
                up = resample_poly(data[lo:hi], OVERSAMPLE, 1)
                inner = up[(a - lo) * OVERSAMPLE:(b - lo) * OVERSAMPLE]
                peak = max(peak, float(np.max(np.abs(inner))))
        return 20 * math.log10(peak) if peak > 0 else -math.inf

    def dense(self) -> np.ndarray:
        out = np.zeros(self.length, dtype=np.float64)
        at = 0
        for start, size in self.ranges:
            out[start:start + size] = self.data[at:at + size]
            at += size
        return out


def _kept_ranges(sparse: Sparse, sample_rate: int) -> list[tuple[int, int]]:
    """``(start, size)`` of the ranges loudness needs: each sounding run with a block before it
    and a block and the filter's tail after it, ranges that meet merged."""
    after = math.ceil((BLOCK_SECONDS + TAIL_SECONDS) * sample_rate) + 1
    before = math.ceil(BLOCK_SECONDS * sample_rate) + 1
    found = sorted((max(0, offset + a - before), min(sparse.length, offset + b + after))
                   for offset, part in sparse.parts for a, b in _sounding(part, sample_rate))
    ranges: list[list[int]] = []
    for a, b in found:
        if ranges and a <= ranges[-1][1]:
            ranges[-1][1] = max(ranges[-1][1], b)
        else:
            ranges.append([a, b])
    return [(a, b - a) for a, b in ranges]


def _length(wave) -> int:
    return int(wave.shape[-1])


def _array(wave) -> np.ndarray:
    if isinstance(wave, torch.Tensor):
        wave = wave.detach().cpu()
        return (wave if wave.dtype in (torch.float32, torch.float64) else wave.float()).numpy()
    return np.asarray(wave)


def _sounding(wave, sample_rate: int) -> list[tuple[int, int]]:
    """The ranges of ``wave`` (1-D) that are not exact zeros, to a window's precision:
    ``(start, end)``, in order; found ``SCAN`` samples at a time."""
    wave = _array(wave)
    if wave.ndim != 1:
        raise ValueError(f"loudness: expected a mono waveform [samples], got shape "
                         f"{tuple(wave.shape)}")
    window = max(1, round(WINDOW_SECONDS * sample_rate))
    scan = max(window, SCAN // window * window)
    n = wave.shape[0]
    out: list[tuple[int, int]] = []
    for a in range(0, n, scan):
        piece = wave[a:a + scan]
        if not piece.any():
            continue
        for i, loud in enumerate(_window_flags(piece, window)):
            if not loud:
                continue
            lo, hi = a + i * window, min(n, a + (i + 1) * window)
            if out and out[-1][1] == lo:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
    return out


def _window_flags(piece: np.ndarray, window: int) -> list[bool]:
    """Whether each ``window`` samples of ``piece`` (the last may be fewer) hold a non-zero."""
    full = piece.shape[0] // window * window
    flags = np.any(piece[:full].reshape(-1, window) != 0, axis=1).tolist()
    if full < piece.shape[0]:
        flags.append(bool(piece[full:].any()))
    return flags


def measure(wave, sample_rate: int) -> float | None:
    """Integrated loudness in LUFS (BS.1770-4, gated); None for audio shorter than one block
    or silent (below the −70 LUFS gate). ``wave``: a tensor, an array or a ``Sparse``."""
    return Kept(wave, sample_rate).integrated()


def peak_db(wave, sample_rate: int, true_peak: bool = True) -> float:
    """The highest peak in dB: sample peak (dBFS), or true peak (dBTP, 4× oversampled)."""
    return Kept(wave, sample_rate).peak(true_peak)


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
    kept = Kept(wave, sample_rate)  # one pass: the speech, not the silence
    measured = kept.integrated()
    peak = kept.peak(loudness.true_peak)
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


def report(loudness: Loudness, gains: list[Gain], wave=None, sample_rate: int | None = None
           ) -> dict:
    """What a finished result says about its loudness (the timeline JSON carries it). One gain
    (``per="mix"``): the result's loudness and peak follow from what was measured before the gain
    (nothing is measured again; the peak scales exactly, the loudness to within the report's
    0.01 LU). Several: the result ``wave`` is measured, once."""
    if len(gains) == 1 and wave is None:
        gain = gains[0]
        measured = None if gain.measured is None else gain.measured + gain.db
        peak = gain.peak + gain.db
    else:
        kept = Kept(wave, sample_rate)
        measured, peak = kept.integrated(), kept.peak(loudness.true_peak)
    return {**loudness.as_dict(),
            "measured": None if measured is None else round(measured, 2),
            "peak": round(peak, 2),
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


def output(on_chunk: OnChunk, sample_rate: int, loudness: Loudness | None) -> Passthrough:
    """Where a layout sends its samples: straight on, or through a stream's loudness."""
    if loudness is None:
        return Passthrough(on_chunk, sample_rate)
    return StreamGain(on_chunk, sample_rate, loudness)
