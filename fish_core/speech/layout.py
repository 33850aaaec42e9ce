"""Layout: the final waveform of a request, handed out in order while it is generated.

Both synthesizers lay out here (``speech.front``): the local one as its job decodes, a remote one
as each engine request's audio arrives. ``tts``, ``dialogue`` and ``subtitles`` take
``on_chunk(samples, sample_rate)``
(``samples`` float32 ``[n]`` on the CPU, a fresh tensor). It is called on the generating thread
with consecutive pieces of the waveform the call returns, so that ``torch.cat`` of every piece
equals that waveform sample for sample; with several takes, of take 1.

Nothing is decoded here: take 1's ``SpeechJob`` is ``streaming`` (its frames are decoded as they
are generated, by the same chunk rule, so its chunks are the ones a whole-clip job makes) and
its ``emit`` / ``end_batch`` go to a layout below, which shapes the chunks as the timeline
shapes the batches:

* ``TakeLayout`` (tts, dialogue, ``stream`` and the HTTP service when pauses or finishing ask
  for it)
  as ``timeline.join_pieces``: the pause between turns (or the one a ``[pause:…]`` tag wrote)
  follows a batch's end, and a fade-in or fade-out around a pause is applied as soon as it is
  known (``timeline.faded``: only the last ``FADE_SECONDS`` of a batch before a pause wait for
  the batch's end, so a layout holds a fade and the newest chunk, never the whole batch,
  unless the batch is stretched);
* ``CueLayout`` (subtitles) as ``timeline.place_cues``: the silence that places a cue, then its
  batches laid out as a take of their own (a ``TakeLayout``: the silences its pause tags
  wrote, its speaking rate); the silence up to the last cue's end comes last.

Finishing (``speech.finishing``): at a speaking rate other than 1 a batch's chunks are held
and stretched when it ends (a stretch needs the whole batch); with a loudness the samples go
through ``audio.loudness.output`` (a gain fixed from the first batch; a whole HTTP answer is
finished as a whole by ``Front.finish``, off the model's worker). Live pieces with a loudness
therefore differ in level
from the returned waveform, which is normalised as a whole.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

import torch

from ..audio import loudness as lufs
from .finishing import Finishing
from .results import Batch
from .timeline import FADE_SECONDS, faded, gaps

OnChunk = Callable[[torch.Tensor, int], None]

PLAIN = Finishing()


class Layout:
    """Hands laid-out samples to ``on_chunk`` (none empty; through the loudness of
    ``finishing``), counting them. ``chunk`` and ``end_batch`` are the streaming job's ``emit`` and
    ``end_batch``."""

    def __init__(self, on_chunk: OnChunk, sample_rate: int, finishing: Finishing = PLAIN):
        self.on_chunk, self.sample_rate = on_chunk, sample_rate
        self.finishing = finishing
        self.out = lufs.output(on_chunk, sample_rate, finishing.loudness)
        self.cursor = 0  # samples laid out

    def _send(self, samples: torch.Tensor) -> None:
        if samples.shape[0]:
            self.out(samples)
            self.cursor += samples.shape[0]


class TakeLayout(Layout):
    """Take 1 of ``tts``/``dialogue`` (or a stream): the text ``batches`` laid end to end with
    the silences ``timeline.gaps`` gives (``pause`` seconds between them, or a tag's)."""

    def __init__(self, on_chunk: OnChunk, sample_rate: int, batches: Sequence[Batch],
                 pause: float, finishing: Finishing = PLAIN):
        super().__init__(on_chunk, sample_rate, finishing)
        self.batches = len(batches)
        self.gaps = gaps(batches, sample_rate, pause)
        self.fade = round(sample_rate * FADE_SECONDS)
        self.index = 0  # the text batch being generated
        self._send(torch.zeros(self.gaps[0]))
        self._begin()

    def chunk(self, chunk: torch.Tensor) -> None:
        """The job's ``emit``: the next decoded chunk of the current batch."""
        self._add([chunk], final=False)

    def end_batch(self) -> None:
        """The job's ``end_batch``: the rest of the batch, then the silence after it."""
        self._add([], final=True)
        self._send(torch.zeros(self.gaps[self.index + 1]))
        self.index += 1
        self.out.end_batch()
        if self.index == self.batches:
            self.out.close()
        self._begin()

    def _begin(self) -> None:
        self.length = 0  # samples of this batch's piece so far
        self.sent = 0  # of them handed out
        self.unsent: list[torch.Tensor] = []  # the piece's samples from ``sent`` on
        self.fades_in = self.index < self.batches and bool(self.gaps[self.index])
        self.fades_out = self.index < self.batches and bool(self.gaps[self.index + 1])

    def _add(self, chunks: list[torch.Tensor], final: bool) -> None:
        stretches = self.finishing.stretches
        if not (self.fades_in or self.fades_out or stretches):  # the decode is the output
            for chunk in chunks:
                self._send(chunk.clone())
            return
        self.unsent += chunks
        if stretches:  # the batch is stretched whole, when it ends: all of it waits
            if final and self.unsent:
                piece = self.finishing.piece(torch.cat(self.unsent), self.sample_rate)
                self._send(faded(piece, 0, piece.shape[0], self.sample_rate, self.fades_in,
                                 self.fades_out))
            return
        self.length += sum(c.shape[0] for c in chunks)
        ready = self._ready(final)
        if ready > self.sent:
            held = torch.cat(self.unsent)  # only what waits: a fade and the newest chunks
            part, rest = held[:ready - self.sent], held[ready - self.sent:]
            self._send(faded(part, self.sent, self.length, self.sample_rate, self.fades_in,
                             self.fades_out and final))  # as ``join_pieces`` shapes the piece
            self.unsent = [rest] if rest.shape[0] else []
            self.sent = ready

    def _ready(self, final: bool) -> int:
        """How many of the batch's samples so far may be handed out: all at its end; before
        it, never the fade-out's, and none while the fade-in's length is not known."""
        ready = self.length
        if not final:
            if self.fades_out:
                ready -= self.fade  # the fade-out's samples wait for the batch's end
            if self.fades_in and self.length < self.fade:
                ready = 0  # the fade-in's length is min(piece, fade): not known yet
        return ready


class CueLayout(Layout):
    """``subtitles``: cue i's chunks placed as ``timeline.place_cues`` places them. ``batches``
    and ``owners`` (the cue of each batch): a cue's batches (several when it has pauses) are
    laid out as a take of their own, its silences and speaking rate as ``TakeLayout`` lays
    them; the loudness is this layout's, over every cue."""

    def __init__(self, on_chunk: OnChunk, sample_rate: int, cues: Sequence,
                 batches: Sequence[Batch] | None = None, owners: Sequence[int] | None = None,
                 finishing: Finishing = PLAIN):
        super().__init__(on_chunk, sample_rate, finishing)
        self.cues = cues
        self.batch_list = list(batches) if batches is not None else [Batch(c.text) for c in cues]
        self.owners = list(owners) if owners is not None else list(range(len(cues)))
        self.index = 0  # the cue being generated
        self.batch = 0  # the text batch being generated
        self._place()

    def chunk(self, chunk: torch.Tensor) -> None:
        self.take.chunk(chunk)

    def end_batch(self) -> None:
        self.take.end_batch()
        self.batch += 1
        self.out.end_batch()
        if self.batch < len(self.owners) and self.owners[self.batch] == self.index:
            return  # the cue goes on
        self.index += 1
        self._place()
        if self.index == len(self.cues):
            self.out.close()

    def _place(self) -> None:
        """The silence before the next cue (and the layout of its batches), or after the last
        one up to its end."""
        if self.index < len(self.cues):
            until = max(round(self.cues[self.index].start * self.sample_rate), self.cursor)
        else:
            until = max(round(self.cues[-1].end * self.sample_rate), self.cursor)
        self._send(torch.zeros(until - self.cursor))
        if self.index < len(self.cues):
            mine = [b for b, owner in zip(self.batch_list, self.owners) if owner == self.index]
            self.take = TakeLayout(lambda samples, _: self._send(samples), self.sample_rate,
                                   mine, 0.0, replace(self.finishing, loudness=None))


class Deferred:
    """A layout made when its first samples come (``make()``): a remote engine's sample rate is
    known for sure only then. ``chunk`` and ``end_batch`` as a layout's."""

    def __init__(self, make: Callable[[], Layout]):
        self.make, self.layout = make, None

    def _made(self) -> Layout:
        if self.layout is None:
            self.layout = self.make()
        return self.layout

    def chunk(self, chunk: torch.Tensor) -> None:
        self._made().chunk(chunk)

    def end_batch(self) -> None:
        self._made().end_batch()


def job_options(layout: Layout | Deferred | None) -> dict:
    """``SpeechJob`` keywords: without a layout a whole-clip job (nothing extra computed);
    with one a streaming job whose chunks and batch ends go to it."""
    if layout is None:
        return {"streaming": False}
    return {"streaming": True, "emit": layout.chunk, "end_batch": layout.end_batch}


def layout_needed(batches: Sequence[Batch], pause: float, finishing: Finishing) -> bool:
    """Whether a stream of ``batches`` needs laying out (silences, rate or loudness), or its
    decoded chunks are already the output."""
    return finishing.touches_audio or any(gaps(batches, 1000, pause))
