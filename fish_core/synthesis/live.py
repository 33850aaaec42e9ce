"""Live chunks: the final waveform of a request, handed out in order while it is generated.

``Synthesizer.tts``, ``dialogue`` and ``subtitles`` take ``on_chunk(samples, sample_rate)``
(``samples`` float32 ``[n]`` on the CPU, a fresh tensor). It is called on the generating thread
with consecutive pieces of the waveform the call returns, so that ``torch.cat`` of every piece
equals that waveform sample for sample; with several takes, of take 1.

Nothing is decoded here: take 1's ``SpeechJob`` runs ``live`` (its frames are decoded as they
are generated, by the same chunk rule, so its chunks are the ones a whole-clip job makes) and
its ``emit`` / ``end_batch`` go to a layout below, which shapes the chunks as the timeline
shapes the batches:

* ``TakeLayout`` (tts, dialogue) as ``timeline.join_pieces``: the pause between turns follows
  a turn's end, and a fade-in or fade-out around a pause is applied as soon as it is known
  (only the last ``FADE_SECONDS`` of a turn before a pause wait for the turn's end);
* ``CueLayout`` (subtitles) as ``timeline.place_cues``: the silence that places a cue, then its
  chunks; the silence up to the last cue's end comes last.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..speech.interface import OnChunk
from ..speech.timeline import FADE_SECONDS, faded


class Layout:
    """Hands laid-out samples to ``on_chunk`` (none empty), counting them. ``chunk`` and
    ``end_batch`` are the live job's ``emit`` and ``end_batch``."""

    def __init__(self, on_chunk: OnChunk, sample_rate: int):
        self.on_chunk, self.sample_rate = on_chunk, sample_rate
        self.cursor = 0  # samples handed out

    def _send(self, samples: torch.Tensor) -> None:
        if samples.shape[0]:
            self.on_chunk(samples, self.sample_rate)
            self.cursor += samples.shape[0]


class TakeLayout(Layout):
    """Take 1 of ``tts``/``dialogue``: ``batches`` text batches laid end to end with ``pause``
    seconds between them."""

    def __init__(self, on_chunk: OnChunk, sample_rate: int, batches: int, pause: float):
        super().__init__(on_chunk, sample_rate)
        self.batches = batches
        self.gap = round(pause * sample_rate)
        self.fade = round(sample_rate * FADE_SECONDS)
        self.index = 0  # the text batch being generated
        self._begin()

    def chunk(self, chunk: torch.Tensor) -> None:
        """The job's ``emit``: the next decoded chunk of the current batch."""
        self._add([chunk], final=False)

    def end_batch(self) -> None:
        """The job's ``end_batch``: the rest of the batch, then the pause after it."""
        self._add([], final=True)
        self.index += 1
        if self.gap and self.index < self.batches:
            self._send(torch.zeros(self.gap))
        self._begin()

    def _begin(self) -> None:
        self.length = 0  # samples of this batch's piece so far
        self.sent = 0  # of them handed out
        self.unsent: list[torch.Tensor] = []  # the piece's samples from ``sent`` on
        self.fades_in = bool(self.gap) and self.index > 0
        self.fades_out = bool(self.gap) and self.index + 1 < self.batches

    def _add(self, chunks: list[torch.Tensor], final: bool) -> None:
        if not (self.fades_in or self.fades_out):  # no pause: the decode is the output
            for chunk in chunks:
                self._send(chunk.clone())
            return
        self.unsent += chunks
        self.length += sum(c.shape[0] for c in chunks)
        ready = self.length
        if not final:
            if self.fades_out:
                ready -= self.fade  # the fade-out's samples wait for the batch's end
            if self.fades_in and self.length < self.fade:
                ready = 0  # the fade-in's length is min(piece, fade): not known yet
        if ready > self.sent:
            held = torch.cat(self.unsent)  # only what waits: a fade and the newest chunks
            part, rest = held[:ready - self.sent], held[ready - self.sent:]
            self._send(self._laid_out(part, final))
            self.unsent = [rest] if rest.shape[0] else []
            self.sent = ready

    def _laid_out(self, part: torch.Tensor, final: bool) -> torch.Tensor:
        """Samples ``sent ..`` of this batch's piece as ``join_pieces`` shapes it (fade-out
        only at the end)."""
        return faded(part, self.sent, self.length, self.sample_rate, self.fades_in,
                     self.fades_out and final)


class CueLayout(Layout):
    """``subtitles``: cue i's chunks placed as ``timeline.place_cues`` places them."""

    def __init__(self, on_chunk: OnChunk, sample_rate: int, cues: Sequence):
        super().__init__(on_chunk, sample_rate)
        self.cues = cues
        self.index = 0  # the cue being generated
        self._place()

    def chunk(self, chunk: torch.Tensor) -> None:
        self._send(chunk.clone())

    def end_batch(self) -> None:
        self.index += 1
        self._place()

    def _place(self) -> None:
        """The silence before the next cue, or after the last one up to its end."""
        if self.index < len(self.cues):
            until = max(round(self.cues[self.index].start * self.sample_rate), self.cursor)
        else:
            until = max(round(self.cues[-1].end * self.sample_rate), self.cursor)
        self._send(torch.zeros(until - self.cursor))


def job_options(layout: Layout | None) -> dict:
    """``SpeechJob`` keywords: without a layout a whole-clip job (nothing extra computed);
    with one a live job whose chunks and batch ends go to it."""
    if layout is None:
        return {"live": False}
    return {"live": True, "emit": layout.chunk, "end_batch": layout.end_batch}
