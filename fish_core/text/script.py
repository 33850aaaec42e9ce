"""Speaker scripts: reading the accepted forms (``parse_script``), mapping speakers onto voices
(``assign_speakers``) and checking a script against the voices given for it before anything is
generated (``check_script``: a dialogue's ``speech.request.Request``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from ..params import FieldError
from . import plan as textplan
from .plan import SPEAKER_TAG, Turn, split_turns
from .pauses import protect, restore


# ---------------------------------------------------------------- reading a script
BRACKET_LINE = re.compile(r"^\s*\[([^\]\n]{1,40})\]\s*:?\s*(.*)$")
NAME_LINE = re.compile(r"^\s*([^\W\d][\w .'\-]{0,39}?)\s*:\s+(.*)$")
NUMBERED = re.compile(r"^(?:speaker|spk|s)[ _\-]?(\d+)$", re.IGNORECASE)
BARE_LABEL = re.compile(r"^\s*(?:\[[^\]\n]{1,40}\]\s*:?|[^\W\d][\w .'\-]{0,39}?\s*:)\s*$")


class ScriptError(FieldError):
    """A speaker script cannot be mapped onto the given voices."""

    FIELD = "script"


class EmptyScript(ScriptError):
    """A script with nothing to say."""


@dataclass(frozen=True)
class ScriptTurn:
    label: str  # as written: "speaker_1", "Alice", "0" …
    text: str


def parse_script(script: str, names: list[str] | None = None) -> list[ScriptTurn]:
    """Turns of a multi-speaker script in any of the accepted forms:

    ``<|speaker:0|>Hi``, ``[speaker_1]: Hi`` / ``[Alice] Hi``, or ``Alice: Hi`` lines.
    ``Name:`` lines count as speaker lines when ``Name`` is one of ``names``, or when the script
    starts with such a line and has at least two (so a lone "Note: …" in prose is left alone).
    Lines without a label continue the previous turn."""
    if SPEAKER_TAG.search(script):
        return [ScriptTurn(str(t.speaker) if t.speaker is not None else "", t.text)
                for t in split_turns(script)]
    lines = [line for line in script.splitlines() if line.strip()]
    if lines and all(BARE_LABEL.match(line) for line in lines):
        raise ScriptError(f"the script holds only speaker labels ({', '.join(lines[:3])}) and no "
                          "text to say: write each line as 'Name: what they say'")
    known = {n.casefold() for n in names or []}
    named = [bool(NAME_LINE.match(line)) for line in lines]
    dialogue = bool(lines) and named[0] and sum(named) >= 2
    return _gather_turns(lines, dialogue, known)


def _speaker_line(line: str, dialogue: bool, known: set[str]) -> re.Match | None:
    """The label and text of a speaker line; None for a line that continues a turn. A
    ``Name:`` line is a speaker line in a dialogue or when ``Name`` is a voice's name."""
    m = BRACKET_LINE.match(line)
    if m:
        return m
    m = NAME_LINE.match(line)
    if m and (dialogue or m.group(1).strip().casefold() in known):
        return m
    return None


def _gather_turns(lines: list[str], dialogue: bool, known: set[str]) -> list[ScriptTurn]:
    """Lines into turns: a speaker line opens one, any other line continues the last."""
    turns: list[list[str]] = []
    for line in lines:
        m = _speaker_line(line, dialogue, known)
        if m:
            turns.append([m.group(1).strip(), m.group(2).strip()])
        elif turns:
            turns[-1][1] = (turns[-1][1] + " " + line.strip()).strip()
        else:
            turns.append(["", line.strip()])
    return [ScriptTurn(label, text) for label, text in turns if text]


def assign_speakers(turns: list[ScriptTurn], names: list[str],
                    require_voice: bool) -> list[Turn]:
    """Map each turn's label to a speaker index = a position in ``names`` (the voices).

    A label equal to a voice name (case-insensitive) takes that voice; ``<|speaker:i|>`` takes
    voice i; ``speaker_N``/``S N`` take the N-th voice, 1-based (0-based if the script uses
    ``speaker_0``); other labels take the unclaimed voices in order of appearance. Unlabelled
    text goes to the first speaker. With ``require_voice``, a label left without a voice is an
    error naming it."""
    mapping, pending = _claimed_voices(turns, names)
    _give_free_voices(mapping, pending, len(names))
    mapping.setdefault("", min(mapping.values(), default=0))
    if require_voice:
        _check_voiced(mapping, turns, names)
    return [Turn(t.text, mapping[t.label]) for t in turns]


def _claimed_voices(turns: list[ScriptTurn], names: list[str]
                    ) -> tuple[dict[str, int], list[str]]:
    """The labels that say their voice (its name, ``i``, ``speaker_N``) with its index, and
    the other labels in order of appearance."""
    folded = [n.casefold() for n in names]
    numbered = [int(m.group(1)) for t in turns if (m := NUMBERED.match(t.label))]
    base = 0 if 0 in numbered else 1
    mapping: dict[str, int] = {}
    pending = []
    for t in turns:
        label = t.label
        if label in mapping:
            continue
        if label.casefold() in folded:
            mapping[label] = folded.index(label.casefold())
        elif label.isdigit():
            mapping[label] = int(label)
        elif (m := NUMBERED.match(label)) is not None:
            mapping[label] = int(m.group(1)) - base
        elif label and label not in pending:  # once per label, however many turns it has
            pending.append(label)
    return mapping, pending


def _give_free_voices(mapping: dict[str, int], pending: list[str], voices: int) -> None:
    """Give the ``pending`` labels the unclaimed voices in order, then indices past them."""
    free = [i for i in range(max(voices, 1)) if i not in mapping.values()]
    next_index = max([*mapping.values(), *free, voices - 1]) + 1
    for label in pending:
        if free:
            mapping[label] = free.pop(0)
        else:
            mapping[label] = next_index
            next_index += 1


def _check_voiced(mapping: dict[str, int], turns: list[ScriptTurn], names: list[str]) -> None:
    """Every label the script uses has a voice in ``names``, else an error naming them."""
    missing = sorted({label or "(unlabelled)" for label, i in mapping.items()
                      if (i < 0 or i >= len(names)) and any(t.label == label for t in turns)})
    if missing:
        raise ScriptError(f"speaker(s) {', '.join(missing)} have no reference voice; "
                          f"voices given: {', '.join(names) or 'none'}")


# ---------------------------------------------------------------- checking it against the voices
def check_script(script: str, names: Sequence[str], require_voices: bool = True,
                 max_speakers: int | None = None, model: str = "this model"
                 ) -> list[textplan.Turn]:
    """The turns of ``script`` with their speaker index (a position in ``names``, the voices'
    names in speaker order). Raises ``ScriptError`` when the script is empty, when two voices
    share a name the script uses, (``require_voices``) when a speaker has no voice, or (with
    ``max_speakers``, a limit of ``model``, e.g. Drama 3's 16) when a speaker index is past it.
    Without ``max_speakers`` (S2) speaker indices are not bounded here."""
    names = list(names)
    script, pauses = protect(script)  # a line "[pause:2s]" is a pause, not a [speaker] label
    turns = [ScriptTurn(t.label, restore(t.text, pauses))
             for t in parse_script(script, names)]
    check_unique_names(turns, names)
    assigned = assign_speakers(turns, names, require_voices)
    if not assigned:
        raise EmptyScript("the script is empty: nothing to say", "script", script)
    if max_speakers is not None:
        check_speaker_count(assigned, max_speakers, model)
    return assigned


def check_speaker_count(turns: Sequence[textplan.Turn], max_speakers: int, model: str) -> None:
    """Every speaker index below ``max_speakers``: the speakers ``model`` can tell apart."""
    over = sorted({t.speaker for t in turns if t.speaker is not None and t.speaker >= max_speakers})
    if over:
        raise ScriptError(
            f"speaker {over[0]} is past {model}'s {max_speakers} speakers: it speaks "
            f"<|speaker:0|> … <|speaker:{max_speakers - 1}|>, at most {max_speakers} different "
            "speakers in one script")


def check_unique_names(turns: Sequence[ScriptTurn], names: Sequence[str]) -> None:
    """A ``Name:`` line must pick one voice: no two voices may share a name the script uses."""
    folded = [n.casefold() for n in names]
    used = {t.label.casefold() for t in turns}
    for name in sorted({n for n in folded if folded.count(n) > 1 and n in used}):
        wired = [f"speaker_{i + 1}" for i, n in enumerate(folded) if n == name]
        raise ScriptError(f"{' and '.join(wired)} are both named {name!r}, which the "
                                   "script uses: give each voice its own name")
