"""One worker thread per model: a fair queue of speech tasks, batched when they arrive together.

The engine runs one generation at a time, so every task goes through this queue. Each round
takes up to ``max_batch`` tasks from the front and generates the next text batch of each as one
engine batch (one seed per row, so a batched request sounds exactly as it would alone); a task
with more text batches goes to the back of the queue, so a long text cannot hold the model while
short requests wait (round robin by text batch).

A task reports to its ``emit(kind, value)``, on the worker thread: ``("start", {"sample_rate",
"seed", "frame_length"})``, then ``("chunk", waveform)`` for each chunk, then ``("done", None)`` or
``("error", ApiError)``. ``cancel()`` (client gone) stops its generation within a frame once no
other row of the batch needs the model; a task past its deadline ends with a 504 error.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import AbstractContextManager
from typing import Callable

from ..params import Cancelled, GenerationError, SamplingParams
from ..synthesis.driver import SpeechJob, run_round
from ..speech.voices import Voice
from .logs import log
from .requests import ApiError, Limits, SpeechRequest, decode_reference, detail
from .voicelib import VoiceLibrary

Emit = Callable[[str, object], None]


class Task:
    def __init__(self, request: SpeechRequest, emit: Emit, timeout: float):
        self.request = request
        self.emit = emit
        self.deadline = time.monotonic() + timeout
        self.job: SpeechJob | None = None
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        self.cancelled.set()
        if self.job is not None:
            self.job.cancel()

    @property
    def timed_out(self) -> bool:
        return time.monotonic() > self.deadline


class Scheduler:
    def __init__(self, model: Callable[[], AbstractContextManager], voices: VoiceLibrary,
                 limits: Limits, max_batch: int = 1, batch_wait: float = 0.01,
                 default_voice: str | None = None):
        """``model()``: a context manager that yields the Synthesizer, loaded, for one round."""
        self.model = model
        self.voices = voices
        self.limits = limits
        self.max_batch = max(1, int(max_batch))
        self.batch_wait = batch_wait
        self.default_voice = default_voice
        self._queue: deque[Task] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.busy = False  # a round is running
        self.batch_sizes: list[int] = []  # of every round run (for tests and the bench)

    # ---------------------------------------------------------------- client side
    def submit(self, request: SpeechRequest, emit: Emit) -> Task:
        task = Task(request, emit, self.limits.timeout_seconds)
        with self._cond:
            if self._closed:
                raise ApiError(503, "the server is shutting down")
            self._queue.append(task)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="sailfish-scheduler",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        return task

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            for task in self._queue:
                task.cancel()
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # ---------------------------------------------------------------- worker
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
            if self.max_batch > 1 and len(self._queue) < self.max_batch:
                time.sleep(self.batch_wait)  # let requests that arrive together join
            with self._cond:
                tasks = [self._queue.popleft()
                         for _ in range(min(self.max_batch, len(self._queue)))]
            self.busy = True
            try:
                with self.model() as synth:
                    self._round(synth, tasks)
            except Exception as e:  # noqa: BLE001 - e.g. the model failed to load
                for task in tasks:
                    fail(task, e)
            finally:
                self.busy = False

    def _round(self, synth, tasks: list[Task]) -> None:
        live = []
        for task in tasks:
            if task.cancelled.is_set():
                continue
            if task.timed_out:
                fail(task, ApiError(504, "the request timed out while queued"))
                continue
            if task.job is None:
                try:
                    self._start(synth, task)
                except Exception as e:  # noqa: BLE001 - a bad voice or reference
                    fail(task, e)
                    continue
            live.append(task)
        if not live:
            return
        self.batch_sizes.append(len(live))
        try:
            run_round(synth, [task.job for task in live])
        except Cancelled:
            pass  # every row was cancelled or timed out: sorted out below
        except Exception as e:  # noqa: BLE001 - reported to every task of the round
            for task in live:
                fail(task, e)
            return
        for task in live:
            job = task.job
            if task.cancelled.is_set():
                continue
            if job.timed_out:
                fail(task, ApiError(504, f"the request ran past its {self.limits.timeout_seconds:g}"
                                         " s timeout"))
            elif job.error is not None:
                fail(task, job.error)
            elif job.done:
                task.emit("done", None)
            else:
                with self._cond:
                    self._queue.append(task)  # its next text batch waits its turn

    def _start(self, synth, task: Task) -> None:
        """Build the task's voice and job (on the worker: the codec encodes references)."""
        request = task.request
        c = synth.config
        clips = []
        voice = request.voice or self.default_voice
        if voice:
            param = request.voice_param if request.voice else "default_voice"
            clips += self.voices.load(voice, param, c.num_codebooks, c.codebook_size).clips
        for ref in request.references:
            wave, sample_rate = decode_reference(ref.audio, ref.param, self.limits)
            clips += synth.encode_voice(wave, ref.text, sample_rate=sample_rate).clips
        voices = [Voice("speaker", clips, synth.sample_rate)] if clips else []
        params = SamplingParams(request.temperature, request.top_p, request.top_k,
                                request.max_new_tokens)
        task.job = SpeechJob(synth, request.text, voices, params=params, seed=request.seed,
                             max_bytes=request.max_bytes,
                             emit=lambda chunk: task.emit("chunk", chunk),
                             deadline=task.deadline)
        if task.cancelled.is_set():
            task.job.cancel()
        task.emit("start", {"sample_rate": synth.sample_rate, "seed": task.job.seed,
                            "frame_length": synth.codec.frame_length})


def fail(task: Task, error: Exception) -> None:
    """Report ``error`` to the task's client as an ApiError; never a traceback."""
    if isinstance(error, ApiError):
        task.emit("error", error)
    elif isinstance(error, (GenerationError, ValueError)):
        task.emit("error", ApiError(422, detail(error)))
    else:
        log.error("Sailfish serve: request failed", exc_info=error)
        task.emit("error", ApiError(500, f"internal error ({type(error).__name__}); "
                                         "see the server log"))
