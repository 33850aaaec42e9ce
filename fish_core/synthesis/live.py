"""Live chunks: the final waveform of a request, handed out in order while it is generated.

``Synthesizer.tts``, ``dialogue`` and ``subtitles`` take ``on_chunk(samples, sample_rate)``
(``samples`` float32 ``[n]`` on the CPU, a fresh tensor). It is called on the generating thread
with consecutive pieces of the waveform the call returns, so that ``torch.cat`` of every piece
equals that waveform sample for sample; with several takes, of take 1.

Nothing is decoded here: take 1's ``SpeechJob`` runs ``live`` (its frames are decoded as they
are generated, by the same chunk rule, so its chunks are the ones a whole-clip job makes) and
its ``emit`` / ``end_batch`` go to a layout below, which shapes the chunks as the timeline
shapes the batches:

* ``TakeLayout`` (tts, dialogue, ``stream`` and the HTTP service when finishing asks for it)
  as ``timeline.join_pieces``: the pause between turns (or the one a ``[pause:…]`` tag wrote)
  follows a batch's end, and a fade-in or fade-out around a pause is applied as soon as it is
  known (only the last ``FADE_SECONDS`` of a batch before a pause wait for the batch's end);
* ``CueLayout`` (subtitles) as ``timeline.place_cues``: the silence that places a cue, then its
  chunks (a cue with pauses, or at another speaking rate, when its last batch ends); the
  silence up to the last cue's end comes last.

Finishing (``speech.finishing``): at a speaking rate other than 1 a batch's chunks are held
and stretched when it ends; with a loudness the samples go through ``audio.loudness.output``
(a gain fixed from the first batch, or, for a whole HTTP answer, the whole normalised at the
end). Live pieces with a loudness therefore differ in level from the returned waveform, which
is normalised as a whole.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..audio import loudness as lufs
from ..speech.finishing import Finishing
from ..speech.interface import OnChunk
from ..speech.results import Batch
from ..speech.timeline import FADE_SECONDS, fade_in, fade_out, gaps, lay_pieces

PLAIN = Finishing()


class Layout:
    """Hands laid-out samples to ``on_chunk`` (none empty; through the loudness of
    ``finishing``), counting them. ``chunk`` and ``end_batch`` are the live job's ``emit`` and
    ``end_batch``."""

    def __init__(self, on_chunk: OnChunk, sample_rate: int, finishing: Finishing = PLAIN,
                 whole: bool = False):
        self.on_chunk, self.sample_rate = on_chunk, sample_rate
        self.finishing = finishing
        self.out = lufs.output(on_chunk, sample_rate, finishing.loudness, whole)
        self.cursor = 0  # samples laid out

    def _send(self, samples: torch.Tensor) -> None:
        if samples.shape[0]:
            self.out(samples)
            self.cursor += samples.shape[0]


class TakeLayout(Layout):
    """Take 1 of ``tts``/``dialogue`` (or a stream): the text ``batches`` laid end to end with
    the silences ``timeline.gaps`` gives (``pause`` seconds between them, or a tag's)."""

    def __init__(self, on_chunk: OnChunk, sample_rate: int, batches: Sequence[Batch],
                 pause: float, finishing: Finishing = PLAIN, whole: bool = False):
        super().__init__(on_chunk, sample_rate, finishing, whole)
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
        self.piece: list[torch.Tensor] = []  # this batch's chunks
        self.sent = 0  # samples of this batch's piece handed out
        self.fades_in = self.index < self.batches and bool(self.gaps[self.index])
        self.fades_out = self.index < self.batches and bool(self.gaps[self.index + 1])

    def _add(self, chunks: list[torch.Tensor], final: bool) -> None:
        self.piece += chunks
        stretches = self.finishing.stretches
        if not (self.fades_in or self.fades_out or stretches):  # the decode is the output
            for chunk in chunks:
                self._send(chunk.clone())
            return
        if stretches:  # the batch is stretched whole, when it ends
            if final and self.piece:
                self._send(self._laid_out(final))
            return
        length = sum(c.shape[0] for c in self.piece)
        ready = length
        if not final:
            if self.fades_out:
                ready -= self.fade  # the fade-out's samples wait for the batch's end
            if self.fades_in and length < self.fade:
                ready = 0  # the fade-in's length is min(piece, fade): not known yet
        if ready > self.sent:
            self._send(self._laid_out(final)[self.sent:ready])
            self.sent = ready

    def _laid_out(self, final: bool) -> torch.Tensor:
        """This batch's piece so far as ``join_pieces`` shapes it (fade-out only at the end;
        stretched at the end)."""
        piece = torch.cat(self.piece)
        if final:
            piece = self.finishing.piece(piece, self.sample_rate)
        if self.fades_in:
            piece = fade_in(piece, self.sample_rate)
        if self.fades_out and final:
            piece = fade_out(piece, self.sample_rate)
        return piece


class CueLayout(Layout):
    """``subtitles``: cue i's chunks placed as ``timeline.place_cues`` places them. ``batches``
    and ``owners`` (the cue of each batch): a cue that is several batches (pauses), or any cue
    at another speaking rate, is laid out when its last batch ends."""

    def __init__(self, on_chunk: OnChunk, sample_rate: int, cues: Sequence,
                 batches: Sequence[Batch] | None = None, owners: Sequence[int] | None = None,
                 finishing: Finishing = PLAIN):
        super().__init__(on_chunk, sample_rate, finishing)
        self.cues = cues
        self.batch_list = list(batches) if batches is not None else [Batch(c.text) for c in cues]
        self.owners = list(owners) if owners is not None else list(range(len(cues)))
        self.index = 0  # the cue being generated
        self.batch = 0  # the text batch being generated
        self.pieces: list[torch.Tensor] = []  # finished batches of the cue (when held)
        self.current: list[torch.Tensor] = []  # chunks of the batch (when held)
        self._place()

    @property
    def holds(self) -> bool:
        """Whether the current cue is laid out whole at its end."""
        return self.finishing.stretches or self.owners.count(self.index) > 1

    def chunk(self, chunk: torch.Tensor) -> None:
        if self.holds:
            self.current.append(chunk)
        else:
            self._send(chunk.clone())

    def end_batch(self) -> None:
        if self.holds:
            wave = torch.cat(self.current) if self.current else torch.zeros(0)
            self.pieces.append(self.finishing.piece(wave, self.sample_rate))
            self.current = []
        self.batch += 1
        self.out.end_batch()
        if self.batch < len(self.owners) and self.owners[self.batch] == self.index:
            return  # the cue goes on
        if self.holds:
            mine = [b for b, owner in zip(self.batch_list, self.owners) if owner == self.index]
            self._send(lay_pieces(self.pieces, gaps(mine, self.sample_rate, 0.0),
                                  self.sample_rate)[0])
            self.pieces = []
        self.index += 1
        self._place()
        if self.index == len(self.cues):
            self.out.close()

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


def layout_needed(batches: Sequence[Batch], pause: float, finishing: Finishing) -> bool:
    """Whether a stream of ``batches`` needs laying out (silences, rate or loudness), or its
    decoded chunks are already the output."""
    return finishing.touches_audio or any(gaps(batches, 1000, pause))
