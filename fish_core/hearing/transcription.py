"""Transcribing a clip, with word times when asked: Qwen3-ASR says what was said, then the
Qwen3-ForcedAligner says when each word was said, piece by piece, as the reference's
``transcribe(..., return_time_stamps=True)`` does (golden/e2e/transcribe_with_timestamps.json).

With word times the clip is cut into pieces of at most 3 minutes (the aligner's limit) rather
than 20; each piece with text is aligned with that text in the piece's language, and its word
times are moved by the piece's offset in the clip (rounded to the millisecond).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from . import split
from .aligner import Word
from .asr import AsrInputError, HeardPiece, SpeechRecognizer, check_settings, prepare_clip
from .transcript import LANGUAGES, merge_languages


@dataclass(frozen=True)
class Heard:
    """What a clip says: ``language`` (``"Chinese,English"`` when it changes; ``""`` unknown
    or silent), ``text``, and with word times asked for, ``words`` (text, start and end in
    seconds from the clip's start)."""
    language: str
    text: str
    words: tuple[Word, ...] | None = None
    complete: bool = True  # False: a piece ran out of tokens before the model ended it
    note: str = ""  # why some words have no times (a language the aligner does not know)


def transcribe_clip(recognizer: SpeechRecognizer, audio, sample_rate: int = split.SAMPLE_RATE,
                    *, language: str | None = None, context: str = "", aligner=None,
                    max_new_tokens: int | None = None, batch_size: int = 8) -> Heard:
    """``audio`` (samples at ``sample_rate``, mono or channels × samples) → ``Heard``; with an
    ``aligner`` (a ``ForcedAligner``), its words timed too."""
    limit = split.MAX_ALIGN_SECONDS if aligner is not None else split.MAX_ASR_SECONDS
    if aligner is not None and language is not None and str(language).strip():
        try:
            aligner.words("", language)  # a forced language the aligner must know
        except ValueError as e:
            raise AsrInputError(f"word times: {e}") from None
    pieces = recognizer.hear([audio], sample_rate, language, context, max_new_tokens,
                             batch_size, limit)[0]
    said = merge_languages(p.language for p in pieces)
    text = "".join(p.text for p in pieces)
    complete = all(p.complete for p in pieces)
    if aligner is None:
        return Heard(said, text, None, complete)
    timed, note = _timeable(aligner, pieces)
    return Heard(said, text, tuple(_timed_words(aligner, timed, batch_size)), complete, note)


def _timeable(aligner, pieces: list[HeardPiece]) -> tuple[list[HeardPiece], str]:
    """The pieces with text in a language the aligner knows, and a note on the others (a
    detected language it does not know: text only, no word times)."""
    timed, untimed = [], []
    for p in (p for p in pieces if p.text.strip()):
        try:
            aligner.words("", p.language)
            timed.append(p)
        except ValueError as e:
            untimed.append((p.language or "no language", str(e)))
    if not untimed:
        return timed, ""
    heard_as = ", ".join(dict.fromkeys(lang for lang, _ in untimed))
    return timed, (f"word times: {len(untimed)} of {len(timed) + len(untimed)} pieces were "
                   f"heard as {heard_as} and have no word times ({untimed[0][1]}); give the "
                   "language to time them")


def _timed_words(aligner, timed: list[HeardPiece], batch_size: int) -> list[Word]:
    """The words of the ``timed`` pieces, aligned ``batch_size`` at a time, their times moved
    by each piece's offset in the clip (rounded to the millisecond)."""
    words: list[Word] = []
    for start in range(0, len(timed), batch_size):
        part = timed[start:start + batch_size]
        aligned = aligner.align([torch.from_numpy(p.wave) for p in part], [p.text for p in part],
                                [p.language for p in part])
        for p, result in zip(part, aligned):
            words += [Word(w.text, round(w.start + p.offset, 3), round(w.end + p.offset, 3))
                      for w in result.words]
    return words


def load_recognizer(asr: str | Path | None = None, models_dir: str | Path | None = None,
                    device: str = "cpu", dtype: str | None = None, download: bool = True
                    ) -> SpeechRecognizer:
    """A loaded ``SpeechRecognizer``: from the folder ``asr`` or the official checkpoint in
    ``models_dir`` (downloaded on first use). The last one loaded is kept for the next call."""
    from .asr_hub import resolve_asr

    return _loaded(resolve_asr(asr, models_dir, download), str(device), dtype)


@lru_cache(maxsize=1)
def _loaded(folder: Path, device: str, dtype: str | None) -> SpeechRecognizer:
    return SpeechRecognizer.from_pretrained(folder, device, dtype)


def transcribe(audio, sample_rate: int | None = None, *, language: str | None = None,
               context: str = "", words: bool = False, asr=None, aligner=None,
               models_dir: str | Path | None = None, device: str = "cpu",
               dtype: str | None = None, download: bool = True,
               max_new_tokens: int | None = None) -> Heard:
    """What ``audio`` says (a tensor/array ``[T]`` or ``[C, T]`` at ``sample_rate``, or a
    ``{"waveform", "sample_rate"}`` dict), and with ``words=True`` when each word is said.
    ``language`` forces one of Qwen3-ASR's 30 (None: detected); ``context`` is a hint (names,
    terms). ``asr``/``aligner``: a loaded model to reuse, a checkpoint folder, or None for the
    official one (downloaded on first use). Everything is checked before a model is loaded or
    downloaded; errors name the field. A recognised transcript can be wrong: read it."""
    recognizer = asr if isinstance(asr, SpeechRecognizer) else None
    wave = _checked_clip(audio, sample_rate, language, context, max_new_tokens, words,
                         recognizer.languages if recognizer else LANGUAGES)
    folder = _aligner_folder(aligner, models_dir, download) if words else None  # before a load
    if recognizer is None:
        recognizer = load_recognizer(asr, models_dir, device, dtype, download)
    if folder is not None:
        from . import load_aligner

        aligner = load_aligner(folder, models_dir, device, dtype, download)
    return transcribe_clip(recognizer, wave, split.SAMPLE_RATE, language=language, context=context,
                           aligner=aligner if words else None, max_new_tokens=max_new_tokens)


def _checked_clip(audio, sample_rate: int | None, language: str | None, context: str,
                  max_new_tokens: int | None, words: bool, languages) -> np.ndarray:
    """``transcribe``'s request checked before any model is loaded or downloaded (errors name
    the field): the clip, mono at 16 kHz."""
    if isinstance(audio, Mapping):
        from ..audio.files import from_mapping

        audio, sample_rate = from_mapping(audio, "audio")
        if getattr(audio, "ndim", 0) == 3:  # ComfyUI's [B, C, T]: item 0, as audio.files does
            audio = audio[0]
    if sample_rate is None:
        raise AsrInputError("sample_rate: give the audio's sample rate")
    check_settings(language, context, max_new_tokens, languages)
    wave = prepare_clip(audio, sample_rate)
    if words and language is not None and str(language).strip():
        from .words import check_language as aligner_language

        try:
            aligner_language(language)  # before any load, as transcribe_clip checks it
        except ValueError as e:
            raise AsrInputError(f"word times: {e}") from None
    return wave


def _aligner_folder(aligner, models_dir: str | Path | None, download: bool) -> Path | None:
    """The folder of the aligner to load (found or downloaded), or None: ``aligner`` is one
    already loaded."""
    from .aligner import ForcedAligner
    from .hub import resolve_aligner

    if isinstance(aligner, ForcedAligner):
        return None
    return resolve_aligner(aligner, models_dir, download)
