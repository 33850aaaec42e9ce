"""What the Synthesizer returns (``Speech``, ``SubtitleSpeech``) and the named pieces it passes
between its steps (``Batch``, ``BatchResult``, ``Segment``); a result's timeline as JSON and its
per-speaker tracks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from ..text import plan as textplan
from ..text import srt as textsrt
from ..params import Generated

MAX_TAKES = 8  # takes of one request, generated together


@dataclass(frozen=True)
class Batch:
    """One text batch to generate. ``speaker``: the voice it is spoken in when the batch is one
    script turn (None: the speaker tags inside ``text`` say). ``before``/``after``: seconds of
    silence a ``[pause:…]`` tag wrote before/after it (None: none written there)."""

    text: str
    speaker: int | None = None
    before: float | None = None
    after: float | None = None


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
    """One generated piece: its text, speaker, where it sits in the output (samples
    ``[start_sample, end_sample)``), how it went."""

    text: str
    speaker: int | None  # None: the speaker tags inside ``text`` say (or no speaker at all)
    start_sample: int
    end_sample: int
    sample_rate: int
    frames: int
    seconds: float  # wall time spent generating it (shared by the takes generated with it)
    stopped_on_eos: bool  # False: stopped at max_new_tokens

    @property
    def start(self) -> float:
        return self.start_sample / self.sample_rate

    @property
    def end(self) -> float:
        return self.end_sample / self.sample_rate

    @property
    def first_speaker(self) -> int:
        """``speaker``, else the first speaker tagged in the text, else 0."""
        if self.speaker is not None:
            return self.speaker
        tagged = [t.speaker for t in textplan.split_turns(self.text) if t.speaker is not None]
        return tagged[0] if tagged else 0

    def as_dict(self) -> dict:
        return {"speaker": self.speaker, "text": self.text, "start": round(self.start, 6),
                "end": round(self.end, 6), "start_sample": self.start_sample,
                "end_sample": self.end_sample, "frames": self.frames,
                "stopped_on_eos": self.stopped_on_eos}


@dataclass
class Speech:
    waveform: torch.Tensor  # float32 [T], CPU
    sample_rate: int
    codes: torch.Tensor  # [num_codebooks, frames] of all segments, in order
    segments: list[Segment]
    seed: int
    # What finishing did (``speech.finishing``): speed, loudness measured after it; None: none.
    finishing: dict | None = field(default=None, kw_only=True)
    # Timed words (``speech.words.TimedWord``) when the request asked for them; None: not asked.
    words: list | None = field(default=None, kw_only=True)
    # A checked take (``Settings.check``): what the speech recogniser heard and its score
    # against the text asked for (``hearing.checking.CheckedTake``: ``.heard.text``,
    # ``.score.rate``, ``.score.differences``); None: not checked.
    check: object | None = field(default=None, kw_only=True)

    @property
    def duration(self) -> float:
        return self.waveform.shape[-1] / self.sample_rate

    def tracks(self, count: int) -> torch.Tensor:
        """One track per speaker, ``[max(count, speakers), T]``: each the length of the
        waveform, holding its speaker's segments and silence elsewhere, so the tracks sum to
        the waveform exactly. A segment generated as one conversation of several speakers
        (``speaker`` None) cannot be split: it goes to its first speaker's track."""
        speakers = [s.first_speaker for s in self.segments]
        tracks = torch.zeros(max([count, *[i + 1 for i in speakers]]), self.waveform.shape[0])
        for segment, speaker in zip(self.segments, speakers):
            window = slice(segment.start_sample, segment.end_sample)
            tracks[speaker, window] = self.waveform[window]
        return tracks

    def save(self, path) -> Path:
        """Write the waveform to ``path`` in the format its suffix names: .wav, .flac, .mp3,
        .opus/.ogg or .pcm (16-bit; mp3 and opus where libsndfile can write them)."""
        from ..audio.formats import write

        return write(path, self.waveform, self.sample_rate)

    def captions(self, fmt: str = "srt", **grouping) -> str:
        """The timed words as ``fmt``: ``"srt"``, ``"vtt"``, ``"karaoke"`` (WebVTT, a
        timestamp before every word) or ``"json"``, lines grouped by ``text.captions``'s rules
        (``max_chars``, ``max_seconds``, ``pause``) and never across speakers."""
        from .words import captions

        if self.words is None:
            raise ValueError("captions: this result has no timed words (ask with words=True)")
        return captions(self.words, fmt, [s.text for s in self.segments], **grouping)

    def timeline(self, take: int = 0) -> dict:
        """Where every segment sits: the ``takes`` entry of ``timeline_json``."""
        found = {"take": take, "seed": self.seed, "samples": self.waveform.shape[0],
                 "duration": round(self.duration, 6),
                 "segments": [s.as_dict() for s in self.segments]}
        if self.finishing:
            found["finishing"] = self.finishing
        if self.words is not None:
            found["words"] = [w.as_dict() for w in self.words]
        if self.check is not None:
            found["check"] = check_dict(self.check)
        return found


def check_dict(checked) -> dict:
    """A checked take (``hearing.checking.CheckedTake``) as JSON: what was heard, the error
    rate, its unit (``word`` or ``char``), errors of length, and each difference as
    ``[expected, heard]`` (either may be empty: a unit dropped or added)."""
    s = checked.score
    return {"heard": checked.heard.text, "language": checked.heard.language,
            "complete": checked.heard.complete, "rate": s.rate, "unit": s.unit,
            "errors": s.errors, "length": s.length,
            "differences": [[d.expected, d.heard] for d in s.differences]}


def timeline_json(takes: Sequence[Speech]) -> str:
    """The timeline of one result (or of several takes) as JSON, one shape for every node:
    ``{"sample_rate", "takes": [{"take", "seed", "samples", "duration", "segments": [{"speaker",
    "text", "start", "end", "start_sample", "end_sample", "frames", "stopped_on_eos"}]}]}``.
    Times are seconds, ``end_sample`` is exclusive; ``samples`` is a take's exact length (the
    takes of an AUDIO batch are padded with silence to the longest). A checked take has a
    ``check`` (``check_dict``)."""
    return json.dumps({"sample_rate": takes[0].sample_rate,
                       "takes": [speech.timeline(k) for k, speech in enumerate(takes)]},
                      ensure_ascii=False, indent=1)


@dataclass
class SubtitleSpeech(Speech):
    cues: list[textsrt.Cue] = field(default_factory=list)  # where each cue really sits
    overruns: list[str] = field(default_factory=list)  # cues longer than their slot

    def srt(self) -> str:
        return textsrt.format_srt(self.cues)
