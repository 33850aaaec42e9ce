"""Transcribing a clip, with word times when asked: Qwen3-ASR says what was said, then the
Qwen3-ForcedAligner says when each word was said, piece by piece, as the reference's
``transcribe(..., return_time_stamps=True)`` does (golden/e2e/transcribe_with_timestamps.json).

With word times the clip is cut into pieces of at most 3 minutes (the aligner's limit) rather
than 20; each piece with text is aligned with that text in the piece's language, and its word
times are moved by the piece's offset in the clip (rounded to the millisecond).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import split
from .aligner import Word
from .asr import MAX_NEW_TOKENS, AsrInputError, SpeechRecognizer
from .transcript import merge_languages


@dataclass(frozen=True)
class Heard:
    """What a clip says: ``language`` (``"Chinese,English"`` when it changes; ``""`` unknown
    or silent), ``text``, and with word times asked for, ``words`` (text, start and end in
    seconds from the clip's start)."""
    language: str
    text: str
    words: tuple[Word, ...] | None = None


def transcribe_clip(recognizer: SpeechRecognizer, audio, sample_rate: int = split.SAMPLE_RATE,
                    *, language: str | None = None, context: str = "", aligner=None,
                    max_new_tokens: int = MAX_NEW_TOKENS, batch_size: int = 8) -> Heard:
    """``audio`` (samples at ``sample_rate``, mono or channels × samples) → ``Heard``; with an
    ``aligner`` (a ``ForcedAligner``), its words timed too."""
    limit = split.MAX_ALIGN_SECONDS if aligner is not None else split.MAX_ASR_SECONDS
    pieces = recognizer.hear([audio], sample_rate, language, context, max_new_tokens,
                             batch_size, limit)[0]
    said = merge_languages(p.language for p in pieces)
    text = "".join(p.text for p in pieces)
    if aligner is None:
        return Heard(said, text)
    timed = [p for p in pieces if p.text.strip()]
    for p in timed:
        try:
            aligner.words("", p.language)  # the language check, before any model work
        except ValueError as e:
            raise AsrInputError(f"word times: the clip was heard as {p.language or 'no language'}"
                                f"; {e}. Give --language to transcribe it as one") from None
    words: list[Word] = []
    for start in range(0, len(timed), batch_size):
        part = timed[start:start + batch_size]
        aligned = aligner.align([torch.from_numpy(p.wave) for p in part], [p.text for p in part],
                                [p.language for p in part])
        for p, result in zip(part, aligned):
            words += [Word(w.text, round(w.start + p.offset, 3), round(w.end + p.offset, 3))
                      for w in result.words]
    return Heard(said, text, tuple(words))
