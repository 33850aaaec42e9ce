"""Checking a multi-speaker script against the voices given for it, before anything is
generated (``Synthesizer.dialogue`` and the Multi-Speaker node both call ``check_script``)."""

from __future__ import annotations

from typing import Sequence

from . import plan as textplan


def check_script(script: str, names: Sequence[str], require_voices: bool = True
                 ) -> list[textplan.Turn]:
    """The turns of ``script`` with their speaker index (a position in ``names``, the voices'
    names in speaker order). Raises ``ScriptError`` when the script is empty, when two voices
    share a name the script uses, or (``require_voices``) when a speaker has no voice."""
    names = list(names)
    turns = textplan.parse_script(script, names)
    check_unique_names(turns, names)
    assigned = textplan.assign_speakers(turns, names, require_voices)
    if not assigned:
        raise textplan.ScriptError("the script is empty: nothing to say")
    return assigned


def check_unique_names(turns: Sequence[textplan.ScriptTurn], names: Sequence[str]) -> None:
    """A ``Name:`` line must pick one voice: no two voices may share a name the script uses."""
    folded = [n.casefold() for n in names]
    used = {t.label.casefold() for t in turns}
    for name in sorted({n for n in folded if folded.count(n) > 1 and n in used}):
        wired = [f"speaker_{i + 1}" for i, n in enumerate(folded) if n == name]
        raise textplan.ScriptError(f"{' and '.join(wired)} are both named {name!r}, which the "
                                   "script uses: give each voice its own name")
