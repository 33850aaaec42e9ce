"""Where a wire request is admitted as a job, once: the one place that resolves its voice (the
saved voice by name, through the library's loaded-voice memo, its name kept) and adds its
references (each encoded once per request or WebSocket session, ``request.Reference``), then
hands its checked ``Request`` (with the operator's lexicon) to the local backend, which plans it
as the front plans every request and builds its ``SpeechJob`` (``Synthesizer.jobs``: nothing
checked again). A streamed answer's chunks go to the task's ``emit`` through the front's stream
layout (``Front.stream_sink``); a whole answer's job keeps its take, finished by the front's one
step (``Front.finish``: speed, pauses, loudness) in the handler's executor (``task.answer``),
off the model's worker. Runs on the scheduler's thread: the codec encodes references there.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..local.driver import SpeechJob
from ..speech.front import check_timer
from ..speech.request import Request
from ..speech.voices import Voice
from ..speech.words import Timer
from ..text.lexicon import Lexicon
from .request import SpeechRequest
from .limits import Limits
from .voicelib import VoiceLibrary
from .http.errors import ApiError, detail

if TYPE_CHECKING:  # the loaded model's parts: imported with the model, not with the service
    from ..local.runtime import Runtime
    from ..local.synthesizer import Synthesizer


class Jobs:
    def __init__(self, voices: VoiceLibrary, limits: Limits, default_voice: str | None = None,
                 lexicon: Lexicon | None = None):
        self.voices = voices
        self.limits = limits
        self.default_voice = default_voice
        self.lexicon = lexicon

    def voice(self, runtime: Runtime, request: SpeechRequest) -> list[Voice]:
        """The request's voice: its saved voice (or the server's default) and its references,
        as one ``Voice`` (none: the model's own voice)."""
        c = runtime.config
        name = request.voice or self.default_voice
        saved = None
        if name:
            param = request.voice_param if request.voice else "default_voice"
            saved = self.voices.load(name, param, c.num_codebooks, c.codebook_size)
        clips = list(saved.clips) if saved else []
        for ref in request.references:  # encoded once per Reference (a WS session's sentences)
            clips += ref.clips(runtime, self.limits)
        if not clips:
            return []
        return [Voice(saved.name if saved else "references", clips, runtime.sample_rate,
                      lexicon=saved.lexicon if saved else None)]

    def request(self, runtime: Runtime, request: SpeechRequest) -> Request:
        """The wire request's checked ``Request`` in its voice, with the operator's lexicon."""
        speech = request.speech
        finishing = replace(speech.finishing, lexicon=self.lexicon)
        return replace(speech, voices=tuple(self.voice(runtime, request)),
                       settings=replace(speech.settings, finishing=finishing))

    def start(self, synth: Synthesizer, task) -> SpeechJob:
        """``task``'s job (``task.job``, built by the local backend), its ``start`` event
        sent; a whole answer's finishing left for the handler (``task.answer``)."""
        request = self.request(synth.runtime, task.request)
        if request.words:
            check_timer(word_timer(synth), request.words)  # said before any work
        plan = synth.plan(request)
        if task.request.stream is None:
            [task.job] = synth.jobs(request, plan, deadline=task.deadline)
            task.answer = lambda job=task.job: synth.finish(request, plan,
                                                           synth.take(request, job))
        else:
            sink = synth.stream_sink(request, plan, lambda chunk: task.emit("chunk", chunk))
            [task.job] = synth.jobs(request, plan, sink, keep=False, deadline=task.deadline)
        if task.cancelled.is_set():
            task.job.cancel()
        task.emit("start", {"sample_rate": synth.sample_rate, "seed": task.job.seed,
                            "frame_length": synth.require_codec().frame_length})
        return task.job


def word_timer(synth: Synthesizer) -> Timer:
    """The model's word aligner, its folder found (or fetched) now: a 503 naming ``words``
    when this server has none."""
    try:
        return synth.word_timer()
    except (OSError, RuntimeError) as e:
        raise ApiError(503, f"this server cannot time words: {detail(e)}", "words") from None
