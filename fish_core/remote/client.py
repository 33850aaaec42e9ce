"""``RemoteSynthesizer``: the ``Synthesizer`` API (tts, dialogue, subtitles, stream,
encode_voice, sample_rate) on a remote S2 engine, so nodes, CLI and scripts run unchanged.

    synth = RemoteSynthesizer("http://gpu-1:8000 http://gpu-2:8000", dialect="sglang-omni")
    voice = synth.encode_voice("me.wav", "What I say in me.wav.", name="me")
    speech = synth.tts("Now in my voice.", voice=voice, seed=1)

What differs from the local engine:

* A voice may be named: ``voice="me"`` is the engine's own voice ``me`` (registered there or
  built in; checked against its voice list, an unknown name an error listing them).
* A voice made here (``RemoteVoice``) holds the reference audio and transcript, sent with every
  request (or, with ``register_voices``, registered once in the server's voice library and then
  named by id). A saved voice file holds codes only: it is named by its ``name`` in the
  server's voice library, which must have it (checked: an unknown id is an error, never a
  silent default voice).
* A dialogue is one request per turn (turn ``b`` of take ``k`` seeded ``seed + k + b``), and
  subtitles one request per cue (cue ``i`` seeded ``seed + i``); the shared timeline code lays
  them out. Requests carry no history of earlier turns: ``history_turns`` applies inside one
  request, on the server.
* Seeds and sampling settings are sent in each dialect's fields (what an engine cannot take is
  refused before sending, naming the engine and the field); the engine's sampler decides what
  a seed means: the same seed reproduces a run on the same engine. Against our own ``serve``,
  a tts equals the local one sample for sample after 16-bit rounding.
* ``Speech.codes`` is empty (``[0, frames]``): engines send audio, not codes; asking for codes
  (``require_codec``, saving a voice made here) is an error naming the model.
* The engine's model is chosen by name (``model=``, from its ``/v1/models``; default its
  first) and named in every request. Drama 3 (``drama-3``) takes up to 16 speakers and invents
  voices for the speakers given none (see ``models.py``, docs/engines.md).
* Finishing (``speech.finishing``) happens here, on the audio the engine sends: the lexicon
  respells the text before it is sent, each ``[pause:…]`` tag splits the request (the pieces
  are requests of their own, laid out with the exact silence between them), each piece is
  time-stretched for ``speed`` and the result brought to its ``loudness``.
* Registering a voice on an engine with a consent field (SGLang-Omni, vLLM-Omni) needs the
  consent the user states (``voice_consent=``); it is never sent on their behalf.
"""

from __future__ import annotations

import math
import threading
from typing import Callable, Sequence

import torch

from ..params import Generated, batch_seed
from ..speech.front import Front, Plan, Take
from ..speech.request import Request
from ..speech.results import Batch, BatchResult
from ..speech.stream import Stream
from ..speech.voices import Voice
from ..text import plan as textplan
from ..text.pace import Pace
from .dialects import Params
from .engine import RemoteEngine, Reply, engine_models
from .http import Timeouts
from .voices import FRAME_LENGTH, RemoteVoice, RemoteVoices

__all__ = ["RemoteSynthesizer", "RemoteVoice", "engine_models"]

Progress = Callable[[int, int], None]  # progress is counted in frames (FRAME_LENGTH samples)


class RemoteSynthesizer(Front):
    plans_batches = False  # each piece between pauses is one request: the engine plans it

    def __init__(self, url: str | Sequence[str], dialect: str = "auto",
                 api_key: str | None = None, *, sample_rate: int | None = None,
                 connect_timeout: float = 10.0, read_timeout: float = 600.0, retries: int = 2,
                 backoff: float = 0.5, register_voices: bool = False,
                 model: str | None = None, voice_consent: str | None = None,
                 name: str | None = None):
        """``name``: a configured endpoint's name (``endpoints.py``): errors say it, not URLs.
        The engine (``engine.RemoteEngine``: transport, dialect, models) and its voices
        (``voices.RemoteVoices``) are rooms of their own; this is the Synthesizer API over
        them."""
        self.engine = RemoteEngine(url, dialect, api_key, sample_rate=sample_rate,
                                   timeouts=Timeouts(connect_timeout, read_timeout),
                                   retries=retries, backoff=backoff, model=model, name=name)
        self.voices = RemoteVoices(self.engine, register_voices, voice_consent)
        self.accepts = EngineAccepts(self)
        if model is not None:
            self.model  # a model asked for by name is checked against the engine's list now

    # ------------------------------------------------------------------ the engine
    transport = property(lambda self: self.engine.transport)
    dialect = property(lambda self: self.engine.dialect)
    models = property(lambda self: self.engine.models, doc="The engine's models (asked once).")
    model = property(lambda self: self.engine.model,
                     doc="The model every request asks for: the one given, else the first.")
    spec = property(lambda self: self.engine.spec)
    url = property(lambda self: self.engine.url)
    label = property(lambda self: self.engine.label, doc="How errors name the engine.")
    sample_rate = property(lambda self: self.engine.sample_rate,
                           doc="The engine's output rate (adopted from its first reply).")
    register_voices = property(lambda self: self.voices.register_all)
    voice_consent = property(lambda self: self.voices.consent)

    @property
    def codec(self):
        return None  # the engine keeps its codec: no codes come back

    def require_codec(self):
        raise ValueError(f"the remote model {self.spec.label} ({self.label}) sends audio only: "
                         "codes (generating codes, encoding a voice to codes, decoding codes) "
                         "need a local model")

    def release_caches(self) -> None:
        """Nothing is held here (the engine owns its caches)."""

    # ------------------------------------------------------------------ voices
    def encode_voice(self, audio, text: str | None = None, name: str = "voice",
                     sample_rate: int | None = None) -> RemoteVoice:
        """A voice from a reference clip and its transcript (``voices.RemoteVoices.encode``);
        the engine encodes it when a request uses it. The transcript must be given here (no
        speech recogniser runs beside a remote engine: ``sailfish transcribe`` makes one)."""
        if text is None or (isinstance(text, str) and not text.strip()):
            raise ValueError("reference transcript: a remote engine's voice needs the words "
                             "spoken in the clip (`sailfish transcribe CLIP` hears them)")
        return self.voices.encode(audio, text, name, sample_rate)

    def engine_voice(self, name: str) -> RemoteVoice:
        """The engine's own voice ``name`` (registered there, or built in), checked against
        its voice list now (an unknown name is an error listing them). Wherever a voice is
        taken, its name may be given instead: ``tts(text, voice="me")``."""
        return self.voices.named(name)

    def engine_voices(self) -> list[str]:
        """The names of the engine's voices (its voice library)."""
        return self.engine.dialect.voice_names(self.engine.transport)

    def register_voice(self, voice: RemoteVoice, name: str | None = None,
                       consent: str | None = None) -> RemoteVoice:
        """Register ``voice`` (from ``encode_voice``) in the engine's voice store as ``name``
        (default the voice's own) and return a voice that names it there. Engines with a
        consent field (SGLang-Omni, vLLM-Omni) need ``consent`` (or the synthesizer's
        ``voice_consent``): the consent id or statement of the person whose voice it is,
        checked before anything is sent and never made up here. The voice returned names the
        stored one (no clips: it cannot be saved as a voice file)."""
        return self.voices.register(voice, name, consent)

    # ------------------------------------------------------------------ the backend
    def plan(self, request: Request) -> Plan:
        """Each piece between ``[pause:…]`` tags one request (the engine plans long text); a
        dialogue one request per turn in its speaker's voice, or, on Drama 3 without
        ``turn_by_turn`` or a pause, the whole script as one request (each take) with every
        voice's clips as the references of its speaker (an invented voice stays the same)."""
        if request.kind != "dialogue":
            single_voice(request.voices, "tts" if request.kind == "tts" else "subtitles")
            return super().plan(request)
        if request.turn_by_turn or request.pause > 0 or self.spec.family != "drama-3":
            return super().plan(request)
        self.voices.script_voice(list(request.voices))  # every voice sendable as references
        text = "\n".join(t.tagged for t in request.turns)
        return Plan(request.finishing.batches(text, request.voices, None, field="script"))

    def _sends(self, request: Request, plan: Plan) -> list[tuple[str, Voice | None]]:
        """What each text batch's request says, in which voice."""
        voices = list(request.voices)
        if request.kind != "dialogue":
            return [(b.text, voices[0] if voices else None) for b in plan.batches]
        if plan.pause == 0 and not request.turn_by_turn and self.spec.family == "drama-3":
            script_voice = self.voices.script_voice(voices)
            return [(b.text, script_voice) for b in plan.batches]
        return [(untagged(b.text), speaker_voice(voices, b.speaker)) for b in plan.batches]

    def render(self, request: Request, plan: Plan, on_progress, cancel, sink) -> list[Take]:
        """One engine request per text batch and take (batch b of take k seeded
        ``seed + k + b``); take 1's audio to ``sink`` as it arrives."""
        sends = self._sends(request, plan)
        seeds = [batch_seed(request.seed, k) for k in range(request.count)]
        jobs = [(text, voice, batch_seed(s, i)) for s in seeds for i, (text, voice)
                in enumerate(sends)]
        replies = self._run(jobs, request, on_progress, cancel, sink, len(sends))
        n, takes = len(sends), []
        for k, seed in enumerate(seeds):
            results = [self._result(r, b) for r, b in zip(replies[k * n:(k + 1) * n],
                                                          plan.batches)]
            takes.append(Take([r.wave for r in replies[k * n:(k + 1) * n]], results,
                              empty_codes(results), seed))
        return takes

    def _run(self, jobs: list[tuple[str, Voice | None, int]], request: Request,
             on_progress: Progress | None, cancel, sink=None, live: int = 0) -> list[Reply]:
        """The requests ``(text, voice, seed)`` in order (the first ``live`` handed to
        ``sink`` as they arrive), with progress per received chunk in frames: the total is
        what the texts are expected to take (``text.pace.Pace``, as locally), corrected as
        requests finish, never the frame limit."""
        params = [self.engine.params(seed, request.sampling, request.max_bytes)
                  for _, _, seed in jobs]  # a refused field: before any request
        pace = Pace([text for text, _, _ in jobs], self.sample_rate / FRAME_LENGTH,
                    request.sampling.max_new_tokens)
        replies = []
        for i, ((text, voice, _), p) in enumerate(zip(jobs, params)):
            out = sink if i < live else None
            replies.append(self._request(text, voice, p, cancel, counter(pace, on_progress),
                                         out))
            pace.frame(math.ceil(replies[-1].wave.shape[0] / FRAME_LENGTH))
            done = pace.end_batch()
            if on_progress is not None:
                on_progress(*done)
        return replies

    def _request(self, text: str, voice: Voice | None, params: Params, cancel,
                 on_samples: Callable[[int], None], sink=None) -> Reply:
        """One engine request, its audio whole; with a ``sink`` its chunks go there too as
        they arrive, then the batch's end."""
        clips, voice_id = self.voices.for_request(voice)
        live = sink.chunk if sink is not None else None
        reply = self.engine.request(text, clips, voice_id, params, cancel, on_samples, live)
        if sink is not None:
            sink.end_batch()
        return reply

    def open(self, request: Request, plan: Plan, sink) -> Stream:
        """The requests on a worker (piece b seeded ``seed + b``), their chunks to the sink as
        the engine sends them (its own chunking: ``first_frames``/``chunk_frames`` do not
        apply); closing the stream closes the connection."""
        sends = self._sends(request, plan)
        params = [self.engine.params(batch_seed(request.seed, i), request.sampling,
                                     request.max_bytes) for i in range(len(sends))]
        closed = threading.Event()

        def work(put) -> None:
            out = sink(put)
            for (text, voice), p in zip(sends, params):
                clips, voice_id = self.voices.for_request(voice)
                self.engine.request(text, clips, voice_id, p, closed.is_set, None, out.chunk)
                out.end_batch()

        return Stream(work, lambda: self.sample_rate, request.seed, closed.set, closed.is_set,
                      wait=False)

    # ------------------------------------------------------------------ results
    def _result(self, reply: Reply, batch: Batch) -> BatchResult:
        frames = math.ceil(reply.wave.shape[0] / FRAME_LENGTH)
        generated = Generated(torch.zeros(0, frames, dtype=torch.long),
                              torch.zeros(0, 0, dtype=torch.long), True, 0)
        return BatchResult(batch, generated, reply.seconds)


class EngineAccepts:
    """``speech.request.Accepts`` of a remote engine: its seed range, its model's speakers,
    voices by name (read when a request needs them: the engine is asked then)."""

    def __init__(self, synth: RemoteSynthesizer):
        self.synth = synth

    max_seed = property(lambda self: self.synth.engine.dialect.max_seed)
    max_speakers = property(lambda self: self.synth.spec.max_speakers)
    model = property(lambda self: self.synth.spec.label)
    invents_voices = property(lambda self: self.synth.spec.invents_voices)
    hears = False  # no speech recogniser beside a remote engine: no checked takes

    def voices(self, voice):
        return self.synth.voices.resolve(voice)


def untagged(text: str) -> str:
    """A turn's text without its speaker tag (a per-turn request speaks one voice)."""
    return textplan.SPEAKER_TAG.sub("", text).strip()


def single_voice(voices, what: str) -> Voice | None:
    if len(voices) > 1:
        raise ValueError(f"voice: a remote {what} request speaks one voice, got {len(voices)}; "
                         "use dialogue for several speakers")
    return voices[0] if voices else None


def speaker_voice(voices: list[Voice], speaker: int | None) -> Voice | None:
    """The voice of ``speaker``; None (the engine's model picks one) past the voices given."""
    speaker = speaker or 0
    return voices[speaker] if speaker < len(voices) else None


def empty_codes(results: list[BatchResult]) -> torch.Tensor:
    """``[0, frames]``: the frame count, without codes (engines send audio only)."""
    return torch.zeros(0, sum(r.frames for r in results), dtype=torch.long)


def counter(pace: Pace, on_progress: Progress | None) -> Callable[[int], None]:
    """One request's ``on_samples``: its samples received so far, as frames of ``pace``, to
    ``on_progress``."""
    received = 0

    def on_samples(n: int) -> None:
        nonlocal received
        received += n
        if on_progress is not None:
            on_progress(*pace.frame(received // FRAME_LENGTH))
    return on_samples
