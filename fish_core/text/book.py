"""Books: a ``.txt``, ``.md`` or ``.epub`` file as chapters in reading order.

* ``.txt``: a chapter starts after two or more blank lines (and at the top). Its first line is
  its title when that line is short (at most ``MAX_TITLE`` characters) and followed by a blank
  line; else the chapter is named "Chapter N".
* ``.md``: chapters at the headings of the top level that is used more than once (a single
  ``# Title`` over ``## Chapter`` headings names the book); inline markup, links, images, code
  and HTML are reduced to their text. Text before the first chapter heading is a chapter of
  its own.
* ``.epub`` (EPUB 2 and 3, read with ebooklib; an optional dependency): the documents of the
  spine in reading order, titled from the navigation (table of contents); documents the
  navigation does not list go with the chapter before them; documents with nothing to say
  (covers, images) are left out. XHTML becomes plain text, block by block.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from .plan import check_text, read_text_file

MAX_TITLE = 100
MAX_CHAPTERS = 2000
SUFFIXES = (".txt", ".md", ".markdown", ".epub")
INSTALL = "pip install ebooklib (in the Python that runs Sailfish TTS; in ComfyUI, ComfyUI's)"


class BookError(ValueError):
    """A book that cannot be read as chapters."""


@dataclass(frozen=True)
class Chapter:
    title: str
    text: str


@dataclass(frozen=True)
class Book:
    title: str
    chapters: list[Chapter]


def read_book(path: str | Path) -> Book:
    """The chapters of a ``.txt``, ``.md`` or ``.epub`` file, in reading order."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise BookError(f"book: {path.name!r} must be {', '.join(SUFFIXES)}")
    if suffix == ".epub":
        book = read_epub(path)
    else:
        text = read_text_file(path, "book")
        book = (markdown_chapters if suffix in (".md", ".markdown") else text_chapters)(
            text, path.stem)
    chapters = [c for c in book.chapters if c.text.strip()]
    if not chapters:
        raise BookError(f"book: {path.name} holds no text to read")
    if len(chapters) > MAX_CHAPTERS:
        raise BookError(f"book: {path.name} has {len(chapters)} chapters; at most "
                        f"{MAX_CHAPTERS}")
    return Book(book.title, chapters)


# ---------------------------------------------------------------- plain text
def text_chapters(text: str, title: str = "Book") -> Book:
    text = check_text(text, "book").replace("\r\n", "\n").replace("\r", "\n")
    chapters = []
    for block in re.split(r"\n[ \t]*\n(?:[ \t]*\n)+", text):
        block = block.strip("\n")
        if not block.strip():
            continue
        first, _, rest = block.partition("\n")
        if first.strip() and len(first.strip()) <= MAX_TITLE and rest.startswith("\n") \
                and rest.strip():
            chapters.append(Chapter(first.strip(), rest.strip()))
        else:
            chapters.append(Chapter(f"Chapter {len(chapters) + 1}", block.strip()))
    return Book(title, chapters)


# ---------------------------------------------------------------- markdown
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_chapters(text: str, title: str = "Book") -> Book:
    lines = check_text(text, "book").replace("\r\n", "\n").splitlines()
    fenced, levels = False, []
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            levels.append(len(m.group(1)))
    repeated = [lv for lv in sorted(set(levels)) if levels.count(lv) > 1]
    level = repeated[0] if repeated else (min(levels) if levels else 0)
    chapters: list[list] = [["", []]]  # text before the first chapter heading
    fenced = False
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue  # code is not read aloud
        m = HEADING.match(line)
        if m and len(m.group(1)) == level:
            chapters.append([plain_markdown(m.group(2)), []])
        elif m and len(m.group(1)) < level:
            title = plain_markdown(m.group(2))  # the book's own title
        elif m:
            chapters[-1][1] += ["", plain_markdown(m.group(2)), ""]
        else:
            chapters[-1][1].append(plain_markdown(line))
    out = []
    for i, (name, body) in enumerate(chapters):
        words = re.sub(r"\n{3,}", "\n\n", "\n".join(body)).strip()
        if words:
            out.append(Chapter(name or (title if i == 0 else f"Chapter {i}"), words))
    return Book(title, out)


def plain_markdown(line: str) -> str:
    line = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", line)  # images
    line = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line)  # links: their text
    line = re.sub(r"<[^>]+>", "", line)  # HTML
    line = re.sub(r"`([^`]*)`", r"\1", line)
    line = re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", line)  # list markers
    line = re.sub(r"^\s*>\s?", "", line)  # quotes
    line = re.sub(r"(\*\*|__|\*|_|~~)(?=\S)(.+?)(?<=\S)\1", r"\2", line)  # emphasis
    if re.fullmatch(r"\s*([-*_])(\s*\1){2,}\s*", line):
        return ""  # a rule
    return html.unescape(line).rstrip()


# ---------------------------------------------------------------- EPUB
BLOCKS = {"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "tr",
          "section", "article", "title", "dd", "dt", "pre", "hr"}
SKIP = {"script", "style", "head", "nav"}


class _Text(HTMLParser):
    """XHTML → plain text, one line per block."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag, attrs):
        if tag in SKIP:
            self.skipping += 1
        elif tag in BLOCKS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag):
        if tag in SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in BLOCKS:
            self.parts.append("\n\n")

    def handle_data(self, data):
        if not self.skipping:
            self.parts.append(data)

    def text(self) -> str:
        joined = re.sub(r"[ \t\r\f\v]+", " ", "".join(self.parts))
        return re.sub(r"\s*\n\s*\n\s*", "\n\n", joined).strip()


def html_text(markup: bytes | str) -> str:
    if isinstance(markup, bytes):
        markup = markup.decode("utf-8", "replace")
    parser = _Text()
    parser.feed(markup)
    parser.close()
    return parser.text()


def import_ebooklib():
    try:
        import ebooklib
        from ebooklib import epub
    except ImportError:
        raise BookError(f"reading .epub books needs ebooklib: {INSTALL}") from None
    return ebooklib, epub


def read_epub(path: Path) -> Book:
    ebooklib, epub = import_ebooklib()
    if not path.is_file():
        raise FileNotFoundError(f"book: no such file: {path}")
    try:
        book = epub.read_epub(str(path), options={"ignore_ncx": False})
    except Exception as e:  # ebooklib raises its own and zipfile/lxml errors
        raise BookError(f"book: {path.name} is not a readable EPUB ({type(e).__name__}: "
                        f"{str(e)[:120]})") from None
    titles = {}
    for href, name in toc_entries(book.toc):
        titles.setdefault(href.split("#")[0], name)
    chapters: list[list] = []
    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT:
            continue
        text = html_text(item.get_content())
        name = titles.get(item.get_name())
        if name is not None or not chapters:
            chapters.append([name or f"Chapter {len(chapters) + 1}", [text]])
        else:
            chapters[-1][1].append(text)
    found = book.get_metadata("DC", "title")
    title = found[0][0] if found else path.stem
    return Book(title, [Chapter(name, "\n\n".join(t for t in texts if t))
                        for name, texts in chapters])


def toc_entries(toc) -> list[tuple[str, str]]:
    """(href, title) of every navigation entry, depth first (reading order)."""
    out = []
    for entry in toc:
        if isinstance(entry, (tuple, list)):
            section, children = entry[0], entry[1]
            if getattr(section, "href", None):
                out.append((section.href, section.title))
            out += toc_entries(children)
        elif getattr(entry, "href", None):
            out.append((entry.href, entry.title))
    return out
