"""SRT subtitles in and out: cues parsed with bounds (``MAX_SRT_SECONDS``, ``MAX_SRT_CUES``),
checked before anything is generated, and written back. Pure Python."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..params import FieldError
from .plan import check_text


@dataclass(frozen=True)
class Cue:
    index: int
    start: float  # seconds
    end: float
    text: str


SRT_TIME = re.compile(r"\s*(-?)(\d+):(\d{1,2}):(\d{1,2})[,.](\d{1,3})\b")
# What one SRT may ask for, checked before anything is generated: the waveform is held whole
# (float32: 4 h at 44.1 kHz is 2.5 GB) and every cue is one generation.
MAX_SRT_SECONDS = 4 * 3600
MAX_SRT_CUES = 5000


class SubtitleError(FieldError):
    """An SRT file cannot be parsed."""

    FIELD = "srt"


def parse_srt(text: str) -> list[Cue]:
    """Cues of an SRT document (tolerates a BOM, CRLF, missing indices and ``.`` decimals)."""
    text = check_text(text, "srt").replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    cues = []
    blocks = re.split(r"\n\s*\n", text)
    for block in blocks:
        lines = [line for line in block.strip().split("\n")]
        if not lines or not lines[0].strip():
            continue
        timing = next((i for i, line in enumerate(lines[:2]) if "-->" in line), None)
        if timing is None:
            raise SubtitleError(f"SRT block without a 'start --> end' line: {block.strip()[:60]!r}")
        start, end = parse_timing(lines[timing])
        if end < start:
            raise SubtitleError(f"SRT cue ends before it starts: {lines[timing]!r}")
        body = " ".join(re.sub(r"<[^>]+>", "", line).strip() for line in lines[timing + 1:])
        if body.strip():
            cues.append(Cue(len(cues) + 1, start, end, body.strip()))
    if not cues:
        raise SubtitleError("the SRT text holds no cues")
    check_srt_size(cues)
    return cues


def parse_timing(line: str) -> tuple[float, float]:
    """``00:00:01,000 --> 00:00:02,500`` (anything after the end time, e.g. SRT positions, is
    ignored) → seconds. Negative times and minutes or seconds past 59 are refused."""
    parts = line.split("-->")
    times = [SRT_TIME.match(p) for p in parts]
    if len(parts) != 2 or not all(times) or parts[0][times[0].end():].strip():
        raise SubtitleError(f"bad SRT timing line: {line!r}")
    for m in times:
        sign, h, mi, s, frac = m.groups()
        if sign:
            raise SubtitleError(f"SRT times cannot be negative: {line!r}")
        if int(mi) > 59 or int(s) > 59:
            raise SubtitleError(f"SRT minutes and seconds must be 00..59: {line!r}")
    return tuple(_seconds(m) for m in times)


def _seconds(m: re.Match) -> float:
    _, h, mi, s, frac = m.groups()
    return int(h) * 3600 + int(mi) * 60 + int(s) + int(frac.ljust(3, "0")) / 1000


def check_srt_size(cues: list[Cue]) -> None:
    """Refuse an SRT longer than MAX_SRT_SECONDS or with more than MAX_SRT_CUES cues."""
    if len(cues) > MAX_SRT_CUES:
        raise SubtitleError(f"the SRT has {len(cues)} cues; at most {MAX_SRT_CUES} are spoken "
                            "in one run (split the file)")
    last = max(c.end for c in cues)
    if last > MAX_SRT_SECONDS:
        raise SubtitleError(f"the SRT runs to {format_time(last)}; at most "
                            f"{format_time(MAX_SRT_SECONDS)} is spoken in one run (split the file)")


def format_time(seconds: float) -> str:
    ms = max(0, round(seconds * 1000))
    return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"


def format_srt(cues: list[Cue]) -> str:
    return "\n".join(f"{i}\n{format_time(c.start)} --> {format_time(c.end)}\n{c.text}\n"
                     for i, c in enumerate(cues, 1))
