"""``Listener``: the speech recogniser a synthesizer loads when it first needs one — a reference
clip given without its transcript, or takes to check (``Settings.check``) — and frees with it.

Qwen3-ASR (``hearing``): a folder (``asr``, the CLI's ``--asr FOLDER``) or the official
checkpoint in the models folder, downloaded on first use unless ``download`` is False. A
recognised transcript can be wrong: the doors show it, the voice file keeps it, and a given
text always wins.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch


class Listener:
    def __init__(self, asr: str | Path | None = None, models_dir: str | Path | None = None,
                 device: str | torch.device = "cpu", dtype=None, download: bool = True):
        self.asr, self.models_dir, self.download = asr, models_dir, download
        self.device, self.dtype = str(device), dtype
        self.recognizer = None  # loaded on first use
        self.aligner = None  # the forced aligner, for word times (loaded when asked for)

    def configure(self, asr: str | Path | None = None, models_dir: str | Path | None = None,
                  download: bool | None = None) -> None:
        """Where the recogniser comes from (a loaded one is dropped when that changes)."""
        before = (self.asr, self.models_dir, self.download)
        self.asr, self.models_dir = asr, models_dir
        if download is not None:
            self.download = download
        if (self.asr, self.models_dir, self.download) != before:
            self.release()

    def load(self):
        """The ``SpeechRecognizer``, loaded (or downloaded) the first time."""
        if self.recognizer is None:
            from ..hearing.asr import SpeechRecognizer
            from ..hearing.asr_hub import resolve_asr

            folder = resolve_asr(self.asr, self.models_dir, self.download)
            self.recognizer = SpeechRecognizer.from_pretrained(folder, self.device, self.dtype)
        return self.recognizer

    def load_aligner(self):
        """The Qwen3-ForcedAligner (word times), from the same models folder, loaded (or
        downloaded) the first time."""
        if self.aligner is None:
            from ..hearing.aligner import ForcedAligner
            from ..hearing.hub import resolve_aligner

            folder = resolve_aligner(None, self.models_dir, self.download)
            self.aligner = ForcedAligner.from_pretrained(folder, self.device, self.dtype)
        return self.aligner

    def release(self) -> None:
        self.recognizer = self.aligner = None

    def hear(self, audio, sample_rate: int, language: str | None = None, context: str = "",
             words: bool = False):
        """What a clip says (``hearing.transcription.Heard``), with word times when ``words``;
        the clip, language and context checked before a model loads."""
        from ..hearing.asr import check_settings, prepare_clip
        from ..hearing.transcript import LANGUAGES
        from ..hearing.transcription import transcribe_clip

        language = check_settings(language, context, None, LANGUAGES)
        wave = prepare_clip(audio, sample_rate)
        aligner = self.load_aligner() if words else None
        return transcribe_clip(self.load(), wave, 16000, language=language, context=context,
                               aligner=aligner)

    def transcript(self, audio, sample_rate: int | None = None, language: str | None = None
                   ) -> str:
        """What a reference clip (a file path, samples at ``sample_rate``, or a
        ``{"waveform", "sample_rate"}`` dict) says, cut into pieces where the reference
        implementation cuts a long clip. A clip in which no words are heard is an error that
        asks for its text; a transcript cut short by its token budget is kept with a
        warning."""
        from ..hearing.transcription import transcribe_clip

        wave, rate = clip_samples(audio, sample_rate)
        heard = transcribe_clip(self.reference_recognizer(), wave, rate, language=language)
        text = heard.text.strip()
        if not text:
            raise ValueError("reference transcript: no words were heard in the reference "
                             "clip; give its text")
        if not heard.complete:
            warnings.warn("the reference clip's transcript ran out of tokens before the clip "
                          "ended: check it", stacklevel=2)
        return text

    def reference_recognizer(self):
        """The recogniser, loaded now, for a reference clip given without its transcript: when
        it is not here, an error that also asks for the clip's words."""
        from ..loading.hub import ModelNotFound

        try:
            return self.load()
        except ModelNotFound as e:
            raise ModelNotFound(f"reference transcript: none given, and the speech recogniser "
                                f"that would hear it is not here: {e}. Or give the words "
                                "spoken in the clip") from None

    def check(self, waves: list[torch.Tensor], sample_rate: int, text: str,
              language: str | None = None) -> list:
        """Each take heard and scored against ``text`` (``hearing.checking.check_takes``)."""
        from ..hearing.checking import check_takes

        return check_takes(self.load(), waves, sample_rate, text, language)


def clip_samples(audio, sample_rate: int | None):
    """``(samples, rate)`` of a reference clip given as a file, samples or a mapping."""
    from collections.abc import Mapping

    if isinstance(audio, (str, Path)):
        from ..audio.files import check_audio_file, load_audio

        rate = check_audio_file(audio, "reference audio").samplerate  # heard at its own rate
        return load_audio(audio, target_sr=rate, field="reference audio"), rate
    if isinstance(audio, Mapping):
        from ..audio.files import from_mapping

        audio, sample_rate = from_mapping(audio, "reference audio")
    if getattr(audio, "ndim", 0) == 3:  # ComfyUI's [B, C, T]: item 0, as encoding takes it
        audio = audio[0]
    if sample_rate is None:
        raise ValueError("reference audio: give its sample rate")
    return audio, int(sample_rate)
