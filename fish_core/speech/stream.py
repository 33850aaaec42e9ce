"""``Stream``: float32 chunks made on a worker thread, handed to the consumer as they come.

    for chunk in synth.stream("Hello there!", voice=voice, seed=1):   # float32 [n] each
        player.write(chunk.numpy())

Both synthesizers stream through it (``speech.front.Front.stream``): the work (the local
synthesizer's streaming job, a remote engine's requests) runs on the worker and puts its chunks,
laid out by a ``speech.layout.TakeLayout`` when pauses, speed or loudness ask for it, so the
concatenated stream is the waveform ``tts`` returns for the same request. Closing the stream (or
leaving a ``with`` block) cancels the work.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator

import torch

from ..params import Cancelled

Put = Callable[[torch.Tensor], None]


class Stream:
    """Iterator of float32 waveform chunks ``[n]`` (CPU). ``work(put)`` makes them on a worker
    thread; ``cancel()`` stops it, ``cancelled()`` says whether it was stopped (a ``Cancelled``
    it raises then is the end, not an error); ``wait``: ``close`` waits for the worker."""

    _END = object()

    def __init__(self, work: Callable[[Put], None], sample_rate: Callable[[], int], seed: int,
                 cancel: Callable[[], None], cancelled: Callable[[], bool], wait: bool = True):
        self._rate, self.seed = sample_rate, seed
        self._cancel, self._cancelled, self._wait = cancel, cancelled, wait
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, args=(work,), name="sailfish-stream",
                                        daemon=True)
        self._thread.start()

    @property
    def sample_rate(self) -> int:
        return self._rate()

    def _run(self, work: Callable[[Put], None]) -> None:
        try:
            work(self._queue.put)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            self._queue.put(e)
        self._queue.put(self._END)

    def __iter__(self) -> Iterator[torch.Tensor]:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                if isinstance(item, Cancelled) and self._cancelled():
                    return
                raise item
            yield item

    def close(self) -> None:
        """Cancel the work (and, locally, wait at most a frame or so for the worker to stop)."""
        self._cancel()
        if self._wait:
            self._thread.join()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
