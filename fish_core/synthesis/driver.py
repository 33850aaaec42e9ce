"""The one generation driver: tts, dialogue, subtitles, takes, ``stream`` and the HTTP
scheduler all generate through ``SpeechJob`` + ``run_round`` and decode through ``ChunkDecoder``.

A ``SpeechJob`` is one take of one request: its text batches generated in order, each prompted
with the voices' references plus the job's own last ``history_turns`` batches, batch ``b``
drawn with ``batch_seed(seed, b)``. ``run_round`` generates the next batch of several jobs
together (one engine batch, one seed per row): the takes of one request, or the requests the
HTTP service batches. Every job decodes its frames through one ``ChunkDecoder`` (one causal
codec state; a fresh one per batch for subtitles, whose cues are separate clips) and hands each
chunk, in order, to ``emit``; a whole clip is those chunks concatenated. So a stream, a whole
clip and take k of N are the same operations in the same order, by construction.

Chunk boundaries follow one fixed rule (``ChunkDecoder``): the first chunk after
``first_frames`` frames, each next one twice as long up to ``chunk_frames``, and the rest of
every text batch when it ends. A streaming job (``live``) receives its frames as they are
generated; a whole-clip job gets them when its batch is done (no host sync per frame). The
rule depends on neither.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

import torch

from ..params import CHUNK_FRAMES, DEFAULTS, FIRST_FRAMES, Generated, GenerationError, \
    SamplingParams, batch_seed, pick_seed
from ..speech.results import Batch, BatchResult
from ..speech.voices import Voice
from ..text import plan as textplan


def check_frames(value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
        raise ValueError(f"{field} must be an integer in 1 .. 1024, got {value!r}")
    return value


def check_history_turns(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"history_turns must be an integer >= 0, got {value!r}")
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
    """The waveform of consecutive text batches' codes (each ``[K, n]``), decoded as a job
    decodes them: what a stream of them concatenates to."""
    decoder = ChunkDecoder(codec, first_frames, chunk_frames)
    chunks = []
    for piece in codes:
        chunks += decoder.push(piece)
        chunks += decoder.flush()
    return torch.cat(chunks) if chunks else torch.zeros(0)


class SpeechJob:
    """One take of one request, generated text batch by text batch and decoded as it goes.

    ``text`` is planned into batches (``max_bytes``), or ready ``Batch``es are given. ``emit(chunk)``
    receives each waveform chunk in order (on the generating thread); with ``keep`` the job also
    keeps them per batch (``waveform``, ``batch_waves``). ``live``: frames are decoded as they
    are generated (streaming) rather than when the batch is done. ``clip_per_batch``: each
    batch is decoded from a fresh codec state (subtitle cues are separate clips).
    ``end_batch()``, when given, is called once a batch's last chunk is emitted (live playback
    lays the chunks out by batch). ``cancel()`` stops it within a frame; ``deadline``
    (``time.monotonic()`` seconds) is a timeout."""

    def __init__(self, synth, text: str | Sequence[Batch], voices: Sequence[Voice] = (), *,
                 params: SamplingParams = DEFAULTS, seed: int | None = None,
                 max_bytes: int = textplan.DEFAULT_MAX_BYTES, history_turns: int = 3,
                 first_frames: int = FIRST_FRAMES, chunk_frames: int = CHUNK_FRAMES,
                 emit: Callable[[torch.Tensor], None] | None = None,
                 deadline: float | None = None, live: bool = True, keep: bool = False,
                 clip_per_batch: bool = False, end_batch: Callable[[], None] | None = None):
        if isinstance(text, str):
            if not text.strip():
                raise ValueError("text is empty: nothing to say")
            batches = [Batch(b) for b in textplan.plan_batches(text, max_bytes)]
        else:
            batches = list(text)
        self.history_turns = check_history_turns(history_turns)
        self.synth = synth
        self.params = params.validate()
        self.batches = batches
        self.references = synth.references(voices)
        self.prefix = None  # the voice prefix's length (its KV is reused across prompts)
        self.seed = pick_seed(seed)
        self.chunking = (first_frames, chunk_frames)
        self.decoder = ChunkDecoder(synth.require_codec(), first_frames, chunk_frames)
        self.emit = emit or (lambda chunk: None)
        self.deadline = deadline
        self.live, self.keep, self.clip_per_batch = live, keep, clip_per_batch
        self.end_batch = end_batch
        self._cancelled = threading.Event()
        self.batch = 0  # index of the text batch generated next
        self.error: Exception | None = None  # why it failed, when it did
        self.results: list[BatchResult] = []  # one per generated batch
        self.batch_waves: list[list[torch.Tensor]] = []  # with keep: the chunks of each batch
        self.frames = 0  # frames decoded, all batches

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
        prompt = self.synth.prompt(self.batches[self.batch].text, self.references, history,
                                   self.params.max_new_tokens)
        if self.prefix is None:
            self.prefix = self.synth.prefix_length(self.references)
        self.limit = min(self.params.max_new_tokens, self.synth.max_context - prompt.shape[1])
        self.columns = 0
        self.ended = False
        if self.clip_per_batch:
            self.decoder = ChunkDecoder(self.synth.require_codec(), *self.chunking)
        self.batch_waves.append([])
        return prompt

    def feed(self, column: torch.Tensor) -> None:
        """One generated column ``[1 + K]`` (live jobs): its codes are decoded when a chunk is
        due. Columns from ``<|im_end|>`` on, or past the length limit, are ignored."""
        if self.ended or self.stopped or not self.live:
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
        self._emit(chunks)

    def finish_batch(self, gen: Generated, seconds: float = 0.0) -> None:
        """The text batch is generated: decode the frames left and keep it as history."""
        chunks = [] if self.live else self.decoder.push(gen.codes)
        self._emit(chunks + self.decoder.flush())
        if self.end_batch is not None:
            self.end_batch()
        self.results.append(BatchResult(self.batches[self.batch], gen, seconds))
        self.frames += gen.codes.shape[1]
        self.batch += 1
        if self.done and self.frames == 0 and not self.clip_per_batch:
            raise GenerationError(f"the model ended the speech (seed {self.seed}) before "
                                  "producing any audio; try another seed or rephrase the text")

    def _emit(self, chunks: list[torch.Tensor]) -> None:
        for chunk in chunks:
            if self.keep:
                self.batch_waves[-1].append(chunk)
            self.emit(chunk)


def run_round(synth, jobs: Sequence[SpeechJob],
              on_frame: Callable[[int, int], None] | None = None,
              cancel: Callable[[], bool] | None = None) -> None:
    """Generate the next text batch of every job, together (one engine batch, one seed per
    row). Stops with ``Cancelled`` within a frame once ``cancel()`` is true or every job is
    cancelled or timed out; a job that fails (its prompt cannot fit, or it ended without audio)
    keeps the exception in ``job.error``. ``on_frame(done, total)`` reports progress."""
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

    def stop() -> bool:
        return (cancel is not None and cancel()) or all(job.stopped for job in jobs)

    live = {"on_column": on_column} if any(job.live for job in jobs) else {}
    t0 = time.perf_counter()
    gens = synth.generate(prompts, [job.params for job in jobs],
                          seeds=[job.batch_seed for job in jobs], on_frame=on_frame,
                          cancel=stop, prefixes=[job.prefix for job in jobs], **live)
    seconds = time.perf_counter() - t0
    for job, gen in zip(jobs, gens):
        if not job.stopped:
            try:
                job.finish_batch(gen, seconds)
            except GenerationError as e:
                job.error = e


class JobRows:
    """Continuous batching of jobs (the counterpart of ``run_round``): each job's current text
    batch decodes in a row of one running ``RowBatch``. ``add(job)`` prefills the job's next
    text batch into a free row at once (between frames); ``step()`` makes one frame for every
    row and returns the jobs whose text batch ended, failed, or which were cancelled or timed
    out: they have left their rows, freeing them for the next. A job with text batches left is
    added again by the caller (so it can go to the back of a queue). Each row draws from its
    job's own seed, so a job's codes and audio are those it makes alone."""

    def __init__(self, synth, rows: int):
        self.synth = synth
        self.batch = synth.row_batch(rows)
        self.jobs: dict[int, SpeechJob] = {}
        self.started: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self.jobs)

    @property
    def free(self) -> int:
        return self.batch.free

    def add(self, job: SpeechJob) -> bool:
        """Start the job's next text batch in a free row; False (with ``job.error``) when its
        prompt cannot fit."""
        try:
            prompt = job.prompt()
        except GenerationError as e:
            job.error = e
            return False
        row, column = self.batch.join(prompt, job.params, job.batch_seed, job.prefix)
        self.jobs[row] = job
        self.started[row] = time.perf_counter()
        job.feed(column)
        return True

    def step(self) -> list[SpeechJob]:
        """One frame for every row (when any is busy and unfinished); returns the jobs that
        left their rows."""
        if any(not self.batch.ended(r) and not job.stopped for r, job in self.jobs.items()):
            columns = self.batch.step()
            for row, job in self.jobs.items():
                job.feed(columns[row])  # a job ignores columns past its batch's end
        return self.collect()

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
