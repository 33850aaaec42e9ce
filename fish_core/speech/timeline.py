"""Placing generated batches on the output waveform: back to back (optionally with pauses and
short fades between turns, and the exact silences ``[pause:…]`` tags wrote), or at subtitle cue
times."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import torch

from ..text import srt as textsrt
from .results import Batch, BatchResult, Segment

FADE_SECONDS = 0.01


@dataclass
class Timeline:
    waveform: torch.Tensor  # float32 [T], CPU
    segments: list[Segment]


@dataclass
class CueTimeline(Timeline):
    cues: list[textsrt.Cue] = field(default_factory=list)  # where each cue really sits
    overruns: list[str] = field(default_factory=list)  # cues longer than their slot or late


def join_batches(wave: torch.Tensor, results: Sequence[BatchResult], sample_rate: int,
                 frame_length: int, pause: float) -> Timeline:
    """Cut ``wave`` (every batch decoded in one pass, ``frame_length`` samples per frame) back
    into its batches and lay them end to end (``join_pieces``)."""
    pieces, frame = [], 0  # frames consumed from ``wave``
    for result in results:
        pieces.append(wave[frame * frame_length:(frame + result.frames) * frame_length])
        frame += result.frames
    return join_pieces(pieces, results, sample_rate, pause)


def join_pieces(pieces: Sequence[torch.Tensor], results: Sequence[BatchResult],
                sample_rate: int, pause: float) -> Timeline:
    """Lay batch i's waveform ``pieces[i]`` end to end with the silences ``gaps`` gives
    (``pause`` seconds between batches, or what a ``[pause:…]`` tag wrote), a short fade on
    the speech side of each silence."""
    spaced = gaps([r.batch for r in results], sample_rate, pause)
    waveform, spans = lay_pieces(pieces, spaced, sample_rate)
    segments = [segment(result, start, end, sample_rate)
                for result, (start, end) in zip(results, spans)]
    return Timeline(waveform, segments)


def gaps(batches: Sequence[Batch], sample_rate: int, pause: float) -> list[int]:
    """Samples of silence before each batch and, last, after the last one (``n + 1``): between
    two batches what their pause tags wrote (``after`` of the one, ``before`` of the next),
    else ``pause`` seconds; before the first and after the last only what tags wrote."""
    def written(*seconds) -> float | None:
        given = [s for s in seconds if s is not None]
        return sum(given) if given else None

    if not batches:
        return [0]
    out = [written(batches[0].before) or 0.0]
    for previous, batch in zip(batches, batches[1:]):
        explicit = written(previous.after, batch.before)
        out.append(pause if explicit is None else explicit)
    out.append(written(batches[-1].after) or 0.0)
    return [round(seconds * sample_rate) for seconds in out]


def lay_pieces(pieces: Sequence[torch.Tensor], spaced: Sequence[int], sample_rate: int
               ) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """The pieces with ``spaced[i]`` zeros before piece i and ``spaced[-1]`` after the last,
    each piece faded in after a silence and out before one; returns the waveform and where
    each piece sits (samples ``[start, end)``)."""
    out, spans, cursor = [], [], 0
    for i, piece in enumerate(pieces):
        if spaced[i]:
            out.append(torch.zeros(spaced[i]))
            cursor += spaced[i]
        if spaced[i] or spaced[i + 1]:
            piece = faded(piece, 0, piece.shape[0], sample_rate, bool(spaced[i]),
                          bool(spaced[i + 1]))
        out.append(piece)
        spans.append((cursor, cursor + piece.shape[0]))
        cursor += piece.shape[0]
    if pieces and spaced[len(pieces)]:
        out.append(torch.zeros(spaced[len(pieces)]))
    return (torch.cat(out) if out else torch.zeros(0)), spans


def place_cues(cues: Sequence[textsrt.Cue], waves: Sequence[torch.Tensor],
               results: Sequence[BatchResult], sample_rate: int,
               owners: Sequence[int] | None = None) -> CueTimeline:
    """Put cue i's speech at its start time, or right after the previous cue when that one runs
    long (then the overrun is reported). The output lasts until the last cue's end at least.
    ``waves``/``results``: one per cue, or (with ``owners``, the cue of each) one per text
    batch, a cue's batches laid out with the silences their pause tags wrote."""
    owners = list(range(len(cues))) if owners is None else list(owners)
    pieces, placed, overruns, segments = [], [], [], []
    cursor = 0  # samples written so far
    for i, cue in enumerate(cues):
        timeline = _cue_timeline(i, owners, waves, results, sample_rate)
        wave = timeline.waveform
        asked = round(cue.start * sample_rate)
        start = max(asked, cursor)
        pieces += [torch.zeros(start - cursor), wave]
        cursor = start + wave.shape[0]
        next_start = cues[i + 1].start if i + 1 < len(cues) else math.inf
        overruns += _overruns(cue, asked, start, cursor, next_start, sample_rate)
        placed.append(textsrt.Cue(cue.index, start / sample_rate, cursor / sample_rate, cue.text))
        segments += _shifted(timeline.segments, start)
    tail = max(0, round(cues[-1].end * sample_rate) - cursor)
    waveform = torch.cat(pieces + [torch.zeros(tail)])
    return CueTimeline(waveform, segments, placed, overruns)


def _cue_timeline(cue: int, owners: list[int], waves: Sequence[torch.Tensor],
                  results: Sequence[BatchResult], sample_rate: int) -> Timeline:
    """Cue ``cue``'s batches (those ``owners`` gives it) laid out with the silences their pause
    tags wrote."""
    mine = [k for k, owner in enumerate(owners) if owner == cue]
    return join_pieces([waves[k] for k in mine], [results[k] for k in mine], sample_rate, 0.0)


def _shifted(segments: Sequence[Segment], by: int) -> list[Segment]:
    """``segments`` moved ``by`` samples later."""
    return [replace(s, start_sample=s.start_sample + by, end_sample=s.end_sample + by)
            for s in segments]


def _overruns(cue: textsrt.Cue, asked: int, start: int, end: int, next_start: float,
              sample_rate: int) -> list[str]:
    """What is reported of ``cue``, asked at sample ``asked`` and placed at ``[start, end)``:
    its speech running into the next cue (at ``next_start`` seconds), its late start."""
    found = []
    if end / sample_rate > next_start + 1e-9:
        found.append(f"cue {cue.index} ({cue.text[:40]!r}) runs "
                     f"{end / sample_rate - next_start:.2f} s into cue {cue.index + 1}")
    if start > asked:
        found.append(f"cue {cue.index} starts {start / sample_rate - cue.start:.2f} s late")
    return found


def segment(result: BatchResult, start: int, end: int, sample_rate: int) -> Segment:
    """``result`` placed at samples ``[start, end)``."""
    return Segment(result.batch.text, result.batch.speaker, start, end, sample_rate,
                   result.frames, result.seconds, result.generated.stopped_on_eos)


def faded(part: torch.Tensor, start: int, length: int, sample_rate: int, fade_in: bool,
          fade_out: bool, seconds: float = FADE_SECONDS) -> torch.Tensor:
    """Samples ``start .. start + len(part)`` of a piece ``length`` samples long (``part``, not
    changed), with a fade-in at the piece's start and/or a fade-out at its end, each
    ``min(length, seconds)`` long: any stretch of the piece shaped as the whole is."""
    out = part.clone()
    n = min(length, round(sample_rate * seconds))
    end = start + out.shape[0]
    if fade_in and start < n:
        out[:min(n, end) - start] *= torch.linspace(0, 1, n)[start:min(n, end)]
    if fade_out and end > length - n:
        first = max(start, length - n)
        out[first - start:] *= torch.linspace(1, 0, n)[first - (length - n):end - (length - n)]
    return out

