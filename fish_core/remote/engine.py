"""One remote engine behind one transport: who it is (the dialect, detected once), what it serves
(its ``/v1/models``, listed once: detection and the list share one answer), the model every
request names, the rate its audio comes at, and one speech request sent and read
(``request``). ``RemoteSynthesizer`` speaks through it; ``engine_models`` asks it for the list."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..audio.files import SAMPLE_RATE
from ..audio.wav import AudioFormatError
from ..params import SamplingParams
from .dialects import Clip, Dialect, Params, dialect as pick_dialect
from .http import RemoteError, RemoteUserError, Timeouts, Transport
from .models import ModelSpec, choose, spec as model_spec
from .pcm import reply_budget
from .wire import check_audio


@dataclass
class Reply:
    """One request's audio."""

    wave: torch.Tensor  # float32 [T]
    seconds: float


class RemoteEngine:
    def __init__(self, url: str | Sequence[str], dialect: str = "auto",
                 api_key: str | None = None, *, sample_rate: int | None = None,
                 timeouts: Timeouts = Timeouts(10.0, 600.0), retries: int = 2,
                 backoff: float = 0.5, model: str | None = None, name: str | None = None):
        self.transport = Transport(url if isinstance(url, str) else list(url), api_key,
                                   timeouts, retries, backoff, name)
        self.dialect: Dialect = pick_dialect(dialect, self.transport)
        # A Sailfish serve says who it is: until it has, no text of the engine is quoted
        # (whatever answers on a configured port is never reflected into an error).
        self.transport.needs_identity = self.dialect.name == "sailfish"
        # The engine's output rate: as given, else S2-Pro's until the first reply says otherwise.
        self.sample_rate = int(sample_rate) if sample_rate else SAMPLE_RATE
        self._rate_known = bool(sample_rate)
        self._requested_model = model

    # ------------------------------------------------------------------ discovery
    @functools.cached_property
    def models(self) -> list[str]:
        """The engine's models, in its order; [] when it keeps no list (fish-speech, a 404)."""
        try:
            return self.dialect.models(self.transport)
        except RemoteUserError as e:
            if e.status == 404:
                return []
            raise

    @functools.cached_property
    def model(self) -> str | None:
        """The model every request asks for: the one given, else the engine's first."""
        return choose(self._requested_model, self.models, self.label,
                      self.transport.quote_names)

    @functools.cached_property
    def spec(self) -> ModelSpec:
        return model_spec(self.model)

    @property
    def url(self) -> str:
        return " ".join(e.url for e in self.transport.endpoints)

    @property
    def label(self) -> str:
        """How errors name the engine: its configured name, else its URL(s)."""
        return self.transport.name

    # ------------------------------------------------------------------ one request
    def check_rate(self, rate: int, where: str) -> None:
        """Audio from the engine must come at one rate: the one given, or else the first one
        the engine sends (adopted then)."""
        if not self._rate_known:
            self.sample_rate, self._rate_known = int(rate), True
        if rate != self.sample_rate:
            raise AudioFormatError(f"{where}: audio at {rate} Hz; this remote model expects "
                                   f"{self.sample_rate} Hz")

    def answer_limit(self, max_new_tokens: int) -> int:
        """Most bytes one speech answer of ``max_new_tokens`` frames may take (``pcm.reply_budget``:
        that audio as 32-bit stereo, base64-inflated, plus framing). Reading stops with an
        error beyond it."""
        return reply_budget(max_new_tokens, self.sample_rate)

    def params(self, seed: int, p: SamplingParams, max_bytes: int) -> Params:
        """One request's settings, checked against what the engine takes (before sending)."""
        params = Params(seed, p.temperature, p.top_p, p.top_k, p.max_new_tokens, max_bytes,
                        self.model, self.sample_rate)
        self.dialect.check(params)
        return params

    def send(self, text: str, clips: list[Clip], voice_id: str | None, params: Params,
             on_chunk: Callable[[torch.Tensor], None], cancel,
             on_answer: Callable[[str], None] | None = None) -> None:
        """One speech request; each chunk of its audio (at the engine's one rate) to
        ``on_chunk`` as it arrives. ``on_answer(where)`` runs as each answer (a retry's too)
        starts to be read."""
        body = self.dialect.body(text, clips, voice_id, params)

        def read(response) -> None:
            if on_answer is not None:
                on_answer(response.where)

            def chunk(samples: torch.Tensor, rate: int) -> None:
                self.check_rate(rate, response.where)
                on_chunk(samples)

            self.dialect.read(response, chunk, params)

        self.transport.request("POST", self.dialect.speech_path, read, json_body=body,
                               cancel=cancel, limit=self.answer_limit(params.max_new_tokens))

    def request(self, text: str, clips: list[Clip], voice_id: str | None, params: Params,
                cancel, on_samples: Callable[[int], None] | None = None,
                live: Callable[[torch.Tensor], None] | None = None) -> Reply:
        """One speech request, its audio whole (checked); each chunk also to ``live`` as it
        arrives. A retry after chunks went out live fails rather than repeat them; one before
        starts the audio afresh."""
        chunks: list[torch.Tensor] = []
        on_answer = restarts(chunks, live is not None)

        def on_chunk(samples: torch.Tensor) -> None:
            chunks.append(samples)
            if on_samples is not None:
                on_samples(samples.shape[0])
            if live is not None:
                live(samples)

        t0 = time.perf_counter()
        self.send(text, clips, voice_id, params, on_chunk, cancel, on_answer)
        wave = torch.cat(chunks) if chunks else torch.zeros(0)
        check_audio(wave, self.sample_rate, f"{self.label}{self.dialect.speech_path}")
        return Reply(wave, time.perf_counter() - t0)


def restarts(chunks: list, handed_out: bool) -> Callable[[str], None]:
    """What an answer's (re)start does to the ``chunks`` received so far: drops them, or, when
    they were ``handed_out`` already, fails rather than repeat them."""
    def on_answer(where: str) -> None:
        if handed_out and chunks:
            raise RemoteError(f"{where}: the answer broke after {len(chunks)} chunks; not "
                              "repeated (they were handed out)")
        chunks.clear()
    return on_answer


def engine_models(url: str | Sequence[str], dialect: str = "auto", api_key: str | None = None,
                  *, connect_timeout: float = 10.0, read_timeout: float = 30.0) -> list[str]:
    """The model ids an engine serves, in its order (its ``/v1/models``; [] for fish-speech,
    which keeps no list): what a model picker offers. The first is the default."""
    engine = RemoteEngine(url, dialect, api_key, retries=1,
                          timeouts=Timeouts(connect_timeout, read_timeout))
    return engine.dialect.models(engine.transport)
