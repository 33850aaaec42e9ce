"""The one generation driver: tts, dialogue, subtitles, takes, ``stream`` and the HTTP
scheduler all generate through ``SpeechJob`` in the rows of ``JobRows`` and decode through
``ChunkDecoder``.

A ``SpeechJob`` is one take of one request: its text batches generated in order, each prompted
with the voices' references (the system turn, encoded once) plus the job's own last
``history_turns`` batches, batch ``b`` drawn with ``batch_seed(seed, b)``. ``JobRows`` decodes
jobs' text batches in the rows of one ``RowBatch`` (the one decode loop; one seed per row):
``run_round`` is the static use, the next batch of several jobs joining together (the takes of
one request) and decoding to their ends (``rows.run_to_end``); the HTTP scheduler steps
``JobRows`` itself, adding jobs as its policy lets them in. Every job decodes its
frames through one ``ChunkDecoder`` (one causal codec state; a fresh one per batch for
subtitles, whose cues are separate clips) and hands each chunk, in order, to ``emit``; a whole
clip is those chunks concatenated. So a stream, a whole clip and take k of N are the same
operations in the same order, by construction.

Chunk boundaries follow one fixed rule (``ChunkDecoder``): the first chunk after
``first_frames`` frames, each next one twice as long up to ``chunk_frames``, and the rest of
every text batch when it ends. A streaming job (``streaming``) receives its frames as they are
generated; a whole-clip job gets them when its batch is done (no host sync per frame). The
rule depends on neither.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from ..params import (CHUNK_FRAMES, DEFAULTS, FIRST_FRAMES, Generated, GenerationError,
                      SamplingParams, batch_seed, random_seed)
from ..speech.results import Batch, BatchResult
from ..speech.voices import Voice
from ..text import plan as textplan
from ..text.pace import Pace

if TYPE_CHECKING:  # the engine is imported when a model is loaded, not with the driver
    from .runtime import Runtime


class ChunkDecoder:
    """Codes ``[K, n]`` pushed in any pieces → waveform chunks (float32 ``[frames * hop]``,
    CPU), cut by the fixed rule above."""

    def __init__(self, codec, first_frames: int = FIRST_FRAMES,
                 chunk_frames: int = CHUNK_FRAMES):
        self.codec = codec
        self.size = first_frames  # checked with the request (``speech.request``)
        self.most = max(chunk_frames, self.size)
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
    """The waveform of consecutive text batches' codes (each ``[K, n]``), decoded as a job
    decodes them: what a stream of them concatenates to."""
    decoder = ChunkDecoder(codec, first_frames, chunk_frames)
    chunks = []
    for piece in codes:
        chunks += decoder.push(piece)
        chunks += decoder.flush()
    return torch.cat(chunks) if chunks else torch.zeros(0)


def job_batches(text: str | Sequence[Batch], max_bytes: int) -> list[Batch]:
    """A job's text batches: ``text`` planned into batches of at most ``max_bytes``, or the
    ready ``Batch``es given."""
    if isinstance(text, str):
        if not text.strip():
            raise ValueError("text is empty: nothing to say")
        return [Batch(b) for b in textplan.plan_batches(text, max_bytes)]
    return list(text)


class SpeechJob:
    """One take of one request, generated text batch by text batch and decoded as it goes.

    ``text`` is planned into batches (``max_bytes``), or ready ``Batch``es are given.
    ``emit(chunk)`` receives each waveform chunk in order (on the generating thread); with
    ``keep`` the job also keeps them per batch (``waveform``, ``batch_waves``). ``streaming``:
    frames are decoded as they are generated rather than when the batch is done.
    ``clip_per_batch``: each batch is decoded from a fresh codec state (subtitle cues are
    separate clips). ``end_batch()``, when given, is called once a batch's last chunk is
    emitted (a ``TakeLayout`` lays the chunks out by batch). ``cancel()`` stops it within a
    frame; ``deadline`` (``time.monotonic()`` seconds) is a timeout. The settings are those of
    a checked ``speech.request.Request``: nothing here checks them again."""

    def __init__(self, runtime: Runtime, text: str | Sequence[Batch],
                 voices: Sequence[Voice] = (), *,
                 params: SamplingParams = DEFAULTS, seed: int | None = None,
                 max_bytes: int = textplan.DEFAULT_MAX_BYTES, history_turns: int = 3,
                 first_frames: int = FIRST_FRAMES, chunk_frames: int = CHUNK_FRAMES,
                 emit: Callable[[torch.Tensor], None] | None = None,
                 deadline: float | None = None, streaming: bool = True, keep: bool = False,
                 clip_per_batch: bool = False, end_batch: Callable[[], None] | None = None):
        self.batches = job_batches(text, max_bytes)
        self.history_turns = history_turns
        self.runtime = runtime
        self.params = params
        self.system = runtime.system_turn(runtime.references(voices))  # [1 + K, P]
        self.seed = random_seed() if seed is None else seed
        self.chunking = (first_frames, chunk_frames)
        self.decoder = ChunkDecoder(runtime.require_codec(), first_frames, chunk_frames)
        self.emit = emit or (lambda chunk: None)
        self.deadline = deadline
        self.streaming, self.keep, self.clip_per_batch = streaming, keep, clip_per_batch
        self.end_batch = end_batch
        self._cancelled = threading.Event()
        self.batch = 0  # index of the text batch generated next
        self.error: Exception | None = None  # why it failed, when it did
        self.results: list[BatchResult] = []  # one per generated batch
        self.batch_waves: list[list[torch.Tensor]] = []  # with keep: the chunks of each batch

    # ---------------------------------------------------------------- state
    @property
    def prefix(self) -> int:
        """The voice prefix's length (its KV is reused across prompts)."""
        return self.system.shape[1]

    @property
    def frames(self) -> int:
        """Frames generated, all batches."""
        return sum(result.frames for result in self.results)

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

    @property
    def waveform(self) -> torch.Tensor:
        """With ``keep``: every chunk so far, concatenated (float32 ``[samples]``)."""
        chunks = [c for wave in self.batch_waves for c in wave]
        return torch.cat(chunks) if chunks else torch.zeros(0)

    # ---------------------------------------------------------------- one text batch
    def prompt(self) -> torch.Tensor:
        """The prompt ``[1 + K, T]`` of the next text batch; resets the per-batch frame count."""
        kept = self.results[-self.history_turns:] if self.history_turns else []
        history = [(r.batch.text, r.generated.codes) for r in kept]
        prompt = self.runtime.prompt(self.batches[self.batch].text, self.system, history,
                                     self.params.max_new_tokens)
        self.limit = min(self.params.max_new_tokens, self.runtime.max_context - prompt.shape[1])
        self.columns = 0
        self.ended = False
        if self.clip_per_batch:
            self.decoder = ChunkDecoder(self.runtime.require_codec(), *self.chunking)
        self.batch_waves.append([])
        return prompt

    def feed(self, column: torch.Tensor, eos: bool) -> None:
        """One generated column ``[1 + K]`` (streaming jobs): its codes are decoded when a chunk is
        due. ``eos``: the row has made its ``<|im_end|>`` (this column, or before). Columns
        from ``<|im_end|>`` on, or past the length limit, are ignored."""
        if self.ended or self.stopped or not self.streaming:
            return
        self.columns += 1
        chunks = []
        if eos:
            self.ended = True
        else:
            self.ended = self.columns >= self.limit
            chunks = self.decoder.push(column[1:, None])
        if self.ended:  # the batch's last audio now, not when the other rows are done
            chunks += self.decoder.flush()
        self._emit(chunks)

    def finish_batch(self, gen: Generated, seconds: float = 0.0) -> None:
        """The text batch is generated: decode the frames left and keep it as history."""
        chunks = [] if self.streaming else self.decoder.push(gen.codes)
        self._emit(chunks + self.decoder.flush())
        if self.end_batch is not None:
            self.end_batch()
        self.results.append(BatchResult(self.batches[self.batch], gen, seconds))
        self.batch += 1
        if self.done and self.frames == 0 and not self.clip_per_batch:
            raise GenerationError(f"the model ended the speech (seed {self.seed}) before "
                                  "producing any audio; try another seed or rephrase the text")

    def _emit(self, chunks: list[torch.Tensor]) -> None:
        for chunk in chunks:
            if self.keep:
                self.batch_waves[-1].append(chunk)
            self.emit(chunk)


class JobRows:
    """Jobs decoding in the rows of one ``RowBatch``: each job's current text batch in a row.
    ``add(jobs)`` prefills their next text batches into free rows, together (between frames);
    ``step()`` makes one frame for every row and returns the jobs whose text batch ended,
    failed, or which were cancelled or timed out: they have left their rows, freeing them for
    the next. A job with text batches left is added again by the caller (so it can go to the
    back of a queue). Each row draws from its job's own seed, so a job's codes and audio are
    those it makes alone."""

    def __init__(self, runtime: Runtime, rows: int):
        self.runtime = runtime
        self.batch = runtime.row_batch(rows)
        self.jobs: dict[int, SpeechJob] = {}
        self.started: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self.jobs)

    @property
    def free(self) -> int:
        return self.batch.free

    @torch.inference_mode()  # the codec decodes what the rows make
    def add(self, jobs: Sequence[SpeechJob]) -> list[SpeechJob]:
        """Start the next text batch of each job in a free row, all in one prefill; returns the
        jobs that joined (the others' prompts cannot fit: ``job.error`` says why)."""
        ready, prompts = [], []
        for job in jobs:  # a prompt that cannot fit fails its own job only
            try:
                prompts.append(job.prompt())
                ready.append(job)
            except GenerationError as e:
                job.error = e
        if not ready:
            return []
        rows, columns = self.batch.join_many(prompts, [job.params for job in ready],
                                             [job.batch_seed for job in ready],
                                             [job.prefix for job in ready])
        now = time.perf_counter()
        for job, row, column in zip(ready, rows, columns):
            self.jobs[row] = job
            self.started[row] = now
            job.feed(column, self.batch.stopped(row))
        return ready

    @torch.inference_mode()
    def step(self) -> list[SpeechJob]:
        """One frame for every row (when any job is still decoding); returns the jobs that
        left their rows. The frame reaches the host at once only when a streaming job reads it."""
        if any(not self.batch.ended(r) and not job.stopped for r, job in self.jobs.items()):
            streaming = [(row, job) for row, job in self.jobs.items() if job.streaming]
            columns = self.batch.step(read=bool(streaming))
            for row, job in streaming:
                job.feed(columns[row], self.batch.stopped(row))
        return self.collect()

    @torch.inference_mode()
    def collect(self) -> list[SpeechJob]:
        left = []
        for row, job in list(self.jobs.items()):
            if not (job.stopped or self.batch.ended(row)):
                continue
            gen = self.batch.leave(row)
            del self.jobs[row]
            seconds = time.perf_counter() - self.started.pop(row)
            if not job.stopped:
                try:
                    job.finish_batch(gen, seconds)
                except GenerationError as e:
                    job.error = e
            left.append(job)
        return left


def run_round(runtime: Runtime, jobs: Sequence[SpeechJob],
              on_frame: Callable[[int, int], None] | None = None,
              cancel: Callable[[], bool] | None = None) -> None:
    """Generate the next text batch of every job, together: a static batch, the jobs joining
    one ``JobRows`` at once (one prefill) and decoding until each has ended. Stops with
    ``Cancelled`` within a frame once ``cancel()`` is true; a job that is cancelled or times
    out leaves its row while the others go on; a job that fails (its prompt cannot fit, or it
    ended without audio) keeps the exception in ``job.error``. ``on_frame(done, total)``
    reports progress (``rows.run_to_end``, the one run to the end)."""
    from ..engine.rows import run_to_end  # the model's floor: not at ComfyUI start-up

    rows = JobRows(runtime, len(jobs))
    joined = rows.add(jobs)
    if not joined:
        return
    rows.collect()  # a row that ended on its first column leaves now
    # every job left decodes: one frame, then those that ended leave
    run_to_end(rows.step, lambda: len(rows) > 0, max(job.limit for job in joined), on_frame,
               cancel)


def run_jobs(runtime: Runtime, jobs: list[SpeechJob],
             on_progress: Callable[[int, int], None] | None,
             cancel: Callable[[], bool] | None) -> None:
    """Run jobs in step to their ends (one ``run_round`` per text batch: the takes of one
    request), reporting progress in frames generated against the frames the text is expected
    to take (``text/pace.py``: a guess from its length, corrected as batches end); a job's
    failure is raised."""
    frames = min(jobs[0].params.max_new_tokens, runtime.max_context)  # at most, per batch
    codec = runtime.require_codec()
    pace = Pace([b.text for b in jobs[0].batches], codec.sample_rate / codec.frame_length,
                frames)
    while not jobs[0].done:
        def on_frame(i, n):
            if on_progress is not None:
                on_progress(*pace.frame(i))

        run_round(runtime, jobs, on_frame=on_frame, cancel=cancel)
        for job in jobs:
            if job.error is not None:
                raise job.error
        progress = pace.end_batch()
        if on_progress is not None:
            on_progress(*progress)
