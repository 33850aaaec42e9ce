"""Streaming speech: audio chunks while the model is still generating.

    for chunk in synth.stream("Hello there!", voice=voice, seed=1):   # float32 [n] each
        player.write(chunk.numpy())

Frames are decoded as they arrive with one codec state per stream (the codec's exact chunked
decode). Chunk boundaries follow one fixed rule (``ChunkDecoder``): the first chunk after
``first_frames`` frames, each next one twice as long up to ``chunk_frames``, and the rest of
every text batch when it ends. ``Synthesizer.tts`` decodes through the same ``ChunkDecoder``,
so with the same settings the concatenated stream equals the non-streamed waveform exactly (the
same operations in the same order).

``SpeechJob`` is one request planned as ``Synthesizer.tts`` plans it (same text batches,
prompts, history and per-batch seeds); ``run_round`` generates the next text batch of one or
several jobs together (one engine batch, one seed per row). The Python stream runs its job on
a worker thread; the HTTP server's scheduler runs many (``fish_core.serve.scheduler``).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Iterator, Sequence

import torch

from ..text import plan as textplan
from ..engine.generate import Cancelled, Generated, GenerationError, SamplingParams, batch_seed, \
    check_seed, random_seed
from ..speech.voices import Voice

FIRST_FRAMES = 4  # first audio after this many frames (~0.19 s of speech)
CHUNK_FRAMES = 32  # later chunks double up to this many frames (~1.5 s)


def check_frames(value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
        raise ValueError(f"{field} must be an integer in 1 .. 1024, got {value!r}")
    return value


class ChunkDecoder:
    """Codes ``[K, n]`` pushed in any pieces → waveform chunks (float32 ``[frames * hop]``,
    CPU), cut by the fixed rule above."""

    def __init__(self, codec, first_frames: int = FIRST_FRAMES,
                 chunk_frames: int = CHUNK_FRAMES):
        self.codec = codec
        self.size = check_frames(first_frames, "first_frames")
        self.most = max(check_frames(chunk_frames, "chunk_frames"), self.size)
        self.state: dict = {}
        self.pending: list[torch.Tensor] = []  # [K, n] pieces not yet decoded
        self.pending_frames = 0
        self.frames = 0  # frames decoded so far

    def push(self, codes: torch.Tensor) -> list[torch.Tensor]:
        """Add frames ``[K, n]``; returns the chunks that became due (often none)."""
        self.pending.append(codes)
        self.pending_frames += codes.shape[1]
        chunks = []
        while self.pending_frames >= self.size:
            chunks.append(self._decode(self.size))
            self.size = min(2 * self.size, self.most)
        return chunks

    def flush(self) -> list[torch.Tensor]:
        """Decode every pending frame (end of a text batch)."""
        return [self._decode(self.pending_frames)] if self.pending_frames else []

    def _decode(self, n: int) -> torch.Tensor:
        codes = torch.cat(self.pending, dim=1)  # [K, pending]
        head, rest = codes[:, :n], codes[:, n:]
        self.pending = [rest] if rest.shape[1] else []
        self.pending_frames = rest.shape[1]
        self.frames += n
        return self.codec.decode_chunk(head[None], self.state)[0, 0].cpu()  # [n * hop]


def decode_batches(codec, codes: Sequence[torch.Tensor], first_frames: int = FIRST_FRAMES,
                   chunk_frames: int = CHUNK_FRAMES) -> torch.Tensor:
    """The non-streamed waveform of consecutive text batches' codes (each ``[K, n]``): what a
    stream of them concatenates to."""
    decoder = ChunkDecoder(codec, first_frames, chunk_frames)
    chunks = []
    for piece in codes:
        chunks += decoder.push(piece)
        chunks += decoder.flush()
    return torch.cat(chunks) if chunks else torch.zeros(0)


class SpeechJob:
    """One text-to-speech request, generated text batch by text batch exactly as
    ``Synthesizer.tts`` does it, and decoded as its frames arrive.

    ``emit(chunk)`` receives each waveform chunk (on the generating thread). ``cancel()`` stops
    it within a frame; ``deadline`` (``time.monotonic()`` seconds) is a timeout."""

    def __init__(self, synth, text: str, voices: Sequence[Voice] = (), *,
                 params: SamplingParams = SamplingParams(), seed: int | None = None,
                 max_bytes: int = textplan.DEFAULT_MAX_BYTES, history_turns: int = 3,
                 first_frames: int = FIRST_FRAMES, chunk_frames: int = CHUNK_FRAMES,
                 emit: Callable[[torch.Tensor], None] | None = None,
                 deadline: float | None = None):
        if not isinstance(text, str) or not text.strip():
            raise ValueError("text is empty: nothing to say")
        if isinstance(history_turns, bool) or not isinstance(history_turns, int) \
                or history_turns < 0:
            raise ValueError(f"history_turns must be an integer >= 0, got {history_turns!r}")
        self.synth = synth
        self.params = params.validate()
        self.batches = textplan.plan_batches(text, max_bytes)
        self.references = [ref for i, v in enumerate(voices) for ref in v.tagged(i)]
        for v in voices:
            for clip in v.clips:
                synth.encoder.check_codes(clip.codes, f"voice {v.name!r}")
        self.seed = random_seed() if seed is None else check_seed(seed)
        self.history_turns = history_turns
        self.decoder = ChunkDecoder(synth.require_codec(), first_frames, chunk_frames)
        self.emit = emit or (lambda chunk: None)
        self.deadline = deadline
        self._cancelled = threading.Event()
        self.batch = 0  # index of the text batch generated next
        self.error: Exception | None = None  # why it failed, when it did
        self.history: list[tuple[str, torch.Tensor]] = []

    # ---------------------------------------------------------------- state
    @property
    def done(self) -> bool:
        return self.batch >= len(self.batches)

    @property
    def batch_seed(self) -> int:
        return batch_seed(self.seed, self.batch)

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @property
    def timed_out(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    @property
    def stopped(self) -> bool:
        return self.cancelled or self.timed_out

    # ---------------------------------------------------------------- one text batch
    def prompt(self) -> torch.Tensor:
        """The prompt ``[1 + K, T]`` of the next text batch; resets the per-batch frame count."""
        history = self.history[-self.history_turns:] if self.history_turns else []
        prompt = self.synth._prompt(self.batches[self.batch], self.references, history,
                                    self.params.max_new_tokens)
        self.limit = min(self.params.max_new_tokens, self.synth.engine.max_context - prompt.shape[1])
        self.columns = 0
        self.ended = False
        return prompt

    def feed(self, column: torch.Tensor) -> None:
        """One generated column ``[1 + K]``: its codes are decoded when a chunk is due. Columns
        from ``<|im_end|>`` on, or past the length limit, are ignored."""
        if self.ended or self.stopped:
            return
        self.columns += 1
        chunks = []
        if int(column[0]) == self.synth.config.eos_token_id:
            self.ended = True
        else:
            self.ended = self.columns >= self.limit
            chunks = self.decoder.push(column[1:, None])
        if self.ended:  # the batch's last audio now, not when the other rows are done
            chunks += self.decoder.flush()
        for chunk in chunks:
            self.emit(chunk)

    def finish_batch(self, gen: Generated) -> None:
        """The text batch is generated: decode any frames left and keep it as history."""
        for chunk in self.decoder.flush():
            self.emit(chunk)
        self.history.append((self.batches[self.batch], gen.codes))
        self.batch += 1
        if self.done and self.decoder.frames == 0:
            raise GenerationError("the model ended the speech before producing any audio; "
                                  "try another seed or rephrase the text")


def run_round(synth, jobs: Sequence[SpeechJob]) -> None:
    """Generate the next text batch of every job, together (one engine batch, one seed per
    row). Stops with ``Cancelled`` within a frame once every job is cancelled or timed out; a
    job that fails at the end of its batch keeps the exception in ``job.error``."""
    ready, prompts = [], []
    for job in jobs:  # a prompt that cannot fit fails its own job only
        try:
            prompts.append(job.prompt())
            ready.append(job)
        except GenerationError as e:
            job.error = e
    if not ready:
        return
    jobs = ready

    def on_column(column: torch.Tensor) -> None:  # [B, 1 + K]
        for job, row in zip(jobs, column):
            job.feed(row)

    def cancel() -> bool:
        return all(job.stopped for job in jobs)

    if len(jobs) == 1:
        gens = synth.engine.generate(prompts[0], jobs[0].params, seed=jobs[0].batch_seed,
                                     on_column=on_column, cancel=cancel)
    else:
        gens = synth.engine.generate(prompts, [job.params for job in jobs],
                                     seeds=[job.batch_seed for job in jobs],
                                     on_column=on_column, cancel=cancel)
    for job, gen in zip(jobs, gens):
        if not job.stopped:
            try:
                job.finish_batch(gen)
            except GenerationError as e:
                job.error = e


class AudioStream:
    """Iterator of float32 waveform chunks ``[n]`` (CPU) from one ``SpeechJob``, generated on a
    worker thread. Closing it (or leaving a ``with`` block) cancels the generation."""

    _END = object()

    def __init__(self, synth, job: SpeechJob):
        self.synth = synth
        self.job = job
        self.sample_rate = synth.sample_rate
        self._queue: queue.Queue = queue.Queue()
        job.emit = self._queue.put
        self._thread = threading.Thread(target=self._run, name="sailfish-stream", daemon=True)
        self._thread.start()

    @property
    def seed(self) -> int:
        return self.job.seed

    def _run(self) -> None:
        try:
            while not self.job.done and not self.job.stopped:
                run_round(self.synth, [self.job])
                if self.job.error is not None:
                    raise self.job.error
            if self.job.timed_out:
                raise TimeoutError("the stream ran past its deadline")
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            self._queue.put(e)
        self._queue.put(self._END)

    def __iter__(self) -> Iterator[torch.Tensor]:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                if isinstance(item, Cancelled) and self.job.cancelled:
                    return
                raise item
            yield item

    def close(self) -> None:
        """Cancel the generation and wait (at most a frame or so) for the worker to stop."""
        self.job.cancel()
        self._thread.join()

    def __enter__(self) -> "AudioStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
