"""Where a speech request becomes a job, once: the one place that resolves its voice (the saved
voice by name, through the library's loaded-voice memo, its name kept), adds its references
(each encoded once per request or WebSocket session, ``protocol.Reference``), plans its text
(``speech.finishing.Finishing``: the operator's lexicon, the voice's own, pauses) and builds the
``SpeechJob`` whose chunks go to the task's ``emit`` (through a ``TakeLayout`` when pauses, speed
or a stream's loudness ask for one). Runs on the scheduler's thread: the codec encodes references there.
"""

from __future__ import annotations

from ..audio.loudness import as_loudness
from ..params import SamplingParams
from ..speech.finishing import Finishing
from ..speech.voices import Voice
from ..local.driver import SpeechJob
from ..speech.layout import TakeLayout, layout_needed
from ..text.lexicon import Lexicon
from .api.protocol import SpeechRequest
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

    def start(self, runtime, task) -> SpeechJob:
        """``task``'s job (``task.job``), its ``start`` event sent."""
        request = task.request
        voices = self.voice(runtime, request)
        params = SamplingParams(request.temperature, request.top_p, request.top_k,
                                request.max_new_tokens)
        # Finishing: lexicon and pauses here, rate in a layout; loudness in the layout for a
        # stream (a gain fixed from its start), off this worker for a whole answer (normalised
        # at its end by the handler, ``api.speak.whole``: the model serves others meanwhile).
        loudness = as_loudness(request.loudness) if request.stream is not None else None
        finishing = Finishing(loudness, request.speed, self.lexicon)
        batches = finishing.batches(request.text, voices, request.max_bytes)
        send = {"emit": lambda chunk: task.emit("chunk", chunk)}
        laid_out = layout_needed(batches, 0.0, finishing)
        layout = None  # made after "start": a lead pause's silence is the first chunk
        if laid_out:
            send = {"emit": lambda chunk: layout.chunk(chunk),
                    "end_batch": lambda: layout.end_batch()}
        task.job = SpeechJob(runtime, batches, voices, params=params, seed=request.seed,
                             max_bytes=request.max_bytes, deadline=task.deadline, **send)
        if task.cancelled.is_set():
            task.job.cancel()
        task.emit("start", {"sample_rate": runtime.sample_rate, "seed": task.job.seed,
                            "frame_length": runtime.require_codec().frame_length})
        if laid_out:
            layout = TakeLayout(lambda samples, rate: task.emit("chunk", samples),
                                runtime.sample_rate, batches, 0.0, finishing)
        return task.job
