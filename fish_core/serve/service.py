"""What the HTTP routes serve: one model (through a provider), its queue, a voice library,
limits and the API key. The same ``Service`` backs the standalone server and the routes mounted
on ComfyUI's server; only the model provider differs."""

from __future__ import annotations

import hmac
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from .requests import ApiError, Limits
from .scheduler import Scheduler
from .voicelib import VoiceLibrary

MODEL_ALIASES = ("s2-pro", "tts-1", "tts-1-hd")  # OpenAI clients send tts-1 by default


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
                 default_voice: str | None = None, loaded: Callable[[], bool] = lambda: True):
        """``model()``: a context manager yielding the loaded Synthesizer; ``loaded()`` says
        whether it is in memory now (for /v1/health)."""
        self.voices = voices if isinstance(voices, VoiceLibrary) else VoiceLibrary(voices)
        self.limits = limits
        self.model_names = {model_name, *MODEL_ALIASES}
        self.model_name = model_name
        self._key = api_key.encode() if api_key else None
        self.loaded = loaded
        self.scheduler = Scheduler(model, self.voices, limits, max_batch=max_batch,
                                   default_voice=default_voice)

    @classmethod
    def standalone(cls, load: Callable[[], object], lazy: bool = False, **kwargs) -> "Service":
        model = LoadedModel(load, lazy)
        return cls(model.use, loaded=lambda: model.loaded, **kwargs)

    def authorize(self, header: str | None) -> None:
        """Check ``Authorization: Bearer <key>`` in constant time (when a key is set)."""
        if self._key is None:
            return
        scheme, _, given = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(),
                                                                   self._key):
            raise ApiError(401, "missing or wrong API key (send Authorization: Bearer <key>)",
                           "authorization", "invalid_api_key")

    def close(self) -> None:
        self.scheduler.close()
