"""How far a transcript is from the text that was asked for: word error rate, or character
error rate where the text is written in Chinese, Japanese or Korean characters, after one
normalisation applied to both sides; with the places they differ.

Normalisation: Unicode NFKC, case folded, an apostrophe inside a word dropped (``don't`` =
``dont``), every other punctuation mark or symbol a space. Units: words (runs between spaces);
where most letters of the asked-for text are CJK ideographs, kana or Hangul, every such
character is a unit of its own and a run of other letters or digits (``iPhone``) one unit.

The cost is one edit-distance table: ``len(expected) × len(heard)`` units.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

APOSTROPHES = "'\u2019\u02bc"


@dataclass(frozen=True)
class Difference:
    """One place the transcript differs: ``expected`` said as ``heard`` (either may be empty:
    a unit left out, or one added)."""
    expected: str
    heard: str


@dataclass(frozen=True)
class Score:
    """``rate`` = edits / units of the expected text (0.0 is a perfect take; an empty expected
    text scores the number of units heard). ``unit`` is ``"word"`` or ``"char"``."""
    rate: float
    unit: str
    errors: int
    length: int
    differences: tuple[Difference, ...]


def is_cjk(char: str) -> bool:
    """Han ideographs, kana, Hangul: the scripts scored per character."""
    code = ord(char)
    return (0x3040 <= code <= 0x30FF or 0x3400 <= code <= 0x4DBF or 0x4E00 <= code <= 0x9FFF
            or 0xF900 <= code <= 0xFAFF or 0xAC00 <= code <= 0xD7AF or 0x1100 <= code <= 0x11FF
            or 0x3130 <= code <= 0x318F or 0x20000 <= code <= 0x2FA1F or 0x31F0 <= code <= 0x31FF)


def normalise(text: str) -> str:
    """The text both sides are compared in (see the module's note)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    out = []
    for i, char in enumerate(text):
        inside_word = 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()
        if char in APOSTROPHES and inside_word:
            continue
        kind = unicodedata.category(char)
        out.append(" " if kind[0] in "PSZC" else char)
    return " ".join("".join(out).split())


def scored_per_character(text: str) -> bool:
    """Whether most letters of ``text`` are CJK characters."""
    letters = [c for c in text if c.isalpha()]
    return bool(letters) and 2 * sum(map(is_cjk, letters)) >= len(letters)


def units(text: str, per_character: bool) -> list[str]:
    """The normalised text cut into the units that are counted."""
    if not per_character:
        return text.split()
    out, run = [], ""
    for char in text:
        if is_cjk(char) or char == " ":
            if run:
                out.append(run)
                run = ""
            if char != " ":
                out.append(char)
        else:
            run += char
    return out + ([run] if run else [])


def _edits(expected: list[str], heard: list[str]) -> list[tuple[str | None, str | None]]:
    """The cheapest alignment (Levenshtein, every edit costing 1) as pairs: equal units,
    substitutions, ``(unit, None)`` left out, ``(None, unit)`` added."""
    cost = _edit_costs(expected, heard)
    pairs, i, j = [], len(expected), len(heard)
    while i or j:
        diagonal = i and j and cost[i][j] == cost[i - 1][j - 1] + (expected[i - 1] != heard[j - 1])
        if diagonal and expected[i - 1] == heard[j - 1]:
            pairs.append((expected[i - 1], heard[j - 1]))
            i, j = i - 1, j - 1
        elif i and cost[i][j] == cost[i - 1][j] + 1:  # a unit left out reads better than two
            pairs.append((expected[i - 1], None))  # substitutions that shift the text
            i -= 1
        elif j and cost[i][j] == cost[i][j - 1] + 1:
            pairs.append((None, heard[j - 1]))
            j -= 1
        else:
            pairs.append((expected[i - 1], heard[j - 1]))
            i, j = i - 1, j - 1
    return pairs[::-1]


def _edit_costs(expected: list[str], heard: list[str]) -> list[list[int]]:
    """The Levenshtein table: ``cost[i][j]`` edits turn ``expected[:i]`` into ``heard[:j]``."""
    cost = [list(range(len(heard) + 1))]
    for i in range(1, len(expected) + 1):
        row = [i] + [0] * len(heard)
        above = cost[-1]
        for j in range(1, len(heard) + 1):
            same = above[j - 1] + (expected[i - 1] != heard[j - 1])
            row[j] = min(same, above[j] + 1, row[j - 1] + 1)
        cost.append(row)
    return cost


def score(expected: str, heard: str) -> Score:
    """``heard`` (a transcript) against ``expected`` (the text that was asked for)."""
    expected_n, heard_n = normalise(expected), normalise(heard)
    per_character = scored_per_character(expected_n or heard_n)
    want, got = units(expected_n, per_character), units(heard_n, per_character)
    joiner = "" if per_character else " "
    differences, errors, lost, added = [], 0, [], []
    for a, b in _edits(want, got) + [("", "")]:  # the sentinel closes the last difference
        if a == b:
            if lost or added:
                differences.append(Difference(joiner.join(lost), joiner.join(added)))
                lost, added = [], []
            continue
        errors += 1
        if a is not None:
            lost.append(a)
        if b is not None:
            added.append(b)
    rate = errors / len(want) if want else float(errors)
    return Score(rate, "char" if per_character else "word", errors, len(want), tuple(differences))
