"""One worker thread per model: a fair queue of speech tasks, decoded in batches.

The engine runs one decode at a time, so every task goes through this queue. The worker has
nano-vLLM's shape: one loop (``_run``) that, while rows are busy, takes one ``step``: the tasks
the policy (``schedule``) lets in join free rows of the one decode (``driver.JobRows``, prefilled
together), every row makes one frame, and the tasks whose text batch ended leave. The two ways
to batch (``batching``) are two admission rules of ``schedule``, nothing else:

- ``continuous`` (default): queued tasks join at the next frame boundary whenever rows are free
  (an idle decode first waits ``batch_wait`` for requests that arrive together); a task whose
  text batch ended, or that was cancelled or timed out, leaves its row at once and frees it.
- ``static``: tasks join only when no row is busy, up to ``max_batch`` from the front, together
  (a round), and decode to their ends before the next round joins.

Either way every row has its own seed, so a batched request sounds exactly as it would alone,
and a task with more text batches goes to the back of the queue, so a long text cannot hold the
model while short requests wait (round robin by text batch).

A task reports to its ``emit(kind, value)``, on the worker thread: ``("start", {"sample_rate",
"seed", "frame_length"})``, then ``("chunk", waveform)`` for each chunk, then ``("done", None)`` or
``("error", ApiError)``. ``cancel()`` (client gone) stops its generation within a frame once no
other row of the batch needs the model; a task past its deadline ends with a 504 error. A model
that cannot be loaded (``--lazy``, ComfyUI's) answers every task waiting on it with a 503
(``ModelUnavailable``, its cause in the log); the next task tries the load again.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Callable, Iterator

from ..params import GenerationError
from ..local.driver import JobRows, SpeechJob
from ..text.lexicon import Lexicon
from .request import SpeechRequest
from .http.errors import ApiError, detail, shutting_down
from .http.logs import log
from .jobs import Jobs
from .limits import Limits
from .voicelib import VoiceLibrary

Emit = Callable[[str, object], None]
BATCHING = ("continuous", "static")


class Task:
    def __init__(self, request: SpeechRequest, emit: Emit, timeout: float):
        self.request = request
        self.emit = emit
        self.deadline = time.monotonic() + timeout
        self.job: SpeechJob | None = None
        self.answer: Callable[[], object] | None = None  # a whole answer's finishing (``jobs``)
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
                 default_voice: str | None = None, batching: str = "continuous",
                 lexicon: Lexicon | None = None):
        """``model()``: a context manager that yields the Synthesizer, loaded, while it works
        (the worker uses its ``runtime``); ``lexicon``: the operator's pronunciation lexicon,
        applied to every request."""
        if batching not in BATCHING:
            raise ValueError(f"batching must be one of {', '.join(BATCHING)}, got {batching!r}")
        self.batching = batching
        self.model = model
        self.limits = limits
        self.jobs = Jobs(voices, limits, default_voice, lexicon)  # request -> job
        self.max_batch = max(1, int(max_batch))
        self.batch_wait = batch_wait
        self._queue: deque[Task] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.busy = False  # the worker holds the model, decoding
        # Rows busy after every join (static: every round): for tests and the bench.
        self.batch_sizes: list[int] = []

    # ---------------------------------------------------------------- client side
    def submit(self, request: SpeechRequest, emit: Emit) -> Task:
        task = Task(request, emit, self.limits.timeout_seconds)
        with self._cond:
            if self._closed:
                raise shutting_down()
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
        """Stop: every queued task is told the server is shutting down (and the running ones,
        at the worker's next frame: ``step``), then the worker ends."""
        with self._cond:
            self._closed = True
            for task in self._queue:
                end(task)
            self._queue.clear()
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # ---------------------------------------------------------------- worker
    def _wait_for_work(self) -> bool:
        """Wait until a task is queued (True) or the scheduler is closed (False)."""
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            return not self._closed

    def _gather(self) -> None:
        """Wait ``batch_wait`` for requests that arrive together, so that they start together
        (one prefill)."""
        if self.max_batch > 1 and len(self._queue) < self.max_batch:
            time.sleep(self.batch_wait)

    def _run(self) -> None:
        """The one worker loop: once tasks wait, ``_decode`` until no row is busy."""
        while True:
            if not self._wait_for_work():
                return
            self._gather()  # an idle decode: requests arriving together join in one prefill
            self.busy = True
            try:
                self._decode()
            finally:
                self.busy = False

    def _decode(self) -> None:
        """Hold the model and ``step`` until no row is busy. A model that cannot be loaded
        answers every queued task with its 503 (``_refuse_queued``); the next request tries the
        load again. A failure mid-decode fails the tasks in rows."""
        running: dict[int, Task] = {}  # id(job) -> task, for the jobs in rows
        try:
            with self.loaded() as synth:
                rows = JobRows(synth.runtime, self.max_batch)
                while self.step(synth, rows, running):
                    pass
        except ModelUnavailable as e:
            self._refuse_queued(e)
        except Exception as e:  # noqa: BLE001 - reported to the tasks in rows
            for task in running.values():
                fail(task, e)

    @contextmanager
    def loaded(self) -> Iterator[object]:
        """The model (``model()``), held while the block runs; a model that fails to load is a
        ``ModelUnavailable`` (503), its cause in the server log."""
        with ExitStack() as held:
            try:
                synth = held.enter_context(self.model())
            except Exception as e:  # noqa: BLE001 - any loader's failure: logged, then a 503
                raise unavailable(e) from None
            yield synth

    def _refuse_queued(self, error: ApiError) -> None:
        """The model failed to load: every task queued for it is answered with ``error``."""
        with self._cond:
            tasks = list(self._queue)
            self._queue.clear()
        for task in tasks:
            if not task.cancelled.is_set():  # a client still there
                task.emit("error", error)

    def step(self, synth, rows: JobRows, running: dict[int, Task]) -> bool:
        """One step of the decode: the tasks ``schedule`` lets in join free rows (prefilled
        together), then one frame for every row; the tasks whose text batch ended (or that
        were cancelled or timed out) leave their rows and are settled. False when no row is
        busy."""
        self._admit(rows, self.schedule(synth, rows), running)
        if not len(rows):
            return False
        if self._closed:
            for task in running.values():
                end(task)
        for job in rows.step():
            self._settle(running.pop(id(job)))
        return True

    def schedule(self, synth, rows: JobRows) -> list[Task]:
        """The batching policy, an admission rule: the queued tasks that join the rows now,
        from the front of the queue. ``continuous``: as many as rows are free, whenever they
        are. ``static``: only when no row is busy, then up to ``max_batch`` joining together
        (a round: they decode to their ends before the next joins)."""
        room = rows.free if self.batching == "continuous" or not len(rows) else 0
        tasks = []
        while len(tasks) < room and not self._closed:
            with self._cond:
                if not self._queue:
                    break
                task = self._queue.popleft()
            if self._ready(synth, task):
                tasks.append(task)
        return tasks

    def _ready(self, synth, task: Task) -> bool:
        """Whether a task taken from the queue can join: not cancelled, not past its deadline,
        its job built (``_start``); a task that cannot is reported and dropped."""
        if task.cancelled.is_set():
            return False
        if task.timed_out:
            fail(task, ApiError(504, "the request timed out while queued"))
            return False
        try:
            if task.job is None:
                self._start(synth, task)
        except Exception as e:  # noqa: BLE001 - a bad voice or reference
            fail(task, e)
            return False
        return True

    def _admit(self, rows: JobRows, tasks: list[Task], running: dict[int, Task]) -> None:
        """Move the scheduled tasks into free rows, all prefilled together."""
        if not tasks:
            return
        try:
            joined = {id(job) for job in rows.add([task.job for task in tasks])}
        except Exception as e:  # noqa: BLE001 - reported to every task of the join
            for task in tasks:
                fail(task, e)
            return
        for task in tasks:
            if id(task.job) in joined:
                running[id(task.job)] = task
            else:  # its prompt cannot fit
                fail(task, task.job.error)
        if joined:
            self.batch_sizes.append(len(rows))

    def _settle(self, task: Task) -> None:
        """After a task's text batch: report its end or failure, or queue its next batch."""
        job = task.job
        if task.cancelled.is_set():
            return
        if job.timed_out:
            fail(task, ApiError(504, f"the request ran past its {self.limits.timeout_seconds:g}"
                                     " s timeout"))
        elif job.error is not None:
            fail(task, job.error)
        elif job.done:
            task.emit("done", None)
        else:
            with self._cond:
                if self._closed:
                    end(task)
                else:
                    self._queue.append(task)  # its next text batch waits its turn

    def _start(self, synth, task: Task) -> None:
        """Admit the task's job (``jobs.Jobs``: on the worker, the codec encodes references)."""
        self.jobs.start(synth, task)


class ModelUnavailable(ApiError):
    """The model could not be loaded: a 503 for every request waiting on it."""


def unavailable(error: Exception) -> ModelUnavailable:
    """The 503 of a failed load, its reason the error's type (the message may hold a server
    path: it goes to the log); a provider's own ``ApiError`` (ComfyUI's "no model") as it is."""
    if isinstance(error, ApiError):
        return ModelUnavailable(error.status, error.message, error.param, error.code,
                                error.headers)
    log.error("Sailfish serve: the model could not be loaded", exc_info=error)
    return ModelUnavailable(503, f"the model could not be loaded ({type(error).__name__}); "
                                 "see the server log", None, "model_unavailable")


def end(task: Task) -> None:
    """The server stops: tell the task (once), and stop its generation."""
    if not task.cancelled.is_set():
        task.emit("error", shutting_down())
    task.cancel()


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
