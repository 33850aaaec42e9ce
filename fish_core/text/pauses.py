"""Exact pauses: ``[pause:700ms]`` / ``[pause:1.5s]`` inline in a text, a script turn or a cue.

A tag is taken out of the text before anything is planned (the model never sees it) and stands
for exactly that much digital silence between the speech on either side. Tags are case-
insensitive; the duration is a number with the unit ``ms`` or ``s``, from 0 up to
``MAX_PAUSE`` seconds; several tags in a row add up; one request holds at most ``MAX_TOTAL``
seconds of them (``budgets``: a text, and a whole script or subtitle file over all its turns or
cues, ``check_total``). Anything else written as ``[pause:…]`` (no unit, a negative or absurd
length, a tag
left open) is a ``PauseError`` quoting the tag. S2's own ``[pause]`` (no duration) is a
delivery cue of the model and is left in the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..budgets import MAX_PAUSE_SECONDS, MAX_PAUSE_TOTAL_SECONDS
from ..params import FieldError
from .plan import SPEAKER_TAG

MAX_PAUSE = MAX_PAUSE_SECONDS  # seconds, one tag
MAX_TOTAL = MAX_PAUSE_TOTAL_SECONDS  # seconds, all tags of one request (held in memory)
TAG = re.compile(r"\[\s*pause\s*:([^\[\]\n]*)\]", re.IGNORECASE)
OPEN_TAG = re.compile(r"\[\s*pause\s*:", re.IGNORECASE)
DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)", re.IGNORECASE)
HINT = "write it as [pause:700ms] or [pause:1.5s]"


class PauseError(FieldError):
    """A ``[pause:…]`` tag that is malformed or asks for an absurd length (a ``RequestError``
    naming the text, script or cue that holds it)."""


@dataclass(frozen=True)
class Piece:
    """Speech between pauses: ``text`` (never empty) and the silence after it (None: none
    written there)."""

    text: str
    after: float | None = None


@dataclass(frozen=True)
class Spoken:
    """A text taken apart at its pause tags: silence before the first piece (``lead``), then
    the pieces, each with the silence written after it."""

    lead: float | None
    pieces: list[Piece]


def duration(tag: str, value: str, field: str = "text") -> float:
    """Seconds of one tag's ``value`` ("700ms", "1.5 s"); errors quote the tag."""
    value = value.strip()
    if value.startswith("-"):
        raise PauseError(f"{field}: {tag} is negative; a pause lasts 0 to {MAX_PAUSE:g} s",
                         field, tag)
    m = DURATION.fullmatch(value)
    if m is None:
        raise PauseError(f"{field}: {tag} is not a duration; {HINT}", field, tag)
    seconds = float(m.group(1)) / (1000.0 if m.group(2).lower() == "ms" else 1.0)
    if seconds > MAX_PAUSE:
        raise PauseError(f"{field}: {tag} is {seconds:g} s; a pause lasts at most "
                         f"{MAX_PAUSE:g} s (split it into several if you mean it)",
                         field, tag)
    return seconds


def check_total(seconds: float, field: str = "text") -> None:
    """The pause budget of one request (``budgets.MAX_PAUSE_TOTAL_SECONDS``): ``seconds`` of
    pause tags in ``field`` (a text, a whole script, a whole subtitle file)."""
    if seconds > MAX_TOTAL:
        raise PauseError(f"{field}: its [pause:…] tags add up to more than {MAX_TOTAL:g} s, the "
                         f"most silence one request may ask for; shorten them", field,
                         seconds)


def has_pauses(text: str) -> bool:
    return OPEN_TAG.search(text) is not None


def split_pauses(text: str, field: str = "text") -> Spoken:
    """``text`` cut at its pause tags. A piece after a pause that does not start with a speaker
    tag gets the one in force (so ``<|speaker:1|>Hi [pause:1s] there`` stays speaker 1's)."""
    lead, pieces, total, speaker = None, [], 0.0, None
    position = 0
    for m in TAG.finditer(text):
        seconds = duration(m.group(0), m.group(1), field)
        total += seconds
        check_total(total, field)
        speaker = _add(pieces, text[position:m.start()], speaker, field)
        if pieces:
            last = pieces[-1]
            pieces[-1] = Piece(last.text, (last.after or 0.0) + seconds)
        else:
            lead = (lead or 0.0) + seconds
        position = m.end()
    _add(pieces, text[position:], speaker, field)
    return Spoken(lead, pieces)


def _add(pieces: list[Piece], text: str, speaker: str | None, field: str) -> str | None:
    """Append ``text`` as a piece (when it holds more than whitespace and tags); returns the
    speaker tag in force after it."""
    left_open = OPEN_TAG.search(text)
    if left_open:
        raise PauseError(f"{field}: a pause tag is not closed near "
                         f"{text[left_open.start():left_open.start() + 24]!r}; {HINT}",
                         field)
    tags = SPEAKER_TAG.findall(text)
    body = text.strip()
    if SPEAKER_TAG.sub("", body).strip():
        if speaker is not None and not SPEAKER_TAG.match(body):
            body = speaker + body
        pieces.append(Piece(body))
    return f"<|speaker:{tags[-1]}|>" if tags else speaker


def strip_pauses(text: str) -> str:
    """``text`` without its pause tags (a transcript of what was said), tags checked."""
    split_pauses(text)
    return re.sub(r"[ \t]{2,}", " ", TAG.sub(" ", text)).strip()


# ---------------------------------------------------------------- scripts
PLACEHOLDER = re.compile("\ue000(\\d+)\ue001")


def protect(text: str) -> tuple[str, list[str]]:
    """Pause tags replaced by placeholders a script parser reads as plain text (a line
    ``[pause:2s]`` is not a ``[speaker]`` label); ``restore`` puts them back."""
    tags: list[str] = []

    def keep(m: re.Match) -> str:
        tags.append(m.group(0))
        return f"\ue000{len(tags) - 1}\ue001"

    return TAG.sub(keep, text), tags


def restore(text: str, tags: list[str]) -> str:
    return PLACEHOLDER.sub(lambda m: tags[int(m.group(1))], text)
