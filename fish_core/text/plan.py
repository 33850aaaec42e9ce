"""Text planning: long text into sentence-bounded batches (speaker scripts are read in
``script.py``, SRT subtitles in ``srt.py``). Pure Python; no model here.

Rules (see the README for examples):

* Untagged text is split at sentence ends and the sentences are packed into batches of at most
  ``max_bytes`` UTF-8 bytes. A sentence longer than that is cut at a clause mark
  (``, ; : ，、；``), else at a space, else at ``max_bytes``.
* A sentence ends after a run of ``. ! ? …`` (and closing quotes or brackets) that is followed by
  white space or the end of the text (so ``3.5`` and ``e.g.x`` do not end one), right after a
  run of ``。 ！ ？ । ॥ ؟`` (and their closing marks), or before a blank line. ``SentenceCutter``
  applies this rule in one left-to-right pass that never goes back over a run of marks, to a
  whole text or to one arriving in pieces (the WebSocket stream: only the new piece is read).
* Tagged text (``<|speaker:i|>``) becomes turns; text before the first tag is kept as an
  untagged turn (the reference drops it). Turns are packed into batches by size and at most
  ``max_speakers`` turns per batch, like the reference; an oversized turn is split as above
  and every piece keeps its speaker tag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SPEAKER_TAG = re.compile(r"<\|speaker:(\d+)\|>")
CLAUSE_PIECE = re.compile(r".+?(?:[,;:，、；：]\s*|$)", re.DOTALL)
WORD_PIECE = re.compile(r"\S+\s*")
DEFAULT_MAX_BYTES = 300


def nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


def check_text(value, field: str) -> str:
    """``value`` if it is a string that UTF-8 can carry, else an error naming ``field``. Empty
    text is left to the caller (what is "nothing to say" differs)."""
    if not isinstance(value, str):
        raise ValueError(f"{field} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{field} holds a character UTF-8 cannot carry "
                         f"({value[e.start]!r} at position {e.start})") from None
    return value


def read_text_file(path: str | Path, field: str) -> str:
    """The text of a UTF-8 file (a BOM is dropped); every error names ``field`` and the file."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{field}: {path} is a folder, not a text file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{field}: no such file: {path}") from None
    except OSError as e:
        raise ValueError(f"{field}: cannot read {path}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"{field}: {path} is not UTF-8 text (bad byte at offset {e.start}); "
                         "save it as UTF-8") from None


# ---------------------------------------------------------------- sentences and batches
# What ends a sentence (see the module rules). Marks of the first kind are also full stops in
# numbers and abbreviations, so they end one only before white space; the second kind at once.
SPACED_ENDS = ".!?…"
SPACED_CLOSERS = "\"'”’)]"
PROMPT_ENDS = "。！？।॥؟"  # CJK, Devanagari danda, Arabic question mark
PROMPT_CLOSERS = "\"'”’」』）)"
SPACED_CLAUSES = ",;:"  # clause mode (the WebSocket stream's split_granularity "clause")
PROMPT_CLAUSES = "，、；：،"
FIRST, TEXT, SPACED_RUN, SPACED_CLOSE, PROMPT_RUN, PROMPT_CLOSE, BLANK = range(7)


class SentenceCutter:
    """Sentences of a text, cut as it arrives: ``feed(piece)`` returns the sentences the piece
    completed, ``finish()`` the rest. One left-to-right scan with a small state, so each
    character is looked at a bounded number of times however the text is split into pieces
    (a run of 10,000 dots, sent one dot at a time, is read once): linear in the text's length.
    ``clauses``: also end at clause marks (``, ; :`` before white space, ``，、；：،`` at once).
    ``scanned`` counts the characters looked at (tests check it stays linear)."""

    def __init__(self, clauses: bool = False):
        self.spaced = SPACED_ENDS + (SPACED_CLAUSES if clauses else "")
        self.prompt = PROMPT_ENDS + (PROMPT_CLAUSES if clauses else "")
        self._marks = re.compile("[" + re.escape(self.spaced + self.prompt) + "\n]")
        self.text = ""  # the text read so far from ``start`` on (trimmed when a piece comes)
        self.start = 0  # where the unfinished sentence starts in ``text``
        self.pos = 0  # the next character of ``text`` to read
        self.state = FIRST
        self.blank_at = 0  # in BLANK: the line break that may start a blank line
        self.scanned = 0

    @property
    def pending(self) -> str:
        """The unfinished sentence (may be only white space)."""
        return self.text[self.start:]

    @property
    def pending_chars(self) -> int:
        return len(self.text) - self.start

    def feed(self, piece: str) -> list[str]:
        """Add ``piece``; the sentences it completed, trimmed, empty ones dropped."""
        text, self.text = self.text, ""
        if self.start:  # drop what was already cut (once per piece, not per sentence)
            text = text[self.start:]
            self.pos, self.blank_at, self.start = (self.pos - self.start,
                                                   self.blank_at - self.start, 0)
        text += piece  # the only reference: CPython grows it in place (no copy per piece)
        self.text = text
        return self._scan()

    def finish(self) -> list[str]:
        """The end of the text: whatever is left is the last sentence."""
        done = self._scan()
        last = self.pending.strip()
        self.text, self.start, self.pos, self.state = "", 0, 0, FIRST
        return done + ([last] if last else [])

    def _cut(self, end: int, out: list[str]) -> None:
        sentence = self.text[self.start:end].strip()
        if sentence:
            out.append(sentence)
        self.start = end

    def _scan(self) -> list[str]:
        out: list[str] = []
        text, i, state = self.text, self.pos, self.state
        n = len(text)
        while i < n:
            self.scanned += 1
            if state == FIRST:  # a sentence's first character never ends it
                state, i = TEXT, i + 1
            elif state == TEXT:
                state, i = self._to_mark(text, i)
            elif state in (SPACED_RUN, SPACED_CLOSE):
                state, i = self._spaced_step(text[i], state, i, out)
            elif state in (PROMPT_RUN, PROMPT_CLOSE):
                state, i = self._prompt_step(text[i], state, i, out)
            else:
                state, i = self._blank_step(text[i], i, out)
        self.pos, self.state = i, state
        return out

    def _to_mark(self, text: str, i: int) -> tuple[int, int]:
        """In TEXT: skip ordinary text (in C) past the next mark; the state the mark opens."""
        found = self._marks.search(text, i)
        if found is None:
            self.scanned += len(text) - i - 1
            return TEXT, len(text)
        self.scanned += found.start() - i
        i = found.start()
        if text[i] == "\n":
            self.blank_at = i
            return BLANK, i + 1
        return (SPACED_RUN if text[i] in self.spaced else PROMPT_RUN), i + 1

    def _spaced_step(self, c: str, state: int, i: int, out: list[str]) -> tuple[int, int]:
        """After a ``. ! ? …`` run: an end only where white space follows."""
        if state == SPACED_RUN and c in self.spaced:
            return state, i + 1
        if c in SPACED_CLOSERS:
            return SPACED_CLOSE, i + 1
        if c.isspace():  # the marks end a sentence; c starts the next one
            self._cut(i, out)
            return FIRST, i
        return TEXT, i  # "3.5", "e.g.x": not an end; c is read again as text

    def _prompt_step(self, c: str, state: int, i: int, out: list[str]) -> tuple[int, int]:
        """After a ``。 ！ ？`` run: the end comes after the run and its closing marks."""
        if state == PROMPT_RUN and c in self.prompt:
            return state, i + 1
        if c in PROMPT_CLOSERS:
            return PROMPT_CLOSE, i + 1
        self._cut(i, out)
        return FIRST, i

    def _blank_step(self, c: str, i: int, out: list[str]) -> tuple[int, int]:
        """After a line break: a second one (only white space between) ends the sentence."""
        if c == "\n":  # a blank line: the sentence ends at the first break
            self._cut(self.blank_at, out)  # (and the next one starts there)
            self.blank_at = i
            return BLANK, i + 1
        if c.isspace():  # still only white space since the line break
            return BLANK, i + 1
        return TEXT, i


def split_sentences(text: str, clauses: bool = False) -> list[str]:
    """Sentences of ``text``, whitespace-trimmed, punctuation kept, empty pieces dropped."""
    cutter = SentenceCutter(clauses)
    return cutter.feed(text) + cutter.finish()


def split_long(sentence: str, max_bytes: int) -> list[str]:
    """Cut one sentence into pieces of at most ``max_bytes``: at clauses, then spaces, then
    bytes."""
    if nbytes(sentence) <= max_bytes:
        return [sentence]
    for piece_pattern in (CLAUSE_PIECE, WORD_PIECE):
        pieces = piece_pattern.findall(sentence)  # "".join(pieces) == sentence
        if len(pieces) > 1:
            return [part for chunk in pack(pieces, max_bytes, joiner="")
                    for part in split_long(chunk.strip(), max_bytes)]
    pieces, current = [], ""
    for ch in sentence:  # no break point at all (e.g. a long CJK run without punctuation)
        if current and nbytes(current + ch) > max_bytes:
            pieces.append(current)
            current = ""
        current += ch
    return pieces + [current] if current else pieces


def pack(pieces: list[str], max_bytes: int, joiner: str = " ") -> list[str]:
    """Greedily join consecutive pieces while the result stays within ``max_bytes``."""
    out, current = [], ""
    for piece in pieces:
        candidate = current + joiner + piece if current else piece
        if current and nbytes(candidate.strip()) > max_bytes:
            out.append(current.strip())
            current = piece
        else:
            current = candidate
    if current.strip():
        out.append(current.strip())
    return out


@dataclass(frozen=True)
class Turn:
    text: str
    speaker: int | None = None  # None: no speaker tag

    @property
    def tagged(self) -> str:
        return self.text if self.speaker is None else f"<|speaker:{self.speaker}|>{self.text}"


def split_turns(text: str) -> list[Turn]:
    """Turns by ``<|speaker:i|>`` tag; text before the first tag is an untagged turn."""
    pieces = SPEAKER_TAG.split(text)
    turns = [Turn(pieces[0].strip())] if pieces[0].strip() else []
    for i in range(1, len(pieces), 2):
        body = pieces[i + 1].strip()
        if body:
            turns.append(Turn(body, int(pieces[i])))
    return turns


def plan_batches(text: str, max_bytes: int = DEFAULT_MAX_BYTES, max_speakers: int = 5) -> list[str]:
    """Batches of text to generate one after another (see the module rules)."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 16:
        raise ValueError(f"max_bytes must be an integer >= 16, got {max_bytes!r}")
    turns = split_turns(text)  # a checked request's text (``speech.request``)
    if not turns:
        raise ValueError("text is empty: nothing to say")
    if len(turns) == 1 and turns[0].speaker is None:
        sentences = [p for s in split_sentences(turns[0].text) for p in split_long(s, max_bytes)]
        return pack(sentences, max_bytes)
    pieces = []
    for turn in turns:
        budget = max_bytes - nbytes(Turn("", turn.speaker).tagged)
        sentences = [p for s in split_sentences(turn.text) for p in split_long(s, budget)]
        pieces += [Turn(chunk, turn.speaker).tagged for chunk in pack(sentences, budget)]
    return group_turns(pieces, max_bytes, max_speakers)


def group_turns(turns: list[str], max_bytes: int, max_speakers: int) -> list[str]:
    """Join turns with newlines into batches: a new batch starts when the byte budget or the
    turn count would be exceeded (the reference's rule)."""
    batches, current, size = [], [], 0
    for turn in turns:
        n = nbytes(turn)
        if current and (len(current) >= max_speakers or size + n > max_bytes):
            batches.append("\n".join(current))
            current, size = [], 0
        current.append(turn)
        size += n
    if current:
        batches.append("\n".join(current))
    return batches
