"""Where a speech request becomes a job, once: the one place that resolves its voice (the saved
voice by name, through the library's loaded-voice memo, its name kept), adds its references
(each encoded once per request or WebSocket session, ``request.Reference``), plans its text
as the front plans every request (``speech.front.plan``, with the operator's lexicon over the
request's ``Finishing``) and builds the
``SpeechJob`` of its checked ``Request`` (sampling, seed, batch size: nothing checked again) whose
chunks go to the task's ``emit`` (through a ``TakeLayout`` when pauses, speed or a stream's
loudness ask for one). Runs on the scheduler's thread: the codec encodes references there.
"""

from __future__ import annotations

from dataclasses import replace

from ..local.driver import SpeechJob
from ..speech.finishing import Finishing
from ..speech.front import plan
from ..speech.layout import TakeLayout, layout_needed
from ..speech.voices import Voice
from ..text.lexicon import Lexicon
from .request import SpeechRequest
from .limits import Limits
from .voicelib import VoiceLibrary


class Jobs:
    def __init__(self, voices: VoiceLibrary, limits: Limits, default_voice: str | None = None,
                 lexicon: Lexicon | None = None):
        self.voices = voices
        self.limits = limits
        self.default_voice = default_voice
        self.lexicon = lexicon

    def voice(self, runtime, request: SpeechRequest) -> list[Voice]:
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

    def finishing(self, request: SpeechRequest) -> Finishing:
        """The request's finishing with the operator's lexicon. Loudness in the layout for a
        stream (a gain fixed from its start), off this worker for a whole answer (normalised at
        its end by the handler, ``api.speak.whole``: the model serves others meanwhile)."""
        finishing = request.speech.finishing
        loudness = finishing.loudness if request.stream is not None else None
        return replace(finishing, loudness=loudness, lexicon=self.lexicon)

    def start(self, runtime, task) -> SpeechJob:
        """``task``'s job (``task.job``), its ``start`` event sent."""
        request, speech = task.request, task.request.speech
        voices = self.voice(runtime, request)
        finishing = self.finishing(request)
        batches = plan(replace(speech, voices=tuple(voices), finishing=finishing)).batches
        send = {"emit": lambda chunk: task.emit("chunk", chunk)}
        laid_out = layout_needed(batches, 0.0, finishing)
        layout = None  # made after "start": a lead pause's silence is the first chunk
        if laid_out:
            send = {"emit": lambda chunk: layout.chunk(chunk),
                    "end_batch": lambda: layout.end_batch()}
        task.job = SpeechJob(runtime, batches, voices, params=speech.sampling, seed=speech.seed,
                             max_bytes=speech.max_bytes, history_turns=speech.history_turns,
                             deadline=task.deadline, **send)
        if task.cancelled.is_set():
            task.job.cancel()
        task.emit("start", {"sample_rate": runtime.sample_rate, "seed": task.job.seed,
                            "frame_length": runtime.require_codec().frame_length})
        if laid_out:
            layout = TakeLayout(lambda samples, rate: task.emit("chunk", samples),
                                runtime.sample_rate, batches, 0.0, finishing)
        return task.job
