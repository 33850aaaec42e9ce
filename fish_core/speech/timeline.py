"""Placing generated batches on the output waveform: back to back (optionally with pauses and
short fades between turns), or at subtitle cue times."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..text import plan as textplan
from .results import BatchResult, Segment

FADE_SECONDS = 0.01


@dataclass
class Timeline:
    waveform: torch.Tensor  # float32 [T], CPU
    segments: list[Segment]


@dataclass
class CueTimeline(Timeline):
    cues: list[textplan.Cue] = field(default_factory=list)  # where each cue really sits
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
    """Lay batch i's waveform ``pieces[i]`` end to end, with ``pause`` seconds of silence
    between them and a short fade at each side of a pause."""
    gap = round(pause * sample_rate)
    out, segments = [], []
    cursor = 0  # samples written to the output
    for i, (piece, result) in enumerate(zip(pieces, results)):
        if gap and i > 0:
            out.append(torch.zeros(gap))
            cursor += gap
        if gap:
            piece = faded(piece, 0, piece.shape[0], sample_rate, i > 0, i + 1 < len(results))
        out.append(piece)
        end = cursor + piece.shape[0]
        segments.append(segment(result, cursor, end, sample_rate))
        cursor = end
    waveform = torch.cat(out) if out else torch.zeros(0)
    return Timeline(waveform, segments)


def place_cues(cues: Sequence[textplan.Cue], waves: Sequence[torch.Tensor],
               results: Sequence[BatchResult], sample_rate: int) -> CueTimeline:
    """Put cue i's speech ``waves[i]`` at its start time, or right after the previous cue when
    that one runs long (then the overrun is reported). The output lasts until the last cue's end
    at least."""
    pieces, placed, overruns, segments = [], [], [], []
    cursor = 0  # samples written so far
    for i, (cue, wave, result) in enumerate(zip(cues, waves, results)):
        asked = round(cue.start * sample_rate)
        start = max(asked, cursor)
        pieces += [torch.zeros(start - cursor), wave]
        cursor = start + wave.shape[0]
        next_start = cues[i + 1].start if i + 1 < len(cues) else math.inf
        if cursor / sample_rate > next_start + 1e-9:
            overruns.append(f"cue {cue.index} ({cue.text[:40]!r}) runs "
                            f"{cursor / sample_rate - next_start:.2f} s into cue {cue.index + 1}")
        if start > asked:
            overruns.append(f"cue {cue.index} starts {start / sample_rate - cue.start:.2f} s late")
        placed.append(textplan.Cue(cue.index, start / sample_rate, cursor / sample_rate, cue.text))
        segments.append(segment(result, start, cursor, sample_rate))
    tail = max(0, round(cues[-1].end * sample_rate) - cursor)
    waveform = torch.cat(pieces + [torch.zeros(tail)])
    return CueTimeline(waveform, segments, placed, overruns)


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

