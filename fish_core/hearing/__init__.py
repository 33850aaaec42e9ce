"""The models that listen: Qwen3-ForcedAligner for word times, Qwen3-ASR for transcripts.

One concept per file: ``features`` (log-mel), ``audio_encoder``, ``text_model`` (Qwen3 with
float M-RoPE positions, optional static KV cache), ``thinker`` (encoder + text model + head),
``config``, ``checkpoint`` (loading the real tensor names), ``tokenizer``, ``words`` (per-language
word splitting), ``timestamps`` (``fix_timestamps``), ``aligner`` (one pass → word times),
``hub`` (the checkpoint's folder or download). Nothing here is imported at ComfyUI start-up;
each module loads when first used.

The Python door::

    from fish_core.hearing import align
    words = align(waveform, "The quick brown fox.", "English", sample_rate=44100)
    # [Word(text='The', start=0.0, end=0.24), …]  (seconds from the clip's start)

    from fish_core.hearing import transcribe
    heard = transcribe(waveform, 44100, words=True)
    # Heard(language='English', text='The quick brown fox.', words=(Word(…), …))
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

__all__ = ["align", "load_aligner", "transcribe", "load_recognizer"]


def load_aligner(aligner: str | Path | None = None, models_dir: str | Path | None = None,
                 device: str = "cpu", dtype: str | None = None, download: bool = True):
    """A loaded ``ForcedAligner``: from the folder ``aligner`` or the official checkpoint in
    ``models_dir`` (downloaded on first use). The last one loaded is kept for the next call."""
    from .hub import resolve_aligner

    return _loaded(resolve_aligner(aligner, models_dir, download), str(device), dtype)


@lru_cache(maxsize=1)
def _loaded(folder: Path, device: str, dtype: str | None):
    from .aligner import ForcedAligner

    return ForcedAligner.from_pretrained(folder, device, dtype)


def align(audio, text: str, language: str, sample_rate: int | None = None, *, aligner=None,
          models_dir: str | Path | None = None, device: str = "cpu", dtype: str | None = None,
          download: bool = True):
    """Each word of ``text`` (as the aligner splits it for ``language``) with its start and end
    in seconds in ``audio`` (a tensor/array ``[T]`` or ``[C, T]`` at ``sample_rate``, or a
    ``{"waveform", "sample_rate"}`` dict). ``aligner``: a loaded ``ForcedAligner`` to reuse,
    a checkpoint folder, or None for the official one. Text, language and audio are checked
    before any model is loaded or downloaded; errors name the field."""
    from ..audio.files import prepare_audio
    from .config import HearingConfig
    from .hub import resolve_aligner

    language = _checked_text(text, language)
    loaded, folder = _given(aligner, models_dir)
    rate = _sample_rate(loaded, folder)
    wave = prepare_audio(audio, sample_rate, target_sr=rate, name="audio")
    words = _words(text, language, loaded)
    if loaded is None:
        folder = folder or resolve_aligner(None, models_dir, download)
        _check_length(wave.numel() / rate, HearingConfig.from_dir(folder))
        loaded = _loaded(folder, str(device), dtype)
    else:
        _check_length(wave.numel() / rate, loaded.model.config)
    return loaded.align_words([wave], [words])[0].words


def _checked_text(text, language) -> str:
    """``align``'s text and language checked (no model needed): the canonical language name."""
    from .words import check_language

    if not isinstance(text, str) or not text.strip():
        raise ValueError("text: give the words that are spoken in the audio")
    return check_language(language)


def _given(aligner, models_dir: str | Path | None) -> tuple:
    """``align``'s ``aligner`` as ``(loaded, None)``, or ``(None, folder)``: the folder it names
    (found, not downloaded), None for the official one."""
    from .aligner import ForcedAligner
    from .hub import resolve_aligner

    if isinstance(aligner, ForcedAligner):
        return aligner, None
    return None, (resolve_aligner(aligner, models_dir, download=False) if aligner else None)


def _sample_rate(loaded, folder: Path | None) -> int:
    """The rate the aligner hears at: the loaded one's, its folder's, or the official one's."""
    from .features import FeatureConfig

    if loaded is not None:
        return loaded.sample_rate
    return FeatureConfig.from_dir(folder).sample_rate if folder else FeatureConfig().sample_rate


def _words(text: str, language: str, loaded) -> list[str]:
    """The words of ``text`` the aligner times (at least one)."""
    from .words import split_words

    words = split_words(text, language, loaded.korean_dict if loaded else None)
    if not words:
        raise ValueError("text: has no words to time (only punctuation or symbols)")
    return words


def _check_length(seconds: float, config) -> None:
    """A clip the aligner can time in one pass (``config``: its ``HearingConfig``)."""
    longest = config.head_size * config.timestamp_segment_ms / 1000.0
    if seconds > longest:
        raise ValueError(f"audio: {seconds:.1f} s is longer than the aligner "
                         f"can time ({longest:g} s); align it in parts")


def load_recognizer(asr: str | Path | None = None, models_dir: str | Path | None = None,
                    device: str = "cpu", dtype: str | None = None, download: bool = True):
    """A loaded Qwen3-ASR ``SpeechRecognizer`` (``transcription.load_recognizer``)."""
    from .transcription import load_recognizer as load

    return load(asr, models_dir, device, dtype, download)


def transcribe(audio, sample_rate: int | None = None, **options):
    """What ``audio`` says, with word times when ``words=True``: see
    ``transcription.transcribe`` (language, context, words, asr, aligner, models_dir, device,
    dtype, download, max_new_tokens)."""
    from .transcription import transcribe as run

    return run(audio, sample_rate, **options)
