"""Live chunks: the final waveform of a request, handed out in order while it is generated.

``Synthesizer.tts``, ``dialogue`` and ``subtitles`` take ``on_chunk(samples, sample_rate)``
(``samples`` float32 ``[n]`` on the CPU, a fresh tensor). It is called on the generating thread
with consecutive pieces of the waveform the call returns, so that ``torch.cat`` of every piece
equals that waveform sample for sample; with several takes, of take 1 (row 0 of the engine
batch).

* ``LiveTake`` (tts, dialogue): row 0's frames go through the ``ChunkDecoder`` as they are
  generated (the cuts ``decode_batches`` makes, so the whole equals the non-live decode) and
  are laid out as ``timeline.join_pieces`` lays them out: the pause between turns is emitted
  when a turn starts, and a fade-in or fade-out around a pause is applied as soon as it is
  known (only the last ``FADE_SECONDS`` of a turn before a pause wait for the turn's end).
  Take 1's decoded waveform is reused by the synthesizer, so nothing is decoded twice.
* ``LiveCues`` (subtitles): the codec's whole-clip decode of a cue is not bit-identical to its
  chunked decode, so each cue is decoded whole (``Synthesizer.decode``, as without live) as
  soon as it is generated, and emitted after the silence that places it; the silence up to
  the last cue's end comes last. The decoded cues are reused by the synthesizer.

The synthesizer calls three hooks per text batch: ``begin(steps)`` before it is generated
(``steps``: the most frames row 0 may produce), ``on_column`` as the engine's per-frame column
callback (None when not needed), and ``end(generated)`` with row 0's ``Generated``.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from .stream import ChunkDecoder
from .timeline import FADE_SECONDS, fade_in, fade_out

OnChunk = Callable[[torch.Tensor, int], None]


class LiveTake:
    """Take 1 of ``tts``/``dialogue``: ``batches`` text batches laid end to end with ``pause``
    seconds between them."""

    def __init__(self, codec, on_chunk: OnChunk, batches: int, pause: float, eos: int):
        self.on_chunk = on_chunk
        self.sample_rate = codec.sample_rate
        self.decoder = ChunkDecoder(codec)
        self.batches, self.eos = batches, eos
        self.gap = round(pause * self.sample_rate)
        self.fade = round(self.sample_rate * FADE_SECONDS)
        self.decoded: list[torch.Tensor] = []  # every decoded chunk of row 0, all batches
        self.index = -1  # the text batch being generated

    def waveform(self) -> torch.Tensor:
        """Row 0's codes decoded in one causal pass: what ``decode_batches`` returns for them."""
        return torch.cat(self.decoded) if self.decoded else torch.zeros(0)

    # ---------------------------------------------------------------- hooks
    def begin(self, steps: int) -> None:
        self.index += 1
        self.limit, self.frames, self.ended = steps, 0, False
        self.piece: list[torch.Tensor] = []  # this batch's decoded chunks
        self.sent = 0  # samples of this batch's piece handed out
        self.fades_in = bool(self.gap) and self.index > 0
        self.fades_out = bool(self.gap) and self.index + 1 < self.batches
        if self.fades_in:
            self._send(torch.zeros(self.gap))  # the pause before this turn

    def on_column(self, column: torch.Tensor) -> None:
        """One engine column ``[B, 1 + K]``: row 0's frame up to its ``<|im_end|>`` or its
        length limit (the frames ``Generated.codes`` keeps)."""
        if self.ended:
            return
        row = column[0]
        if int(row[0]) == self.eos:
            self.ended = True
            self._add(self.decoder.flush(), final=False)
            return
        self.frames += 1
        self.ended = self.frames >= self.limit
        chunks = self.decoder.push(row[1:, None])
        self._add(chunks + (self.decoder.flush() if self.ended else []), final=False)

    def end(self, generated) -> None:
        """Row 0's batch is done: decode what the columns did not deliver, send the rest."""
        codes = generated.codes
        if self.frames > codes.shape[1]:
            raise RuntimeError(f"live decode ran ahead of the result ({self.frames} frames "
                               f"for {codes.shape[1]})")
        chunks = self.decoder.push(codes[:, self.frames:]) if codes.shape[1] > self.frames \
            else []
        self.frames = codes.shape[1]
        self._add(chunks + self.decoder.flush(), final=True)

    # ---------------------------------------------------------------- laying out
    def _add(self, chunks: list[torch.Tensor], final: bool) -> None:
        self.decoded += chunks
        self.piece += chunks
        if not (self.fades_in or self.fades_out):  # no pause: the decode is the output
            for chunk in chunks:
                self._send(chunk.clone())
            self.sent += sum(c.shape[0] for c in chunks)
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
        """This batch's piece so far as ``join_pieces`` shapes it (fade-out only at the end)."""
        piece = torch.cat(self.piece)
        if self.fades_in:
            piece = fade_in(piece, self.sample_rate)
        if self.fades_out and final:
            piece = fade_out(piece, self.sample_rate)
        return piece

    def _send(self, samples: torch.Tensor) -> None:
        if samples.shape[0]:
            self.on_chunk(samples, self.sample_rate)


class LiveCues:
    """``subtitles``: cue i's speech ``decode(codes)`` placed as ``timeline.place_cues``
    places it."""

    on_column = None  # cues are decoded whole, not frame by frame

    def __init__(self, cues: Sequence, decode: Callable[[torch.Tensor], torch.Tensor],
                 on_chunk: OnChunk, sample_rate: int):
        self.cues, self.decode, self.on_chunk = cues, decode, on_chunk
        self.sample_rate = sample_rate
        self.waves: list[torch.Tensor] = []  # each cue's decoded speech, in cue order
        self.cursor = 0  # samples handed out

    def begin(self, steps: int) -> None:
        pass

    def end(self, generated) -> None:
        wave = self.decode(generated.codes)
        cue = self.cues[len(self.waves)]
        self.waves.append(wave)
        start = max(round(cue.start * self.sample_rate), self.cursor)
        self._send(torch.zeros(start - self.cursor), wave.clone())
        self.cursor = start + wave.shape[0]
        if len(self.waves) == len(self.cues):  # the silence up to the last cue's end
            self._send(torch.zeros(max(0, round(cue.end * self.sample_rate) - self.cursor)))

    def _send(self, *pieces: torch.Tensor) -> None:
        for samples in pieces:
            if samples.shape[0]:
                self.on_chunk(samples, self.sample_rate)
