"""Checks of the arguments every synthesizer takes, local (``local.Synthesizer``) or remote
(``remote.RemoteSynthesizer``): voices, takes, dialogue scripts and pauses (seeds and sampling
parameters are checked in ``fish_core.params``)."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from ..text.script import check_script
from .results import MAX_TAKES
from .voices import Voice

def script_turns(script: str, voices: Mapping[str, Voice] | Sequence[Voice],
                 require_voices: bool | None, pause: float, max_speakers: int | None = None,
                 model: str = "this model") -> tuple[list, list[Voice]]:
    """A dialogue's checked turns and its voices in speaker order (``voices`` by name or in
    order; with voices given every speaker must map to one, unless ``require_voices`` is
    False); ``pause`` checked; speaker indices below ``max_speakers`` (``model``'s limit)
    when one is given."""
    if isinstance(voices, Mapping):
        names, voice_list = list(voices), as_voices(list(voices.values()))
    else:
        voice_list = as_voices(list(voices))
        names = [v.name for v in voice_list]
    require = bool(voice_list) if require_voices is None else require_voices
    turns = check_script(script, names, require, max_speakers, model)
    if (isinstance(pause, bool) or not isinstance(pause, (int, float))
            or not math.isfinite(pause) or pause < 0 or pause > 10):
        raise ValueError(f"pause must be between 0 and 10 seconds, got {pause}")
    return turns, voice_list


def count_takes(takes: int | None) -> int:
    if takes is None:
        return 1
    if isinstance(takes, bool) or not isinstance(takes, int) or not 1 <= takes <= MAX_TAKES:
        raise ValueError(f"takes must be an integer in 1 .. {MAX_TAKES}, got {takes!r}")
    return takes


def as_voices(voice) -> list[Voice]:
    """None, one ``Voice`` or a list/tuple of them, as a list. Anything else (a file path: read
    it with ``Voice.load`` first) is an error naming the voice field."""
    if voice is None:
        return []
    voices = list(voice) if isinstance(voice, (list, tuple)) else [voice]
    for v in voices:
        if not isinstance(v, Voice):
            raise ValueError(f"voice must be a Voice (read a file with Voice.load), got "
                             f"{type(v).__name__} {str(v)[:60]!r}")
    return voices
