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

What a book costs is bounded by its file: every EPUB entry is read against a budget (at most
``MAX_ITEM_BYTES`` each, ``2 × the file's size + BOOK_ALLOWANCE`` in all, so a zip bomb is
refused before it is inflated); the spine (``MAX_SPINE`` documents) and the manifest
(``MAX_ITEMS``) are counted before any item is read, the chapter limit (``MAX_CHAPTERS``) in
one pass before any document is read as text. Titles are single lines: control characters
(CR, LF, NUL …) and line separators become spaces.
"""

from __future__ import annotations

import html
import posixpath
import re
import unicodedata
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from .plan import check_text, read_text_file

MAX_TITLE = 100
MAX_CHAPTERS = 2000
MAX_SPINE = 4 * MAX_CHAPTERS  # documents in an EPUB's reading order
MAX_ITEMS = 4 * MAX_SPINE  # entries of its manifest (documents, images, styles …)
MAX_ITEM_BYTES = 8 << 20  # one EPUB entry, inflated (a chapter's XHTML is far smaller)
BOOK_ALLOWANCE = 64 << 20  # EPUB entries may inflate to twice the file plus this, in all
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
    chapters = [Chapter(clean_title(c.title), c.text) for c in book.chapters if c.text.strip()]
    if not chapters:
        raise BookError(f"book: {path.name} holds no text to read")
    if len(chapters) > MAX_CHAPTERS:
        raise BookError(f"book: {path.name} has {len(chapters)} chapters; at most "
                        f"{MAX_CHAPTERS}")
    return Book(clean_title(book.title), chapters)


def clean_title(title: str) -> str:
    """A title on one line: control characters (CR, LF, NUL, …) and line separators become
    spaces, runs of spaces one."""
    title = "".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in title)
    return re.sub(r"\s+", " ", title).strip()


# ---------------------------------------------------------------- plain text
def text_chapters(text: str, title: str = "Book") -> Book:
    text = check_text(text, "book").replace("\r\n", "\n").replace("\r", "\n")
    chapters = []
    for block in re.split(r"\n[ \t]*\n(?:[ \t]*\n)+", text):
        block = block.strip("\n")
        if not block.strip():
            continue
        first, _, rest = block.partition("\n")
        if (first.strip() and len(first.strip()) <= MAX_TITLE and rest.startswith("\n")
                and rest.strip()):
            chapters.append(Chapter(first.strip(), rest.strip()))
        else:
            chapters.append(Chapter(f"Chapter {len(chapters) + 1}", block.strip()))
    return Book(title, chapters)


# ---------------------------------------------------------------- markdown
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_chapters(text: str, title: str = "Book") -> Book:
    lines = check_text(text, "book").replace("\r\n", "\n").splitlines()
    level = chapter_level(lines)
    chapters, title = markdown_sections(lines, level, title)
    out = []
    for i, (name, body) in enumerate(chapters):
        words = re.sub(r"\n{3,}", "\n\n", "\n".join(body)).strip()
        if words:
            out.append(Chapter(name or (title if i == 0 else f"Chapter {i}"), words))
    return Book(title, out)


def unfenced(lines: list[str]) -> Iterator[str]:
    """The lines outside code fences (the fences' own lines left out)."""
    fenced = False
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield line


def chapter_level(lines: list[str]) -> int:
    """The heading level that starts a chapter: the highest one used more than once, else the
    highest used (0: no heading). Headings inside code fences do not count."""
    levels = [len(m.group(1)) for line in unfenced(lines) if (m := HEADING.match(line))]
    repeated = [lv for lv in sorted(set(levels)) if levels.count(lv) > 1]
    return repeated[0] if repeated else (min(levels) if levels else 0)


def markdown_sections(lines: list[str], level: int, title: str) -> tuple[list[list], str]:
    """[name, lines] of each chapter (the first: the text before the first chapter heading),
    and the book's title (a heading above ``level``, else ``title``). Code is not read aloud."""
    chapters: list[list] = [["", []]]
    for line in unfenced(lines):
        m = HEADING.match(line)
        if m and len(m.group(1)) == level:
            chapters.append([plain_markdown(m.group(2)), []])
        elif m and len(m.group(1)) < level:
            title = plain_markdown(m.group(2))  # the book's own title
        elif m:
            chapters[-1][1] += ["", plain_markdown(m.group(2)), ""]
        else:
            chapters[-1][1].append(plain_markdown(line))
    return chapters, title


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
        utf16 = markup[:2] in (b"\xff\xfe", b"\xfe\xff")  # EPUB allows UTF-16 too
        markup = markup.decode("utf-16" if utf16 else "utf-8", "replace")
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


class ReadBudget:
    """What reading an EPUB's entries may cost: each at most ``MAX_ITEM_BYTES`` inflated, all
    reads together at most twice the file's size plus ``BOOK_ALLOWANCE`` (an entry read twice
    counts twice), checked against the zip's declared sizes before anything is inflated (zipfile
    stops at the declared size)."""

    def __init__(self, path: Path):
        self.name, self.size = path.name, path.stat().st_size
        self.left = 2 * self.size + BOOK_ALLOWANCE

    def take(self, info: zipfile.ZipInfo) -> None:
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise BookError(f"book: {self.name}: {info.filename[:80]!r} is compressed with "
                            f"method {info.compress_type} (an EPUB's entries are stored or "
                            "deflated)")
        if info.file_size > MAX_ITEM_BYTES:
            raise BookError(f"book: {self.name}: {info.filename[:80]!r} inflates to "
                            f"{info.file_size} bytes; an EPUB entry may hold at most "
                            f"{MAX_ITEM_BYTES >> 20} MiB (a zip bomb?)")
        if info.file_size > self.left:
            raise BookError(f"book: {self.name} inflates to more than twice its size plus "
                            f"{BOOK_ALLOWANCE >> 20} MiB (a zip bomb?)")
        self.left -= info.file_size


def bounded_reader(epub, path: Path):
    """ebooklib's reader, each entry read against a ``ReadBudget``."""
    budget = ReadBudget(path)

    class Reader(epub.EpubReader):
        def read_file(self, name):
            name = posixpath.normpath(name)
            budget.take(self.zf.getinfo(name))  # KeyError for a missing entry, as ebooklib's
            return self.zf.read(name)

        def _load_manifest(self):  # the package is parsed; no item is read yet
            opf = epub.NAMESPACES["OPF"]
            for part, limit in (("spine", MAX_SPINE), ("manifest", MAX_ITEMS)):
                found = self.container.find(f"{{{opf}}}{part}")
                if found is not None and len(found) > limit:
                    raise BookError(f"book: {path.name} has {len(found)} entries in its "
                                    f"{part}; at most {limit}")
            super()._load_manifest()

    return Reader(str(path), {"ignore_ncx": False})


def read_epub(path: Path) -> Book:
    ebooklib, epub = import_ebooklib()
    if not path.is_file():
        raise FileNotFoundError(f"book: no such file: {path}")
    book = load_epub(epub, path)
    if len(book.spine) > MAX_SPINE:
        raise BookError(f"book: {path.name} has {len(book.spine)} documents in its reading "
                        f"order; at most {MAX_SPINE}")
    chapters = epub_chapters(spine_documents(ebooklib, book), path)
    found = book.get_metadata("DC", "title")
    title = found[0][0] if found and isinstance(found[0][0], str) else path.stem
    return Book(title, [Chapter(name, "\n\n".join(t for t in texts if t))
                        for name, texts in chapters])


def load_epub(epub, path: Path):
    """The parsed book (within a ``ReadBudget``); any reader's error is a ``BookError``."""
    try:
        reader = bounded_reader(epub, path)
        book = reader.load()
        reader.process()
    except BookError:
        raise
    except Exception as e:  # ebooklib raises its own and zipfile/lxml errors
        raise BookError(f"book: {path.name} is not a readable EPUB ({type(e).__name__}: "
                        f"{str(e)[:120]})") from None
    return book


def spine_documents(ebooklib, book) -> list[tuple]:
    """(item, title or None) of each document in reading order; the title is its first entry
    in the navigation map."""
    titles = {}
    for href, name in toc_entries(book.toc):
        titles.setdefault(href.split("#")[0], name)
    items = {}  # id -> item, once (ebooklib's get_item_with_id looks through every item)
    for item in book.get_items():
        items.setdefault(item.get_id(), item)
    documents = []
    for idref, _linear in book.spine:
        item = items.get(idref) if isinstance(idref, str) else None
        if item is not None and item.get_type() == ebooklib.ITEM_DOCUMENT:
            documents.append((item, titles.get(item.get_name())))
    return documents


def epub_chapters(documents: list[tuple], path: Path) -> list[list]:
    """[name, texts] of each chapter: a titled document (or the first) starts one, the
    untitled ones after it continue it."""
    starts = sum(1 for n, (_, name) in enumerate(documents) if name is not None or n == 0)
    if starts > MAX_CHAPTERS:
        raise BookError(f"book: {path.name} has {starts} chapters; at most {MAX_CHAPTERS}")
    chapters: list[list] = []
    for item, name in documents:
        text = html_text(item.content or b"")  # as stored (get_content rebuilds it with lxml)
        if name is not None or not chapters:
            chapters.append([name or f"Chapter {len(chapters) + 1}", [text]])
        else:
            chapters[-1][1].append(text)
    return chapters


def toc_entries(toc) -> list[tuple[str, str]]:
    """(href, title) of every navigation entry, depth first (reading order)."""
    out = []
    if not isinstance(toc, (tuple, list)):
        toc = [toc]  # ebooklib gives one Link, not a list, for an empty navigation map
    for entry in toc:
        if isinstance(entry, (tuple, list)):
            section, children = entry[0], entry[1]
            if getattr(section, "href", None):
                out.append((section.href, section.title))
            out += toc_entries(children)
        elif getattr(entry, "href", None):
            out.append((entry.href, entry.title))
    return out
