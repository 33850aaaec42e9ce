"""``RemoteSynthesizer``: the ``Synthesizer`` API (tts, dialogue, subtitles, stream,
encode_voice, sample_rate) on a remote S2 engine, so nodes, CLI and scripts run unchanged.

    synth = Synthesizer.remote("http://gpu-1:8000 http://gpu-2:8000", dialect="sglang-omni")
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
import queue
import threading
from dataclasses import replace
from typing import Callable, Mapping, Sequence

import torch

from ..audio import loudness as lufs
from ..params import (CHUNK_FRAMES, FIRST_FRAMES, Cancelled, Generated, SamplingParams,
                      batch_seed)
from ..speech.arguments import as_voices, count_takes, script_turns
from ..speech.finishing import Finishing
from ..speech.results import Batch, BatchResult, Speech, SubtitleSpeech
from ..speech.timeline import faded, gaps, join_pieces, place_cues
from ..speech.voices import Voice
from ..text import plan as textplan
from ..text.pace import Pace
from ..text.script import check_speaker_count
from .dialects import OnChunk, Params
from .engine import RemoteEngine, Reply, engine_models
from .http import RemoteError, Timeouts
from .voices import FRAME_LENGTH, RemoteVoice, RemoteVoices

__all__ = ["RemoteSynthesizer", "RemoteStream", "RemoteVoice", "engine_models"]

Progress = Callable[[int, int], None]  # progress is counted in frames (FRAME_LENGTH samples)


class RemoteSynthesizer:
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
    def encode_voice(self, audio, text: str, name: str = "voice",
                     sample_rate: int | None = None) -> RemoteVoice:
        """A voice from a reference clip and its transcript (``voices.RemoteVoices.encode``);
        the engine encodes it when a request uses it."""
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

    # ------------------------------------------------------------------ one request
    def _request(self, text: str, voice: Voice | None, params: Params, cancel,
                 on_samples: Callable[[int], None]) -> Reply:
        clips, voice_id = self.voices.for_request(voice)
        return self.engine.request(text, clips, voice_id, params, cancel, on_samples)

    def _run(self, jobs: list[tuple[str, Voice | None, int]], p: SamplingParams, max_bytes: int,
             on_progress: Progress | None, cancel) -> list[Reply]:
        """The requests ``(text, voice, seed)`` in order, with progress per received chunk in
        frames: the total is what the texts are expected to take (``text.pace.Pace``, as
        locally), corrected as requests finish, never the frame limit."""
        for _, _, seed in jobs:
            self.engine.params(seed, p, max_bytes)  # a refused field: before any request
        pace = Pace([text for text, _, _ in jobs], self.sample_rate / FRAME_LENGTH,
                    p.max_new_tokens)
        replies = []
        for text, voice, seed in jobs:
            received = [0]

            def on_samples(n: int, received=received) -> None:
                received[0] += n
                if on_progress is not None:
                    on_progress(*pace.frame(received[0] // FRAME_LENGTH))

            params = self.engine.params(seed, p, max_bytes)
            replies.append(self._request(text, voice, params, cancel, on_samples))
            pace.frame(math.ceil(replies[-1].wave.shape[0] / FRAME_LENGTH))
            done = pace.end_batch()
            if on_progress is not None:
                on_progress(*done)
        return replies

    # ------------------------------------------------------------------ the Synthesizer API
    def tts(self, text: str, voice: Voice | Sequence[Voice] | None = None, *,
            seed: int | None = None, max_bytes: int = textplan.DEFAULT_MAX_BYTES,
            history_turns: int = 3, takes: int | None = None,
            on_progress: Progress | None = None, cancel: Callable[[], bool] | None = None,
            on_chunk: OnChunk | None = None, loudness=None, speed: float = 1.0, lexicon=None,
            **sampling) -> Speech | list[Speech]:
        """``Synthesizer.tts`` on the engine: one request per take (take k seeded seed + k),
        per piece between ``[pause:…]`` tags (piece b seeded take seed + b)."""
        if not textplan.check_text(text, "text").strip():
            raise ValueError("text is empty: nothing to say")
        voice = self.voices.resolve(voice)
        one = single_voice(voice, "tts")
        params = SamplingParams.from_options(sampling, "tts")
        finishing = Finishing.of(loudness, speed, lexicon)
        batches = finishing.batches(text, as_voices(voice), None)
        self.check_speakers(text)
        seed = self.engine.pick_seed(seed)
        seeds = [batch_seed(seed, k) for k in range(count_takes(takes))]
        jobs = [(b.text, one, batch_seed(s, i)) for s in seeds for i, b in enumerate(batches)]
        replies = self._run(jobs, params, max_bytes, on_progress, cancel)
        n = len(batches)
        speeches = [self._speech(replies[k * n:(k + 1) * n], batches, s, 0.0, finishing)
                    for k, s in enumerate(seeds)]
        hand_out(speeches[0], on_chunk)
        return speeches if takes is not None else speeches[0]

    def dialogue(self, script: str, voices: Mapping[str, Voice] | Sequence[Voice] = (), *,
                 pause: float = 0.0, turn_by_turn: bool = False,
                 require_voices: bool | None = None,
                 seed: int | None = None, max_bytes: int = textplan.DEFAULT_MAX_BYTES,
                 history_turns: int = 3, takes: int | None = None,
                 on_progress: Progress | None = None, cancel: Callable[[], bool] | None = None,
                 on_chunk: OnChunk | None = None, loudness=None, speed: float = 1.0, lexicon=None,
                 **sampling) -> Speech | list[Speech]:
        """``Synthesizer.dialogue`` on the engine. S2 speaks one voice per request, so it is
        always one request per turn, in its speaker's voice, whatever ``turn_by_turn`` says.

        On Drama 3: up to 16 speakers; speakers without a voice get one the model invents
        (unless ``require_voices``); without ``turn_by_turn`` or a pause (the default, as
        locally) the whole script is one request (each take), every voice's clips sent as the
        references of its speaker, so an invented voice stays the same across its turns (the
        timeline then holds one segment, as a local conversation batch does); with
        ``turn_by_turn=True`` or a pause, one request per turn."""
        params = SamplingParams.from_options(sampling, "dialogue")
        voices = self.voices.resolve(voices)
        if require_voices is None and self.spec.invents_voices:
            require_voices = False  # Drama 3 invents a voice for a speaker given none
        turns, voice_list = script_turns(script, voices, require_voices, pause,
                                         self.spec.max_speakers, self.spec.label)
        finishing = Finishing.of(loudness, speed, lexicon)
        seed = self.engine.pick_seed(seed)
        whole = not (turn_by_turn or pause > 0) and self.spec.family == "drama-3"
        if whole:
            script_voice = self.voices.script_voice(voice_list)
            text = "\n".join(t.tagged for t in turns)
            batches = finishing.batches(text, voice_list, None, field="script")
        else:
            batches = finishing.turn_batches(turns, voice_list, None, True)
        speeches = []
        for k in range(count_takes(takes)):
            take_seed = batch_seed(seed, k)
            if whole:
                jobs = [(b.text, script_voice, batch_seed(take_seed, i))
                        for i, b in enumerate(batches)]
            else:
                jobs = [(untagged(b.text), speaker_voice(voice_list, b.speaker),
                         batch_seed(take_seed, i)) for i, b in enumerate(batches)]
            replies = self._run(jobs, params, max_bytes, on_progress, cancel)
            speeches.append(self._speech(replies, batches, take_seed, 0.0 if whole else pause,
                                         finishing))
        hand_out(speeches[0], on_chunk)
        return speeches if takes is not None else speeches[0]

    def check_speakers(self, text: str) -> None:
        """The speaker tags of ``text`` within the model's speakers (Drama 3: 0 … 15)."""
        if self.spec.max_speakers is not None:
            check_speaker_count(textplan.split_turns(text), self.spec.max_speakers,
                                self.spec.label)

    def subtitles(self, srt: str, voice: Voice | None = None, *,
                  seed: int | None = None, history_turns: int = 3,
                  on_progress: Progress | None = None,
                  cancel: Callable[[], bool] | None = None, on_chunk: OnChunk | None = None,
                  loudness=None, speed: float = 1.0, lexicon=None,
                  **sampling) -> SubtitleSpeech:
        """``Synthesizer.subtitles``: one request per cue (cue i seeded seed + i; a cue with
        ``[pause:…]`` tags is a request per piece), placed at the cue times by the shared
        timeline code."""
        cues = textplan.parse_srt(srt)
        params = SamplingParams.from_options(sampling, "subtitles")
        voice = self.voices.resolve(voice)
        one = single_voice(voice, "subtitles")
        finishing = Finishing.of(loudness, speed, lexicon)
        batches, owners = finishing.cue_batches(cues, as_voices(voice))
        seed = self.engine.pick_seed(seed)
        jobs = [(b.text, one, batch_seed(seed, i)) for i, b in enumerate(batches)]
        replies = self._run(jobs, params, textplan.DEFAULT_MAX_BYTES, on_progress, cancel)
        results = [self._result(r, b) for r, b in zip(replies, batches)]
        waves = [finishing.piece(r.wave, self.sample_rate) for r in replies]
        timeline = place_cues(cues, waves, results, self.sample_rate, owners)
        result = finishing.finish(SubtitleSpeech(
            timeline.waveform, self.sample_rate, empty_codes(results), timeline.segments, seed,
            timeline.cues, timeline.overruns))
        hand_out(result, on_chunk)
        return result

    def stream(self, text: str, voice: Voice | Sequence[Voice] | None = None, *,
               seed: int | None = None, max_bytes: int = textplan.DEFAULT_MAX_BYTES,
               history_turns: int = 3, first_frames: int = FIRST_FRAMES,
               chunk_frames: int = CHUNK_FRAMES, loudness=None, speed: float = 1.0, lexicon=None,
               **sampling) -> "RemoteStream":
        """``tts`` as an iterator of float32 chunks as the engine sends them (its own
        chunking: ``first_frames``/``chunk_frames`` do not apply). With ``[pause:…]`` tags or
        a ``speed`` each piece comes whole when its request is done (piece b seeded
        seed + b); a ``loudness`` fixes the gain from the first piece."""
        if not textplan.check_text(text, "text").strip():
            raise ValueError("text is empty: nothing to say")
        params = SamplingParams.from_options(sampling, "stream")
        voice = self.voices.resolve(voice)
        finishing = Finishing.of(loudness, speed, lexicon)
        batches = finishing.batches(text, as_voices(voice), None)
        self.check_speakers(text)
        request = self.engine.params(self.engine.pick_seed(seed), params, max_bytes)
        return RemoteStream(self, batches, single_voice(voice, "stream"), request, finishing)

    # ------------------------------------------------------------------ results
    def _result(self, reply: Reply, batch: Batch) -> BatchResult:
        frames = math.ceil(reply.wave.shape[0] / FRAME_LENGTH)
        generated = Generated(torch.zeros(0, frames, dtype=torch.long),
                              torch.zeros(0, 0, dtype=torch.long), True, 0)
        return BatchResult(batch, generated, reply.seconds)

    def _speech(self, replies: list[Reply], batches: list[Batch], seed: int,
                pause: float, finishing: Finishing) -> Speech:
        results = [self._result(r, b) for r, b in zip(replies, batches)]
        pieces = [finishing.piece(r.wave, self.sample_rate) for r in replies]
        timeline = join_pieces(pieces, results, self.sample_rate, pause)
        return finishing.finish(Speech(timeline.waveform, self.sample_rate,
                                       empty_codes(results), timeline.segments, seed))


def untagged(text: str) -> str:
    """A turn's text without its speaker tag (a per-turn request speaks one voice)."""
    return textplan.SPEAKER_TAG.sub("", text).strip()


def hand_out(speech: Speech, on_chunk: OnChunk | None) -> None:
    """``on_chunk`` of a remote call: the finished waveform in one piece (not yet live)."""
    if on_chunk is not None and speech.waveform.shape[0]:
        on_chunk(speech.waveform.clone(), speech.sample_rate)


class RemoteStream:
    """Iterator of float32 chunks of one remote request (one per piece between pause tags),
    read on a worker thread; closing it (or leaving a ``with`` block) closes the connection.
    Plain text streams the engine's chunks as they come; with pauses, a speed or a loudness
    each piece is finished when its request is done and handed out laid out (its silences
    and fades as ``timeline.join_pieces`` lays them, the gain of ``audio.loudness.StreamGain``)."""

    _END = object()

    @property
    def sample_rate(self) -> int:
        return self.synth.sample_rate  # known for sure once the first chunk arrived

    def __init__(self, synth: RemoteSynthesizer, batches: list[Batch], voice: Voice | None,
                 params: Params, finishing: Finishing = Finishing()):
        self.synth, self.seed = synth, params.seed
        self._closed = threading.Event()
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, args=(batches, voice, params,
                                                                finishing),
                                        name="sailfish-remote-stream", daemon=True)
        self._thread.start()

    def _run(self, batches: list[Batch], voice, params: Params, finishing: Finishing) -> None:
        plain = (len(batches) == 1 and not finishing.touches_audio
                 and not any(gaps(batches, 1000, 0.0)))
        try:
            if plain:
                return self._read(batches[0].text, voice, params, self._queue.put)
            out, spaced = None, None
            for i, batch in enumerate(batches):
                held: list[torch.Tensor] = []
                self._read(batch.text, voice, replace(params, seed=batch_seed(params.seed, i)),
                           held.append)
                rate = self.synth.sample_rate  # known now
                if out is None:
                    out = lufs.output(lambda samples, _: self._queue.put(samples), rate,
                                      finishing.loudness)
                    spaced = gaps(batches, rate, 0.0)
                    out(torch.zeros(spaced[0]))
                piece = finishing.piece(torch.cat(held) if held else torch.zeros(0), rate)
                out(faded(piece, 0, piece.shape[0], rate, bool(spaced[i]), bool(spaced[i + 1])))
                out(torch.zeros(spaced[i + 1]))
                out.end_batch()
            out.close()
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            self._queue.put(e)
        finally:
            self._queue.put(self._END)

    def _read(self, text, voice, params, put) -> None:
        """One request, its chunks to ``put`` as they come."""
        synth = self.synth
        clips, voice_id = synth.voices.for_request(voice)
        sent = [0]  # chunks handed to the consumer: a retry would repeat them

        def on_answer(where: str) -> None:
            if sent[0]:
                raise RemoteError(f"{where}: the stream broke after {sent[0]} chunks; not "
                                  "repeated (the consumer has them)")

        def on_chunk(samples) -> None:
            sent[0] += 1
            put(samples)

        synth.engine.send(text, clips, voice_id, params, on_chunk, self._closed.is_set,
                          on_answer)

    def __iter__(self):
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                if isinstance(item, Cancelled) and self._closed.is_set():
                    return
                raise item
            yield item

    def close(self) -> None:
        self._closed.set()

    def __enter__(self) -> "RemoteStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def single_voice(voice, what: str) -> Voice | None:
    voices = as_voices(voice)
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
