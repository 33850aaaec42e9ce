"""Streaming speech: audio chunks while the model is still generating.

    for chunk in synth.stream("Hello there!", voice=voice, seed=1):   # float32 [n] each
        player.write(chunk.numpy())

``AudioStream`` runs one streaming ``SpeechJob`` (``driver``) on a worker thread, text batch after
text batch (``run_round``), and hands its chunks to the consumer. The job is planned, prompted,
seeded and decoded exactly as ``Synthesizer.tts`` does it, so with the same settings the
concatenated stream equals the non-streamed waveform exactly.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator

import torch

from ..params import Cancelled
from ..speech.finishing import Finishing
from .driver import SpeechJob, run_round
from .layout import PLAIN, TakeLayout, layout_needed


class AudioStream:
    """Iterator of float32 waveform chunks ``[n]`` (CPU) from one ``SpeechJob``, generated on a
    worker thread. Closing it (or leaving a ``with`` block) cancels the generation."""

    _END = object()

    def __init__(self, runtime, job: SpeechJob, finishing: Finishing = PLAIN):
        self.runtime = runtime
        self.job = job
        self.sample_rate = runtime.sample_rate
        self._queue: queue.Queue = queue.Queue()
        job.emit = self._queue.put
        if layout_needed(job.batches, 0.0, finishing):  # pauses, speed, loudness
            layout = TakeLayout(lambda samples, rate: self._queue.put(samples),
                                self.sample_rate, job.batches, 0.0, finishing)
            job.emit, job.end_batch = layout.chunk, layout.end_batch
        self._thread = threading.Thread(target=self._run, name="sailfish-stream", daemon=True)
        self._thread.start()

    @property
    def seed(self) -> int:
        return self.job.seed

    def _run(self) -> None:
        try:
            while not self.job.done and not self.job.stopped:
                run_round(self.runtime, [self.job])
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
