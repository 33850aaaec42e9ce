"""What the HTTP routes serve: one model (through a provider), its queue, a voice library,
limits, the API key and who may call (``Guard``). The same ``Service`` backs the standalone server
and the routes mounted on ComfyUI's server; only the model provider and the guard differ."""

from __future__ import annotations

import asyncio
import hmac
import threading
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Callable, Iterator

from .http.errors import ApiError, shutting_down
from .http.logs import log
from .http.guard import Guard, require_loopback_peer
from .limits import Limits
from .scheduler import Scheduler
from .voicelib import VoiceLibrary

MODEL_ALIASES = ("s2-pro", "tts-1", "tts-1-hd")  # OpenAI clients send tts-1 by default
RETRY_AFTER_SECONDS = 2  # what a 429 suggests


def default_max_queue(max_batch: int) -> int:
    """Requests in progress or waiting at once before new ones get 429: a few batches' worth,
    so that a burst waits while a flood is turned away (each holds its body, up to the body
    limit, in memory)."""
    return max(16, 4 * max(1, int(max_batch)))


class LoadedModel:
    """The standalone server's model: loaded at start, or on first use when ``lazy``."""

    def __init__(self, load: Callable[[], object], lazy: bool = False):
        self._load = load
        self._lock = threading.Lock()
        self.synth = None if lazy else load()

    @property
    def loaded(self) -> bool:
        return self.synth is not None

    @contextmanager
    def use(self) -> Iterator[object]:
        with self._lock:
            if self.synth is None:
                self.synth = self._load()
        yield self.synth


class Service:
    def __init__(self, model: Callable, voices: VoiceLibrary | list[Path],
                 model_name: str = "s2-pro", api_key: str | None = None,
                 limits: Limits = Limits(), max_batch: int = 1,
                 default_voice: str | None = None, loaded: Callable[[], bool] = lambda: True,
                 guard: Guard = Guard(), max_queue: int | None = None,
                 batching: str = "continuous", lexicon=None):
        """``model()``: a context manager yielding the loaded Synthesizer; ``loaded()``: whether
        it is in memory now (/v1/health); ``guard``: the Host and Origin rules; ``max_queue``:
        requests in progress at once (default ``default_max_queue``); ``batching``: the
        ``scheduler``'s; ``lexicon``: the operator's (``text.lexicon``), for every request."""
        self.voices = voices if isinstance(voices, VoiceLibrary) else VoiceLibrary(voices)
        self.limits = limits
        self.model_name = model_name
        self._key = api_key.encode() if api_key else None
        self.loaded = loaded
        self.guard = guard
        self.max_queue = max_queue if max_queue is not None else default_max_queue(max_batch)
        self._open = 0  # requests admitted and not finished
        self._open_lock = threading.Lock()
        self._streams: dict[str, int] = {}  # open WebSocket sessions per client (peer address)
        self.sessions: set = set()  # the WebSocket sessions running (told at shutdown)
        self.stopping = False  # shutting down: every new request gets 503
        self.scheduler = Scheduler(model, self.voices, limits, max_batch=max_batch,
                                   default_voice=default_voice, batching=batching,
                                   lexicon=lexicon)

    @property
    def model_names(self) -> set[str]:
        """The names a request may give the model: its own and ``MODEL_ALIASES``."""
        return {self.model_name, *MODEL_ALIASES}

    def word_timer(self):
        """The model's word aligner (``speech.words.Timer``), its folder found now (a 503 naming
        ``words`` without one). Called off the event loop: it may load the model (a 503 when
        it cannot be loaded)."""
        from .jobs import word_timer

        with self.scheduler.loaded() as synth:
            return word_timer(synth)

    @classmethod
    def standalone(cls, load: Callable[[], object], lazy: bool = False, **kwargs) -> "Service":
        model = LoadedModel(load, lazy)
        return cls(model.use, loaded=lambda: model.loaded, **kwargs)

    def authorize(self, header: str | None) -> None:
        """Check ``Authorization: Bearer <key>`` in constant time (when a key is set)."""
        if self._key is None:
            return
        scheme, _, given = (header or "").partition(" ")
        try:
            given_bytes = given.strip().encode("utf-8")
        except UnicodeEncodeError:  # undecodable bytes in the header: no key of ours
            given_bytes = b""
        if scheme.lower() != "bearer" or not hmac.compare_digest(given_bytes, self._key):
            raise ApiError(401, "missing or wrong API key (send Authorization: Bearer <key>)",
                           "authorization", "invalid_api_key")

    @property
    def has_key(self) -> bool:
        return self._key is not None

    def allow_change(self, remote: str | None) -> None:
        """Voice add/rename/delete: with a key, any authorized peer; without one, only peers on
        this machine."""
        if self._key is None:
            require_loopback_peer(remote, "changing the voice library")

    @property
    def open_requests(self) -> int:
        return self._open

    def busy_error(self) -> ApiError:
        return ApiError(429, f"the server is busy ({self._open} requests in progress or queued; "
                             f"the limit is {self.max_queue}); retry later", None, "queue_full",
                        {"Retry-After": str(RETRY_AFTER_SECONDS)})

    def check_place(self) -> None:
        """429 when every place is taken (a WebSocket session starting; it takes none yet)."""
        if self.stopping:
            raise shutting_down()
        if self._open >= self.max_queue:
            raise self.busy_error()

    def _take(self) -> bool:
        if self.stopping:
            raise shutting_down()
        with self._open_lock:
            if self._open >= self.max_queue:
                return False
            self._open += 1
            return True

    def _release(self) -> None:
        with self._open_lock:
            self._open -= 1

    @contextmanager
    def admitted(self) -> Iterator[None]:
        """Hold one of ``max_queue`` places for a request's lifetime; 429 when none is free."""
        if not self._take():
            raise self.busy_error()
        try:
            yield
        finally:
            self._release()

    @asynccontextmanager
    async def admitted_soon(self, seconds: float, poll: float = 0.05):
        """``admitted``, waiting up to ``seconds`` for a place (a WebSocket session's next
        sentence: the session held no place while it waited for text)."""
        deadline = time.monotonic() + seconds
        while not self._take():
            if time.monotonic() >= deadline:
                raise self.busy_error()
            await asyncio.sleep(poll)
        try:
            yield
        finally:
            self._release()

    @contextmanager
    def stream_opened(self, client: str | None) -> Iterator[None]:
        """One of the client's ``max_streams_per_client`` WebSocket sessions (a client is a
        peer address: behind a proxy every client is the proxy, so raise the limit there),
        and one of the server's ``max_streams`` (503 when all are open: many addresses, one
        server)."""
        client = client or "?"
        if self.stopping:
            raise shutting_down()
        with self._open_lock:
            self._check_streams(client)
            self._streams[client] = self._streams.get(client, 0) + 1
        try:
            yield
        finally:
            with self._open_lock:
                self._streams[client] -= 1
                if not self._streams[client]:
                    del self._streams[client]

    def _check_streams(self, client: str) -> None:
        """A 503 when the server's ``max_streams`` are open, a 429 when the client's
        ``max_streams_per_client`` are (under ``_open_lock``)."""
        limit = self.limits.max_streams_per_client
        if sum(self._streams.values()) >= self.limits.max_streams:
            raise ApiError(503, f"the server has {self.limits.max_streams} speech streams "
                                "open, its limit; retry later (the limit is the server's "
                                "--max-streams)", None, "too_many_streams",
                           {"Retry-After": str(RETRY_AFTER_SECONDS)})
        if self._streams.get(client, 0) >= limit:
            raise ApiError(429, f"this client has {limit} speech streams open; close one "
                                "first (the limit is the server's --max-streams-per-client)",
                           None, "too_many_streams", {"Retry-After": str(RETRY_AFTER_SECONDS)})

    def open_streams(self, client: str | None = None) -> int:
        with self._open_lock:
            if client is None:
                return sum(self._streams.values())
            return self._streams.get(client or "?", 0)

    def close(self) -> None:
        self.scheduler.close()

    async def shutdown(self, timeout: float) -> None:
        """The server stops (SIGTERM, SIGINT; ``--shutdown-timeout``): new requests get 503 "the
        server is shutting down" at once; those in progress may finish within ``timeout``
        seconds; then what is left is ended and told: a request with nothing sent yet gets the
        503, a stream already started is cut (``api/speak.py``), a WebSocket session gets the
        error message and the close."""
        self.stopping = True
        if self._open or self.sessions:
            log.warning("Sailfish serve: shutting down: %d requests in progress and %d "
                        "speech streams open get up to %g s to finish", self._open,
                        len(self.sessions), timeout)
        deadline = time.monotonic() + timeout
        while self._open and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        error = shutting_down()
        await asyncio.gather(asyncio.get_running_loop().run_in_executor(None, self.close),
                             *(session.fail(error) for session in list(self.sessions)),
                             return_exceptions=True)
