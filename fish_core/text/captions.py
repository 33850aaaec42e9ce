"""Captions from timed words (the forced aligner's): words grouped into readable lines, written
as SRT, WebVTT, karaoke WebVTT (a timestamp tag before every word) or JSON. Pure Python.

A word is anything with ``text``, ``start`` and ``end`` (seconds). The aligner's words lost
their punctuation and spacing (``don't,`` → ``don't``; Korean particles split off); given the
text they came from, every line shows that text's own slice — punctuation, spaces, case — found
by matching the words in order. A new line starts where the next word would make the line
longer than ``max_chars`` characters or ``max_seconds`` seconds, after a pause of ``pause``
seconds or more, and after a sentence's end.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass

from .srt import Cue, format_srt

SENTENCE_ENDS = frozenset(".!?…。！？")
CAPTION_FORMATS = ("json", "srt", "vtt", "karaoke")


@dataclass(frozen=True)
class Line:
    """One caption line: its words (``start``/``end`` in seconds) and the text shown."""

    start: float
    end: float
    text: str
    words: tuple  # (text shown, start, end) per word


def _kept(ch: str) -> bool:
    return ch == "'" or unicodedata.category(ch)[0] in "LN"


def _closing(ch: str) -> bool:
    return unicodedata.category(ch) in ("Pe", "Pf") or ch in SENTENCE_ENDS or ch in ",;:"


def locate(text: str, words: list[str]) -> list[tuple[int, int]] | None:
    """Each word's ``(start, end)`` character span in ``text``, in order (characters a word
    dropped — punctuation, marks — may sit inside a span); None where they cannot all be
    found (the words did not come from this text)."""
    spans, pos = [], 0
    for word in words:
        if not word:
            return None
        start = text.find(word[0], pos)
        while start != -1:
            i, j = start, 0
            while i < len(text) and j < len(word):
                if text[i] == word[j]:
                    j += 1
                elif _kept(text[i]):
                    break
                i += 1
            if j == len(word):
                spans.append((start, i))
                pos = i
                break
            start = text.find(word[0], start + 1)
        else:
            return None
    return spans


def cuts(text: str, spans: list[tuple[int, int]]) -> list[int]:
    """Where the text is cut before each word and at its end (``len(spans) + 1`` positions):
    punctuation right after a word stays with it up to the next space (``pay $19.99.`` →
    ``pay`` | ``$19.99.``), and so does a closing mark standing alone after it (``panic! »``);
    opening marks right before the first word go with it; the rest of the text before the
    first word and after the last is not shown."""
    out = [_first_cut(text, spans[0][0])]
    for (_, end), (nxt, _) in zip(spans, spans[1:] + [(len(text), len(text))]):
        out.append(_cut_after(text, end, nxt))
    return out


def _first_cut(text: str, start: int) -> int:
    """Where the first word's caption starts: with the marks glued to it (``$19``) and the
    opening marks standing alone right before it (``« Hi``)."""
    p = start
    while p > 0 and not text[p - 1].isspace() and not _kept(text[p - 1]):
        p -= 1
    q = p
    while q > 0 and text[q - 1].isspace():
        q -= 1
    r = q
    while r > 0 and unicodedata.category(text[r - 1]) in ("Ps", "Pi"):
        r -= 1
    if r < q and (r == 0 or text[r - 1].isspace()):
        p = r
    return p


def _cut_after(text: str, end: int, nxt: int) -> int:
    """Where the caption of a word ending at ``end`` stops, before ``nxt`` (the next word)."""
    p = end
    while p < nxt and not text[p].isspace():
        p += 1
    while True:  # a lone closing mark (» ) ” …) after a space belongs to the word before
        q = p
        while q < nxt and text[q].isspace():
            q += 1
        r = q
        while r < nxt and _closing(text[r]):
            r += 1
        if r == q or (r < nxt and not text[r].isspace()):
            return p
        p = r


@dataclass(frozen=True)
class _Placed:
    """Words and where they lie in the text they came from (``at``: ``cuts``; None: no
    text, or the words could not be found in it)."""

    words: list
    text: str | None
    spans: list[tuple[int, int]] | None
    at: list[int] | None

    def shown(self, first: int, stop: int) -> str:
        """What a caption shows for ``words[first:stop]``."""
        if self.at is None:
            return " ".join(w.text for w in self.words[first:stop])
        return self.text[self.at[first]:self.at[stop]].strip()

    def ended(self, k: int) -> bool:
        """Whether a sentence ends between word ``k - 1`` and word ``k``."""
        return self.at is not None and any(
            ch in SENTENCE_ENDS for ch in self.text[self.spans[k - 1][1]:self.at[k]])


def caption_lines(words, text: str | None = None, max_chars: int = 42,
                  max_seconds: float = 7.0, pause: float = 0.5) -> list[Line]:
    """``words`` grouped into lines (see the module's rules). ``text``: the text the words
    were split from (lines then show its punctuation and spacing)."""
    words = list(words)
    if not words:
        return []
    if max_chars < 1 or max_seconds <= 0 or pause < 0:
        raise ValueError("captions: max_chars ≥ 1, max_seconds > 0 and pause ≥ 0 are needed")
    spans = locate(text, [w.text for w in words]) if text else None
    placed = _Placed(words, text, spans, cuts(text, spans) if spans is not None else None)
    groups = _group_words(placed, max_chars, max_seconds, pause)
    lines = []
    for n, line in enumerate(groups):
        stop = groups[n + 1][0] if n + 1 < len(groups) else len(words)
        timed = tuple((placed.shown(k, k + 1), words[k].start, words[k].end) for k in line)
        lines.append(Line(words[line[0]].start, max(words[k].end for k in line),
                          placed.shown(line[0], stop), timed))
    return lines


def _group_words(placed: _Placed, max_chars: int, max_seconds: float,
                 pause: float) -> list[list[int]]:
    """The word indices of each line: a word starts a new line where it would make the line
    too long to show or to say, after a pause, and after a sentence's end."""
    words = placed.words
    groups: list[list[int]] = [[0]]
    for k in range(1, len(words)):
        line = groups[-1]
        first, prev, word = words[line[0]], words[k - 1], words[k]
        if (len(placed.shown(line[0], k + 1)) > max_chars
                or word.end - first.start > max_seconds
                or word.start - prev.end >= pause or placed.ended(k)):
            groups.append([k])
        else:
            line.append(k)
    return groups


def _vtt_time(seconds: float) -> str:
    ms = max(0, round(seconds * 1000))
    return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"


def to_srt(lines: list[Line]) -> str:
    return format_srt([Cue(i, line.start, _end(line), line.text)
                       for i, line in enumerate(lines, 1)])


def to_vtt(lines: list[Line]) -> str:
    cues = [f"{_vtt_time(line.start)} --> {_vtt_time(_end(line))}\n{_vtt_text(line.text)}\n"
            for line in lines]
    return "WEBVTT\n\n" + "\n".join(cues)


def to_karaoke_vtt(lines: list[Line]) -> str:
    """WebVTT with a timestamp tag before every word after the first: players highlight each
    word as it is spoken."""
    cues = []
    for line in lines:
        parts = []
        for n, (shown, start, _) in enumerate(line.words):
            parts.append(_vtt_text(shown) if n == 0 else f"<{_vtt_time(start)}>{_vtt_text(shown)}")
        cues.append(f"{_vtt_time(line.start)} --> {_vtt_time(_end(line))}\n{' '.join(parts)}\n")
    return "WEBVTT\n\n" + "\n".join(cues)


def to_json(words) -> str:
    return json.dumps([{"text": w.text, "start": w.start, "end": w.end} for w in words],
                      ensure_ascii=False, indent=1) + "\n"


def write_captions(words, fmt: str, text: str | None = None, **grouping) -> str:
    """``words`` as ``fmt`` (one of ``CAPTION_FORMATS``)."""
    if fmt not in CAPTION_FORMATS:
        raise ValueError(f"captions: format {fmt!r} is not one of {', '.join(CAPTION_FORMATS)}")
    if fmt == "json":
        return to_json(words)
    lines = caption_lines(words, text, **grouping)
    return {"srt": to_srt, "vtt": to_vtt, "karaoke": to_karaoke_vtt}[fmt](lines)


def _end(line: Line) -> float:
    """A cue lasts at least one millisecond (an aligner may give a word no length)."""
    return max(line.end, line.start + 0.001)


def _vtt_text(text: str) -> str:
    """WebVTT cue text: ``&``, ``<`` and ``>`` escaped, no blank line (it would end the cue)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "\n".join(part for part in text.splitlines() if part.strip())
