"""Pronunciation lexicon: words the model says wrong, respelled the way it says them right.

A lexicon file is plain UTF-8 text, one entry a line: ``word<TAB>respelling``. Blank lines and
lines starting with ``#`` are comments. Matching is case-insensitive (Unicode case folding:
``Straße`` matches "STRASSE") and on whole words only
(``SQL`` matches "sql" and "SQL," but not "SQLite"); an entry may be several words ("New
York"); where entries overlap the longest wins. Text inside ``[…]`` (delivery and pause tags)
and ``<|…|>`` (speaker tags) is never changed. A respelling may itself hold a pause tag.

Respellings are plain text. S2's tokenizer lists ``<|phoneme_start|>`` / ``<|phoneme_end|>``,
but the official prompt format never uses them, nothing shows S2-Pro was trained to read
phonemes between them, and user text is never encoded to special tokens here (it could
close a turn or inject codes): a respelling holding ``<|…|>`` markup is refused, saying so.

**Cost.** Applying a lexicon is one pass over the text's tokens (runs of word characters, runs
of white space, single other characters) with a dictionary walk per token, at most one entry's
tokens deep: linear in the text and the lexicon, however many entries there are. The respelled
text is at most ``budgets.LEXICON_GROWTH`` times the text plus one respelling; a lexicon typed
into a node is at most ``budgets.NODE_LEXICON_CHARS`` characters (``parse``'s ``max_chars``);
``cancel`` (a node's Cancel) is looked at every ``CANCEL_EVERY`` lines or tokens.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..budgets import LEXICON_GROWTH
from ..params import Cancelled, FieldError
from .plan import check_text, read_text_file

MAX_ENTRIES = 20000
MAX_WORD = 200  # characters of one entry's word or respelling
CANCEL_EVERY = 4096  # lines parsed, or tokens respelled, between two looks at ``cancel``
MERGES_KEPT = 16  # merged lexicons a lexicon keeps (one per voice with its own lexicon)
PROTECTED = re.compile(r"\[[^\[\]\n]*\]|<\|[^|]*\|>")
MARKUP = re.compile(r"<\|[^|]*\|>")
SPACES = re.compile(r"\s+")
# A token: a run of word characters (what ``\w`` matches), a run of white space, or one other
# character. An entry matches whole tokens, so "SQL" never matches inside "SQLite".
TOKEN = re.compile(r"\w+|\s+|[^\w\s]")
WORD, SPACE, MARK = 0, 1, 2  # token kinds


class LexiconError(FieldError):
    """A lexicon that cannot be read (the message names the file and line)."""

    FIELD = "lexicon"


@dataclass(frozen=True)
class Lexicon:
    entries: tuple[tuple[str, str], ...] = ()  # (word as written, respelling), file order
    source: str = field(default="lexicon", compare=False)  # how errors name it
    # Cancel while it is applied (a node's: ComfyUI's interrupt flag); True raises Cancelled
    cancel: Callable[[], bool] | None = field(default=None, compare=False, repr=False)

    # ---------------------------------------------------------------- reading
    @classmethod
    def parse(cls, text: str, source: str = "lexicon", max_chars: int | None = None,
              cancel: Callable[[], bool] | None = None) -> Lexicon:
        """Entries of a lexicon text; errors name ``source`` and the line. ``max_chars``: the
        most characters the text may hold (a lexicon typed into a node:
        ``budgets.NODE_LEXICON_CHARS``); ``cancel``: checked while it is read, and kept to be
        checked while it is applied."""
        check_text(text, source)
        if max_chars is not None and len(text) > max_chars:
            raise LexiconError(f"{source} is {len(text)} characters; the limit is {max_chars} "
                               "(budgets.NODE_LEXICON_CHARS for a lexicon typed into a node)")
        entries: dict[str, tuple[str, str, int]] = {}
        for number, line in enumerate(text.splitlines(), 1):
            if cancel is not None and not number % CANCEL_EVERY:
                check_cancel(cancel, source)
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            add_entry(entries, line, number, f"{source} line {number}")
            if len(entries) > MAX_ENTRIES:
                raise LexiconError(f"{source}: more than {MAX_ENTRIES} entries")
        return cls(tuple((w, r) for w, r, _ in entries.values()), source, cancel)

    @classmethod
    def load(cls, path: str | Path, field: str = "--lexicon") -> "Lexicon":
        path = Path(path)
        return cls.parse(read_text_file(path, field), f"{field} {path.name}")

    def merged(self, other: "Lexicon | None") -> "Lexicon":
        """This lexicon with ``other``'s entries added, ``other`` winning for a word both
        hold (a voice's own lexicon over the global one)."""
        if other is None or not other.entries:
            return self
        # Kept (for the last few ``other``s): every turn, batch or subtitle cue asks for the
        # same merge, and each merged lexicon builds its matcher once.
        memo = self.__dict__.setdefault("_merged_cache", {})
        kept = memo.get(id(other))
        if kept is not None and kept[0] is other:
            return kept[1]
        mine = {w.casefold(): (w, r) for w, r in self.entries}
        mine.update({w.casefold(): (w, r) for w, r in other.entries})
        merged = Lexicon(tuple(mine.values()), f"{self.source} + {other.source}",
                         self.cancel or other.cancel)
        if len(memo) >= MERGES_KEPT:
            memo.pop(next(iter(memo)), None)
        memo[id(other)] = (other, merged)
        return merged

    def text(self) -> str:
        """The lexicon as a file's text (``parse`` reads it back)."""
        return "".join(f"{w}\t{r}\n" for w, r in self.entries)

    def digest(self) -> str:
        return hashlib.sha256(self.text().encode("utf-8")).hexdigest()[:16]

    def __bool__(self) -> bool:
        return bool(self.entries)

    # ---------------------------------------------------------------- applying
    def apply(self, text: str) -> str:
        """``text`` with every whole-word match respelled (tags left alone): at each token
        where a word may start, the longest entry matching there (white space between an
        entry's words matches any white space), then on after it. ``LexiconError`` when the
        result would be over ``budgets.LEXICON_GROWTH`` times ``text`` plus one respelling."""
        if not self.entries:
            return text
        limit = LEXICON_GROWTH * len(text) + MAX_WORD
        out, position, size = [], 0, 0
        for m in PROTECTED.finditer(text):
            size = self._respell(text[position:m.start()], out, size, limit)
            out.append(m.group(0))
            size += len(m.group(0))
            position = m.end()
        self._respell(text[position:], out, size, limit)
        return "".join(out)

    def _respell(self, text: str, out: list[str], size: int, limit: int) -> int:
        """``text`` respelled onto ``out`` (``size``: the characters in it so far, returned
        updated), in one pass over its tokens."""
        if not text:
            return size
        edges, ends = self._matcher
        tokens, kinds, keys = split_tokens(text)
        i, n, checked = 0, len(tokens), 0
        while i < n:
            if self.cancel is not None and i - checked >= CANCEL_EVERY:
                check_cancel(self.cancel, self.source)
                checked = i
            # An entry starts with a word, or with a mark that no word character comes before.
            found = None
            if kinds[i] == WORD or (kinds[i] == MARK and (i == 0 or kinds[i - 1] != WORD)):
                found = longest_entry(edges, ends, keys, kinds, i)
            if found is None:
                piece, i = tokens[i], i + 1
            else:
                i, piece = found
            out.append(piece)
            size += len(piece)
            if size > limit:
                raise self._too_long(limit)
        return size

    def _too_long(self, limit: int) -> LexiconError:
        given = (limit - MAX_WORD) // LEXICON_GROWTH
        return LexiconError(
            f"{self.source}: the respelled text would be over {limit} characters; the "
            f"limit is {LEXICON_GROWTH} times the text's {given} plus {MAX_WORD} "
            "(budgets.LEXICON_GROWTH)")

    @property
    def _matcher(self) -> tuple[dict, dict]:
        """The entries as a trie over their tokens: ``edges`` (node, token) → node (0 is the
        root), ``ends`` node → (respelling, whether the entry ends in a mark)."""
        matcher = self.__dict__.get("_matcher_cache")
        if matcher is None:
            edges: dict[tuple[int, str], int] = {}
            ends: dict[int, tuple[str, bool]] = {}
            for number, (word, respelling) in enumerate(self.entries):
                if self.cancel is not None and number and not number % CANCEL_EVERY:
                    check_cancel(self.cancel, self.source)
                node = 0
                tokens = TOKEN.findall(word)
                for token in tokens:
                    key = " " if token_kind(token) == SPACE else token.casefold()
                    node = edges.setdefault((node, key), len(edges) + 1)
                ends.setdefault(node, (respelling, token_kind(tokens[-1]) == MARK))
            matcher = (edges, ends)
            object.__setattr__(self, "_matcher_cache", matcher)
        return matcher


def split_tokens(text: str) -> tuple[list[str], list[int], list[str]]:
    """The tokens of ``text``, their kinds, and their keys in the matcher (casefolded; any
    white space is one space)."""
    tokens = TOKEN.findall(text)
    kinds = [token_kind(t) for t in tokens]
    keys = [" " if k == SPACE else t.casefold() for t, k in zip(tokens, kinds)]
    return tokens, kinds, keys


def longest_entry(edges: dict, ends: dict, keys: list[str], kinds: list[int],
                  i: int) -> tuple[int, str] | None:
    """(the token after it, respelling) of the longest entry matching the tokens from ``i``,
    or None: one walk down the trie ``edges`` / ``ends`` (``Lexicon._matcher``)."""
    found, node, j, n = None, 0, i, len(keys)
    while j < n:
        node = edges.get((node, keys[j]))
        if node is None:
            break
        j += 1
        end = ends.get(node)
        # An entry ending in a mark: no word character right after it.
        if end is not None and not (end[1] and j < n and kinds[j] == WORD):
            found = (j, end[0])
    return found


def token_kind(token: str) -> int:
    first = token[0]
    if first.isspace():
        return SPACE
    return WORD if first == "_" or first.isalnum() else MARK


def check_cancel(cancel: Callable[[], bool], source: str) -> None:
    if cancel():
        raise Cancelled(f"{source}: cancelled")


def _key(word: str) -> str:
    return SPACES.sub(" ", word).casefold()


def add_entry(entries: dict[str, tuple[str, str, int]], line: str, number: int,
              where: str) -> None:
    """The entry of line ``number``, ``word<TAB>respelling``, added to ``entries`` (casefolded
    word → (word, respelling, line)); a word respelled two ways is an error naming both lines."""
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
