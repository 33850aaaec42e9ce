"""Checking a multi-speaker script against the voices given for it, before anything is
generated (``Synthesizer.dialogue`` and the Multi-Speaker node both call ``check_script``)."""

from __future__ import annotations

from typing import Sequence

from . import plan as textplan
from .pauses import protect, restore


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
    turns = [textplan.ScriptTurn(t.label, restore(t.text, pauses))
             for t in textplan.parse_script(script, names)]
    check_unique_names(turns, names)
    assigned = textplan.assign_speakers(turns, names, require_voices)
    if not assigned:
        raise textplan.ScriptError("the script is empty: nothing to say")
    if max_speakers is not None:
        check_speaker_count(assigned, max_speakers, model)
    return assigned


def check_speaker_count(turns: Sequence[textplan.Turn], max_speakers: int, model: str) -> None:
    """Every speaker index below ``max_speakers``: the speakers ``model`` can tell apart."""
    over = sorted({t.speaker for t in turns if t.speaker is not None and t.speaker >= max_speakers})
    if over:
        raise textplan.ScriptError(
            f"speaker {over[0]} is past {model}'s {max_speakers} speakers: it speaks "
            f"<|speaker:0|> … <|speaker:{max_speakers - 1}|>, at most {max_speakers} different "
            "speakers in one script")


def check_unique_names(turns: Sequence[textplan.ScriptTurn], names: Sequence[str]) -> None:
    """A ``Name:`` line must pick one voice: no two voices may share a name the script uses."""
    folded = [n.casefold() for n in names]
    used = {t.label.casefold() for t in turns}
    for name in sorted({n for n in folded if folded.count(n) > 1 and n in used}):
        wired = [f"speaker_{i + 1}" for i, n in enumerate(folded) if n == name]
        raise textplan.ScriptError(f"{' and '.join(wired)} are both named {name!r}, which the "
                                   "script uses: give each voice its own name")
