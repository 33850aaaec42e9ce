"""``Front``: the front half of every synthesizer, written once, and the interface they share.

    request → plan (text batches) → backend.render (the takes' audio) → lay out → finish

The local ``Synthesizer`` (``local/``) and the ``RemoteSynthesizer`` (``remote/``) are its two
backends: they implement ``render`` (the takes of a planned request: each text batch's audio and
result) and ``open`` (a stream's work), and may plan differently (``plan``: a remote engine
batches long text itself, speaks one voice per request). Everything else is here, once: the
public methods build a checked ``speech.request.Request`` (the keywords of every synthesizer,
``tests/test_interface.py``), the batches are laid out on the timeline with their
pauses and speaking rate and finished (``speech.finishing``), and ``on_chunk`` and streams go
through the same layout (``speech.layout``) whichever backend made the audio, live as it comes.

Settings (``speech.settings.Settings``): given as one object (``settings=``) and/or as flat
keywords (``**options``): sampling (``temperature``, ``top_p``, ``top_k``, ``max_new_tokens``),
``seed``, ``takes``, ``history_turns``, ``max_bytes``, a stream's ``first_frames`` and
``chunk_frames``, and finishing; any other keyword is a ``TypeError`` naming it.
``on_chunk(samples, sample_rate)`` (tts, dialogue, subtitles): the returned waveform (take 1's)
in consecutive float32 ``[n]`` pieces, handed out while it is made, that concatenate to it.
Finishing keywords: ``loudness`` (LUFS or an ``audio.loudness.Loudness``), ``speed`` (0.5 … 2,
pitch kept) and ``lexicon`` (a ``text.lexicon.Lexicon`` or its file; each voice's own over it).
``words`` (tts, dialogue, subtitles): ``True``/``"auto"`` or a language: each result's
``words``, timed by the backend's aligner (``word_timer``) on the output timeline
(``speech.words``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch

from ..params import RequestError
from .layout import CueLayout, Deferred, TakeLayout, layout_needed
from .request import ANY, Accepts, Request
from .results import Batch, BatchResult, Speech, SubtitleSpeech
from .settings import Settings
from .stream import Stream
from .timeline import join_pieces, place_cues
from .voices import Voice
from .words import AUTO, Timer, place_words

Progress = Callable[[int, int], None]
Cancel = Callable[[], bool]
OnChunk = Callable[[torch.Tensor, int], None]


@dataclass
class Plan:
    """A request's text batches, the silence between them and (subtitles) each one's cue."""

    batches: list[Batch]
    pause: float = 0.0
    owners: list[int] | None = None


@dataclass
class Take:
    """One take as a backend made it: each batch's audio (before finishing) and result."""

    waves: list[torch.Tensor]
    results: list[BatchResult]
    codes: torch.Tensor  # [K, frames] ([0, frames]: an engine that sends audio only)
    seed: int


class Direct:
    """A stream's chunks handed out as they are (nothing to lay out)."""

    def __init__(self, put: Callable[[torch.Tensor], None]):
        self.chunk = put

    def end_batch(self) -> None:
        pass


class Front:
    accepts: Accepts = ANY  # what the backend takes beyond the rules (``speech.request``)
    plans_batches = True  # False: each piece between pauses is one request (the engine plans)
    timer: Timer | None = None  # times words (``speech.words``); the local backend's loads lazily

    # ---------------------------------------------------------------- backends implement
    @property
    def sample_rate(self) -> int:
        """Samples per second of every waveform it returns."""
        raise NotImplementedError

    def release_caches(self) -> None:
        """Free what the next call can re-make (KV caches; nothing for a remote engine)."""

    def encode_voice(self, audio, text: str | None = None, name: str = "voice",
                     sample_rate: int | None = None) -> Voice:
        """A reusable voice from a reference clip and its transcript (None: heard by the
        local synthesizer's speech recogniser; a remote engine needs it given)."""
        raise NotImplementedError

    def word_timer(self) -> Timer:
        """What times the words of a request that asks for them."""
        if self.timer is None:
            raise RuntimeError("words: this synthesizer has no aligner to time words with "
                               "(set its .timer, e.g. fish_core.local.timing.AlignerTimer())")
        return self.timer

    def render(self, request: Request, plan: Plan, on_progress: Progress | None,
               cancel: Cancel | None, sink: Deferred | None) -> list[Take]:
        """Every take of ``request``; take 1's chunks to ``sink`` as they are made."""
        raise NotImplementedError

    def open(self, request: Request, plan: Plan, sink: Callable) -> Stream:
        """A stream whose work hands its chunks to ``sink(put)`` (a layout or ``Direct``)."""
        raise NotImplementedError

    def check_takes(self, request: Request, speeches: list[Speech]) -> list:
        """Each finished take heard and scored against what it was asked to say
        (``Settings.check``; a backend whose ``accepts.hears`` is False never gets here)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- the API
    def tts(self, text: str, voice: Voice | Sequence[Voice] | None = None, *,
            settings: Settings | None = None, on_progress: Progress | None = None,
            cancel: Cancel | None = None, on_chunk: OnChunk | None = None,
            **options) -> Speech | list[Speech]:
        """Speak ``text`` (speaker tags and ``[pause:700ms]`` tags allowed) in ``voice`` (or
        several voices: voice i is ``<|speaker:i|>``), or in a voice the model picks. With
        ``takes=N`` (1 … 8): a list of N Speech, take k drawn with seed ``seed + k``."""
        return self.speak(Request.tts(text, voice, settings, accepts=self.accepts, **options),
                          on_progress, cancel, on_chunk)

    def stream(self, text: str, voice: Voice | Sequence[Voice] | None = None, *,
               settings: Settings | None = None, **options) -> Stream:
        """``tts`` as an iterator of float32 waveform chunks (``.sample_rate``, ``.seed``,
        ``close()``), concatenating to ``tts``'s waveform; at a ``speed`` other than 1 each
        text batch comes when it is done, a ``loudness`` fixes the gain from the first."""
        return self.open_stream(Request.tts(text, voice, settings, accepts=self.accepts,
                                            where="stream", **options))

    def dialogue(self, script: str, voices: Mapping[str, Voice] | Sequence[Voice] = (), *,
                 pause: float = 0.0, turn_by_turn: bool = False,
                 require_voices: bool | None = None, settings: Settings | None = None,
                 on_progress: Progress | None = None, cancel: Cancel | None = None,
                 on_chunk: OnChunk | None = None, **options) -> Speech | list[Speech]:
        """A multi-speaker script (``<|speaker:i|>``, ``[speaker_1]: …`` or ``Name: …`` lines),
        ``voices`` by name or in speaker order. ``pause`` seconds go between turns; with
        ``turn_by_turn`` (implied by a pause) each turn is generated on its own."""
        return self.speak(Request.dialogue(
            script, voices, settings, pause=pause, turn_by_turn=turn_by_turn,
            require_voices=require_voices, accepts=self.accepts, **options),
            on_progress, cancel, on_chunk)

    def subtitles(self, srt: str, voice: Voice | None = None, *,
                  settings: Settings | None = None, on_progress: Progress | None = None,
                  cancel: Cancel | None = None, on_chunk: OnChunk | None = None,
                  **options) -> SubtitleSpeech:
        """Each SRT cue spoken at its start time; a cue longer than the time to the next is
        kept whole (the later cues move back, the overrun reported)."""
        return self.speak(Request.subtitles(srt, voice, settings, accepts=self.accepts,
                                            **options), on_progress, cancel, on_chunk)

    # ---------------------------------------------------------------- the front, once
    def speak(self, request: Request, on_progress: Progress | None = None,
              cancel: Cancel | None = None, on_chunk: OnChunk | None = None):
        """A checked request spoken: a ``Speech`` (a list with ``takes``; subtitles a
        ``SubtitleSpeech``)."""
        plan = self.plan(request)
        if request.words:
            check_timer(self.word_timer(), request.words)  # said before any work
        sink = self.sink(request, plan, on_chunk) if on_chunk is not None else None
        speeches = [self.finish(request, plan, take, k) for k, take in
                    enumerate(self.render(request, plan, on_progress, cancel, sink))]
        if request.settings.check:
            for speech, checked in zip(speeches, self.check_takes(request, speeches)):
                speech.check = checked
        return speeches if request.takes is not None else speeches[0]

    def open_stream(self, request: Request) -> Stream:
        """A checked ``tts`` request as a stream, laid out when pauses, speed or loudness ask."""
        plan = self.plan(request)
        return self.open(request, plan, lambda put: self.stream_sink(request, plan, put))

    def stream_sink(self, request: Request, plan: Plan, put: Callable[[torch.Tensor], None]
                    ) -> Direct | Deferred:
        """Where a stream's chunks go: laid out (pauses, speed, loudness from the first batch)
        into ``put(samples)``, or straight to it when there is nothing to lay out. A stream of
        ``stream`` and an HTTP service's streamed answer alike."""
        if not layout_needed(plan.batches, 0.0, request.finishing):
            return Direct(put)
        return Deferred(lambda: TakeLayout(lambda samples, _: put(samples), self.sample_rate,
                                           plan.batches, 0.0, request.finishing))

    def plan(self, request: Request) -> Plan:
        """The text batches: respelled, cut at pauses, planned (``plan``)."""
        return plan(request, self.plans_batches)

    def sink(self, request: Request, plan: Plan, on_chunk: OnChunk) -> Deferred:
        """Take 1 laid out as it is made (``speech.layout``), made on its first samples."""
        if request.kind == "subtitles":
            return Deferred(lambda: CueLayout(on_chunk, self.sample_rate, request.cues,
                                              plan.batches, plan.owners, request.finishing))
        return Deferred(lambda: TakeLayout(on_chunk, self.sample_rate, plan.batches, plan.pause,
                                           request.finishing))

    def finish(self, request: Request, plan: Plan, take: Take, index: int = 0) -> Speech:
        """A take's batches at the speaking rate, laid out with their silences (subtitles: at
        their cues), brought to the loudness; its words timed when the request asks."""
        rate = self.sample_rate
        pieces = [request.finishing.piece(w, rate) for w in take.waves]
        if request.kind == "subtitles":
            timeline = place_cues(request.cues, pieces, take.results, rate, plan.owners)
            speech = SubtitleSpeech(timeline.waveform, rate, take.codes, timeline.segments,
                                    take.seed, timeline.cues, timeline.overruns)
        else:
            timeline = join_pieces(pieces, take.results, rate, plan.pause)
            speech = Speech(timeline.waveform, rate, take.codes, timeline.segments, take.seed)
        if request.words:
            speech.words = place_words(
                self.word_timer(), request.words, [r.batch.text for r in take.results],
                [r.batch.speaker for r in take.results], take.waves,
                [(s.start_sample, s.end_sample) for s in speech.segments], rate, index)
        return request.finishing.finish(speech)


def check_timer(timer: Timer, words: str) -> None:
    """A named language's word splitting works with ``timer`` (its optional package, Korean's
    word list): a ``RequestError`` naming ``words`` otherwise, before any work."""
    if words == AUTO:
        return
    try:
        timer.split("a", words)
    except RuntimeError as e:
        raise RequestError("words", None, words, f"words: {e}") from None


def plan(request: Request, batches: bool = True) -> Plan:
    """A request's text batches (``speech.finishing``: respelled, cut at pauses, planned into
    batches of ``max_bytes``; ``batches`` False: each piece between pauses is one batch, each
    turn of a dialogue its own), their silences and (subtitles) each one's cue. The front's
    and the HTTP scheduler's jobs' (``serve.jobs``) one plan."""
    f, voices = request.finishing, request.voices
    max_bytes = request.max_bytes if batches else None
    if request.kind == "tts":
        return Plan(f.pieces(request.spoken[0], voices, max_bytes))
    if request.kind == "dialogue":
        by_turn = request.pause > 0 or request.turn_by_turn or not batches
        return Plan(f.turn_batches(request.turns, request.spoken, request.joined, voices,
                                   max_bytes, by_turn), request.pause)
    cues, owners = f.cue_batches(request.spoken, voices)
    return Plan(cues, 0.0, owners)


SpeechSynthesizer = Front  # the interface every synthesizer implements, by name
