"""What the Synthesizer returns (``Speech``, ``SubtitleSpeech``) and the named pieces it passes
between its steps (``Batch``, ``BatchResult``, ``Segment``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import text as textplan
from .generate import Generated


@dataclass(frozen=True)
class Batch:
    """One text batch to generate. ``speaker``: the voice it is spoken in when the batch is one
    script turn (None: the speaker tags inside ``text`` say)."""

    text: str
    speaker: int | None = None


@dataclass
class BatchResult:
    """One generated batch: what was asked, what came out, and how long it took."""

    batch: Batch
    generated: Generated
    seconds: float  # wall time spent generating it

    @property
    def frames(self) -> int:
        return self.generated.codes.shape[1]


@dataclass
class Segment:
    """One generated piece: its text, speaker, where it sits in the output, how it went."""

    text: str
    speaker: int | None
    start: float  # seconds in the output waveform
    end: float
    frames: int
    seconds: float  # wall time spent generating it
    stopped_on_eos: bool


@dataclass
class Speech:
    waveform: torch.Tensor  # float32 [T], CPU
    sample_rate: int
    codes: torch.Tensor  # [num_codebooks, frames] of all segments, in order
    segments: list[Segment]
    seed: int

    @property
    def duration(self) -> float:
        return self.waveform.shape[-1] / self.sample_rate


@dataclass
class SubtitleSpeech(Speech):
    cues: list[textplan.Cue] = field(default_factory=list)  # where each cue really sits
    overruns: list[str] = field(default_factory=list)  # cues longer than their slot

    def srt(self) -> str:
        return textplan.format_srt(self.cues)
