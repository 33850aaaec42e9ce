"""Checked takes: each take heard by the speech recogniser and scored against the text it was
asked to say (``scoring.score``: word or character error rate, the words that differ); the best
take is the one with the lowest rate (the first of equals).

The building block of ``--takes N --check``: a take whose score is past a threshold can be
spoken again. The score of a take is exactly ``scoring.score(text, transcript)``: what a user
gets from scoring the transcript themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from .asr import SpeechRecognizer, Transcript
from .scoring import Score, score


@dataclass(frozen=True)
class CheckedTake:
    """One take: what was heard and how far it is from what was asked."""
    heard: Transcript
    score: Score

    @property
    def rate(self) -> float:
        return self.score.rate


def check_takes(recognizer: SpeechRecognizer, takes: list, sample_rate: int, text: str,
                language: str | None = None, batch_size: int = 8) -> list[CheckedTake]:
    """Every take (samples at ``sample_rate``) transcribed — in batches of ``batch_size``, with
    ``language`` forced when it is known — and scored against ``text``."""
    if not isinstance(text, str):
        raise ValueError(f"text must be the text the takes were asked to say, not "
                         f"{type(text).__name__}")
    heard = recognizer.transcribe_many(list(takes), sample_rate, language,
                                       batch_size=batch_size)
    return [CheckedTake(h, score(text, h.text)) for h in heard]


def best_take(checked: list[CheckedTake]) -> int:
    """The index of the take that says most nearly what was asked (the first of equals; a take
    cut short by its token budget only wins when all are)."""
    if not checked:
        raise ValueError("no takes to choose from")
    return min(range(len(checked)),
               key=lambda i: (not checked[i].heard.complete, checked[i].rate, i))
