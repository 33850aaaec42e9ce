"""Pronunciation lexicon: words the model says wrong, respelled the way it says them right.

A lexicon file is plain UTF-8 text, one entry a line: ``word<TAB>respelling``. Blank lines and
lines starting with ``#`` are comments. Matching is case-insensitive and on whole words only
(``SQL`` matches "sql" and "SQL," but not "SQLite"); an entry may be several words ("New
York"); where entries overlap the longest wins. Text inside ``[…]`` (delivery and pause tags)
and ``<|…|>`` (speaker tags) is never changed. A respelling may itself hold a pause tag.

Respellings are plain text. S2's tokenizer lists ``<|phoneme_start|>`` / ``<|phoneme_end|>``,
but the official prompt format never uses them, nothing shows S2-Pro was trained to read
phonemes between them, and user text is never encoded to special tokens here (it could
close a turn or inject codes): a respelling holding ``<|…|>`` markup is refused, saying so.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from .plan import check_text, read_text_file

MAX_ENTRIES = 20000
MAX_WORD = 200  # characters of one entry's word or respelling
PROTECTED = re.compile(r"\[[^\[\]\n]*\]|<\|[^|]*\|>")
MARKUP = re.compile(r"<\|[^|]*\|>")
SPACES = re.compile(r"\s+")


class LexiconError(ValueError):
    """A lexicon that cannot be read (the message names the file and line)."""


@dataclass(frozen=True)
class Lexicon:
    entries: tuple[tuple[str, str], ...] = ()  # (word as written, respelling), file order
    source: str = field(default="lexicon", compare=False)  # how errors name it

    # ---------------------------------------------------------------- reading
    @classmethod
    def parse(cls, text: str, source: str = "lexicon") -> "Lexicon":
        """Entries of a lexicon text; errors name ``source`` and the line."""
        check_text(text, source)
        entries: dict[str, tuple[str, str, int]] = {}
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            where = f"{source} line {number}"
            if "\t" not in line:
                raise LexiconError(f"{where}: expected 'word<TAB>respelling', got {line[:60]!r} "
                                   "(no tab)")
            word, respelling = (SPACES.sub(" ", part).strip() for part in line.split("\t", 1))
            check_entry(word, respelling, where)
            key = word.casefold()
            if key in entries and entries[key][1] != respelling:
                raise LexiconError(f"{where}: {word!r} is respelled {respelling!r} here but "
                                   f"{entries[key][1]!r} on line {entries[key][2]}")
            entries[key] = (word, respelling, number)
            if len(entries) > MAX_ENTRIES:
                raise LexiconError(f"{source}: more than {MAX_ENTRIES} entries")
        return cls(tuple((w, r) for w, r, _ in entries.values()), source)

    @classmethod
    def load(cls, path: str | Path, field: str = "--lexicon") -> "Lexicon":
        path = Path(path)
        return cls.parse(read_text_file(path, field), f"{field} {path.name}")

    def merged(self, other: "Lexicon | None") -> "Lexicon":
        """This lexicon with ``other``'s entries added, ``other`` winning for a word both
        hold (a voice's own lexicon over the global one)."""
        if other is None or not other.entries:
            return self
        mine = {w.casefold(): (w, r) for w, r in self.entries}
        mine.update({w.casefold(): (w, r) for w, r in other.entries})
        return Lexicon(tuple(mine.values()), f"{self.source} + {other.source}")

    def text(self) -> str:
        """The lexicon as a file's text (``parse`` reads it back)."""
        return "".join(f"{w}\t{r}\n" for w, r in self.entries)

    def digest(self) -> str:
        return hashlib.sha256(self.text().encode("utf-8")).hexdigest()[:16]

    def __bool__(self) -> bool:
        return bool(self.entries)

    # ---------------------------------------------------------------- applying
    def apply(self, text: str) -> str:
        """``text`` with every whole-word match respelled (tags left alone)."""
        if not self.entries:
            return text
        out, position = [], 0
        for m in PROTECTED.finditer(text):
            out += [self._respell(text[position:m.start()]), m.group(0)]
            position = m.end()
        return "".join(out + [self._respell(text[position:])])

    def _respell(self, text: str) -> str:
        return self._pattern.sub(lambda m: self._table[_key(m.group(0))], text) if text else text

    @property
    def _table(self) -> dict[str, str]:
        table = self.__dict__.get("_table_cache")
        if table is None:
            table = {_key(w): r for w, r in self.entries}
            object.__setattr__(self, "_table_cache", table)
        return table

    @property
    def _pattern(self) -> re.Pattern:
        pattern = self.__dict__.get("_pattern_cache")
        if pattern is None:
            # Longest first: the alternation takes the first alternative that matches.
            words = sorted((w for w, _ in self.entries), key=len, reverse=True)
            body = "|".join(r"\s+".join(map(re.escape, w.split(" "))) for w in words)
            pattern = re.compile(rf"(?<!\w)(?:{body})(?!\w)", re.IGNORECASE)
            object.__setattr__(self, "_pattern_cache", pattern)
        return pattern


def _key(word: str) -> str:
    return SPACES.sub(" ", word).casefold()


def check_entry(word: str, respelling: str, where: str) -> None:
    if not word:
        raise LexiconError(f"{where}: the word before the tab is empty")
    if not respelling:
        raise LexiconError(f"{where}: {word!r} has an empty respelling")
    for part, name in ((word, "word"), (respelling, "respelling")):
        if len(part) > MAX_WORD:
            raise LexiconError(f"{where}: the {name} is longer than {MAX_WORD} characters")
    if PROTECTED.search(word):
        raise LexiconError(f"{where}: the word {word!r} holds a tag; tags are never respelled")
    if MARKUP.search(respelling):
        raise LexiconError(
            f"{where}: {respelling!r} holds <|…|> markup. S2-Pro is not known to read phoneme "
            "markers (<|phoneme_start|>…<|phoneme_end|>: listed by its tokenizer, used by no "
            "official prompt), and text is never encoded to special tokens: respell the word "
            "with letters, as it should sound")
