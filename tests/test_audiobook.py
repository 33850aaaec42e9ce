"""Books (``text/book.py`` reads chapters, ``cli/audiobook.py`` speaks them): .txt, .md and
an EPUB built here with three chapters; one file per chapter, chapters.json, a cue sheet and
ffmetadata; an interrupted run (Cancel in the Python API, and a real ``book`` process killed
mid-way) resumes, leaving finished chapters untouched."""

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import soundfile as sf

from conftest import measure_peak_growth
from fish_core.cli import main
from fish_core.params import Cancelled
from fish_core.cli.audiobook import render_book
from fish_core.text.book import BookError, markdown_chapters, read_book, text_chapters

ROOT = Path(__file__).resolve().parents[1]
FAST = dict(max_new_tokens=8, temperature=0.8, top_p=0.8, top_k=30)
CHAPTERS = [("The Harbour", "The boat came in at dawn."),
            ("The Storm", " ".join(f"Wave {n} broke over the deck." for n in range(1, 9))),
            ("The Return", " ".join(f"Mile {n} went by." for n in range(1, 9)))]


def make_epub(path: Path) -> Path:
    epub = pytest.importorskip("ebooklib.epub")
    book = epub.EpubBook()
    book.set_identifier("sailfish-test")
    book.set_title("Three Chapters")
    book.set_language("en")
    items = []
    for i, (title, text) in enumerate(CHAPTERS, 1):
        item = epub.EpubHtml(title=title, file_name=f"chap_{i}.xhtml", lang="en")
        item.content = f"<html><body><h1>{title}</h1><p>{text}</p></body></html>"
        book.add_item(item)
        items.append(item)
    book.toc = items
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *items]
    epub.write_epub(str(path), book)
    return path


def test_chapters_of_text_markdown_and_epub(tmp_path):
    txt = text_chapters("Opening\n\nIt begins.\n\n\n\nTwo\n\nIt goes on.\nStill.\n\n\nno title "
                        "here, just words that run on.")
    assert [(c.title, c.text) for c in txt.chapters] == [
        ("Opening", "It begins."), ("Two", "It goes on.\nStill."),
        ("Chapter 3", "no title here, just words that run on.")]
    md = markdown_chapters("# My Book\n\nIntro *words*.\n\n## One\n\nSee [here](http://x).\n"
                           "```\ncode()\n```\n## Two\n\n- a list item\n")
    assert md.title == "My Book"
    assert [(c.title, c.text) for c in md.chapters] == [
        ("My Book", "Intro words."), ("One", "See here."), ("Two", "a list item")]
    book = read_book(make_epub(tmp_path / "three.epub"))
    assert book.title == "Three Chapters"
    assert [c.title for c in book.chapters] == [t for t, _ in CHAPTERS]
    assert book.chapters[1].text.startswith("The Storm\n\nWave 1 broke")
    with pytest.raises(BookError, match="must be"):
        read_book(tmp_path / "notes.pdf")


def test_the_python_api_resumes_after_an_interruption(tiny_synth, tmp_path):
    book = make_epub(tmp_path / "three.epub")
    out = tmp_path / "out"
    first = out / "001 The Harbour.wav"
    seen = []

    def cancel():  # Cancel pressed while the second chapter is spoken
        return first.exists()

    with pytest.raises(Cancelled):
        render_book(tiny_synth, book, out, seed=3, cancel=cancel,
                    on_progress=lambda done, total: seen.append((done, total)), **FAST)
    total = sum(len(c.text) for c in read_book(book).chapters)
    assert seen and all(t == total for _, t in seen) and seen == sorted(seen)
    assert first.is_file() and not (out / "002 The Storm.wav").exists()
    stamp = first.stat().st_mtime_ns
    result = render_book(tiny_synth, book, out, seed=3, **FAST)
    assert result.skipped == 1 and first.stat().st_mtime_ns == stamp
    files = sorted(p.name for p in out.glob("*.wav"))
    assert files == ["001 The Harbour.wav", "002 The Storm.wav", "003 The Return.wav"]
    chapters = json.loads((out / "chapters.json").read_text())["chapters"]
    durations = [sf.info(str(out / c["file"])).duration for c in chapters]
    assert [c["start"] for c in chapters] == pytest.approx([0, durations[0],
                                                            durations[0] + durations[1]],
                                                           abs=1e-4)
    cue = (out / "book.cue").read_text()
    assert cue.count("TRACK") == 3 and 'FILE "002 The Storm.wav" WAVE' in cue
    meta = (out / "chapters.ffmetadata").read_text()
    assert meta.startswith(";FFMETADATA1") and meta.count("[CHAPTER]") == 3
    # Other settings are other audio: every chapter is spoken again.
    again = render_book(tiny_synth, book, out, seed=4, **FAST)
    assert again.skipped == 0 and again.seed == 4


def test_a_killed_book_run_resumes_where_it_stopped(ckpt_dir, tmp_path):
    book = make_epub(tmp_path / "three.epub")
    out = tmp_path / "out"
    args = ["book", str(book), "-o", str(out), "--model", str(ckpt_dir), "--device", "cpu",
            "--seed", "3", "--max-bytes", "24", "--max-new-tokens", "24"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    run = subprocess.Popen([sys.executable, "-m", "fish_core", *args], cwd=tmp_path, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record = out / "book.json"
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and run.poll() is None:
            try:
                done = json.loads(record.read_text())["chapters"]
            except (OSError, ValueError, KeyError):
                done = []
            if done:
                break
            time.sleep(0.02)
        killed = run.poll() is None
        run.send_signal(signal.SIGKILL)
    finally:
        run.wait(timeout=60)
    first = out / "001 The Harbour.wav"
    assert first.is_file()
    stamp = first.stat().st_mtime_ns
    assert not list(out.glob(".partial-*")) or killed  # a half file keeps its partial name
    assert main([*args]) == 0
    assert first.stat().st_mtime_ns == stamp
    assert sorted(p.name for p in out.glob("[0-9]*.wav")) == [
        "001 The Harbour.wav", "002 The Storm.wav", "003 The Return.wav"]
    manifest = json.loads(record.read_text())
    assert [c["index"] for c in manifest["chapters"]] == [1, 2, 3]
    assert killed, "the run finished before it could be killed (make chapter 2 longer)"


# ---------------------------------------------------------------- books bounded by their file
MB = 1 << 20
CONTAINER = ('<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:'
             'opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/content.opf" '
             'media-type="application/oebps-package+xml"/></rootfiles></container>')


def crafted_epub(path: Path, documents: list, title: str = "Crafted", bodies: dict | None = None,
                 manifest_hrefs: list | None = None) -> Path:
    """An EPUB 2 written entry by entry: ``documents`` are (href, toc title or None, body);
    ``bodies`` maps an href to an iterable of byte chunks (deflated as they come: a bomb costs
    the test a chunk); ``manifest_hrefs`` lists more manifest items (and spine entries)."""
    items = [(f"d{n}", href) for n, (href, _, _) in enumerate(documents)]
    items += [(f"x{n}", href) for n, href in enumerate(manifest_hrefs or [])]
    opf = [('<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="2.0" '
            'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
            f'<dc:title>{title}</dc:title><dc:identifier id="id">x</dc:identifier>'
            '<dc:language>en</dc:language></metadata><manifest>'
            '<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>')]
    opf += [f'<item id="{i}" href="{h}" media-type="application/xhtml+xml"/>' for i, h in items]
    opf += ['</manifest><spine toc="ncx">']
    opf += [f'<itemref idref="{i}"/>' for i, _ in items]
    opf += ["</spine></package>"]
    ncx = [('<?xml version="1.0"?><ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" '
            'version="2005-1"><head/><docTitle><text>t</text></docTitle><navMap>')]
    ncx += [f'<navPoint id="n{n}"><navLabel><text>{name}</text></navLabel>'
            f'<content src="{href}"/></navPoint>'
            for n, (href, name, _) in enumerate(documents) if name is not None]
    ncx += ["</navMap></ncx>"]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", CONTAINER)
        z.writestr("OEBPS/content.opf", "".join(opf))
        z.writestr("OEBPS/toc.ncx", "".join(ncx))
        for href, _, body in documents:
            if href in (bodies or {}):
                with z.open(f"OEBPS/{href}", "w", force_zip64=True) as f:
                    for chunk in bodies[href]:
                        f.write(chunk)
            else:
                z.writestr(f"OEBPS/{href}", f"<html><body><p>{body}</p></body></html>")
    return path


def refused_within(path: Path, why: str) -> None:
    """read_book(path) is one BookError matching ``why``, costing < 128 MiB + twice the file."""
    pytest.importorskip("ebooklib")

    def read():
        with pytest.raises(BookError, match=why):
            read_book(path)

    grown = measure_peak_growth(read)
    bound = 128 * MB + 2 * path.stat().st_size
    assert grown < bound, f"{grown / MB:.0f} MiB grown for a {path.stat().st_size} byte book"


def test_an_epub_zip_bomb_is_refused_before_it_is_inflated(tmp_path):
    spaces = (b" " * MB for _ in range(160))  # 160 MiB of nothing, ~160 kB deflated
    bomb = crafted_epub(tmp_path / "bomb.epub", [("a.xhtml", "A", None)],
                        bodies={"a.xhtml": spaces})
    assert bomb.stat().st_size < 400_000
    refused_within(bomb, r"'OEBPS/a.xhtml' inflates to 167772160 bytes; an EPUB entry may "
                   "hold at most 8 MiB")
    # one entry within the limit, listed 40 times over: each read counts
    four = crafted_epub(tmp_path / "again.epub", [("a.xhtml", "A", None)],
                        bodies={"a.xhtml": (b" " * MB for _ in range(4))},
                        manifest_hrefs=["a.xhtml"] * 40)
    refused_within(four, "inflates to more than twice its size plus 64 MiB")


def test_the_spine_and_chapter_limits_come_before_any_text_is_read(tmp_path, monkeypatch):
    """20 000 spine items took 33-85 s (a lookup through every item per spine entry) before
    the 2000-chapter limit said no; now both limits are checked before any document is
    read as text."""
    pytest.importorskip("ebooklib")
    import fish_core.text.book as book_module

    read = []
    real = book_module.html_text
    monkeypatch.setattr(book_module, "html_text", lambda markup: read.append(1) or real(markup))
    many = crafted_epub(tmp_path / "many.epub",
                        [(f"{n}.xhtml", None if n else "Start", "w") for n in range(20000)])
    with pytest.raises(BookError, match="20000 entries in its spine; at most 8000"):
        read_book(many)
    chapters = crafted_epub(tmp_path / "chapters.epub",
                            [(f"{n}.xhtml", f"C{n}", "w") for n in range(2001)])
    with pytest.raises(BookError, match="2001 chapters; at most 2000"):
        read_book(chapters)
    assert read == []
    fine = crafted_epub(tmp_path / "fine.epub", [(f"{n}.xhtml", f"C{n}", f"Words {n}.")
                                                 for n in range(3)])
    assert [c.text for c in read_book(fine).chapters] == ["Words 0.", "Words 1.", "Words 2."]


def test_titles_are_one_line_in_the_cue_sheet_and_ffmetadata(tmp_path):
    """A CR in an EPUB title (&#13;) wrote lines of its own into book.cue and
    chapters.ffmetadata."""
    pytest.importorskip("ebooklib")
    from fish_core.cli.audiobook import BookResult, ChapterFile, write_chapter_files

    evil = "Intro&#13;FILE &#34;x.wav&#34; WAVE&#13;&#10;[CHAPTER]&#0;&#11;end"
    book = read_book(crafted_epub(tmp_path / "t.epub", [("a.xhtml", evil, "Words.")],
                                  title="Book&#13;TITLE x"))
    assert book.chapters[0].title == 'Intro FILE "x.wav" WAVE [CHAPTER] end'
    assert book.title == "Book TITLE x"
    result = BookResult("My\rBook\u2028x", tmp_path, 1,
                        [ChapterFile(1, "One\r\nTRACK 09 AUDIO\x00\x1b[2J", "001 One.wav",
                                     1.0, False)])
    write_chapter_files(tmp_path, result)
    cue = (tmp_path / "book.cue").read_text(encoding="utf-8")
    assert cue.splitlines() == ['TITLE "My Book x"', 'FILE "001 One.wav" WAVE',
                                "  TRACK 01 AUDIO", '    TITLE "One  TRACK 09 AUDIO  [2J"',
                                "    INDEX 01 00:00:00"]
    meta = (tmp_path / "chapters.ffmetadata").read_text(encoding="utf-8").splitlines()
    assert meta[1] == "title=My Book x" and meta[-1] == "title=One  TRACK 09 AUDIO  [2J"
    assert not any(c in "".join(meta) + cue for c in "\r\x00\x1b")


def test_long_titles_make_file_names_the_file_system_takes(tiny_synth, tmp_path):
    """60 four-byte letters: the chapter was spoken, then its file name was too long."""
    title = "\U0001d400" * 60  # MATHEMATICAL BOLD CAPITAL A, a letter of four UTF-8 bytes
    book = tmp_path / "long.md"
    book.write_text(f"## {title}\n\nShort words.\n\n## {'é' * 200}\n\nMore words.\n",
                    encoding="utf-8")
    result = render_book(tiny_synth, book, tmp_path / "out", seed=3, **FAST)
    for chapter in result.chapters:
        assert (tmp_path / "out" / chapter.file).is_file()
        assert len(chapter.file.encode()) <= 255 - len(".partial-")
    assert result.chapters[0].file.startswith("001 \U0001d400")
    assert result.chapters[1].file.startswith("002 é")


def test_an_epub_without_navigation_entries_is_read(tmp_path):
    """An empty navigation map (ebooklib gives one Link, not a list) was a TypeError."""
    pytest.importorskip("ebooklib")
    book = read_book(crafted_epub(tmp_path / "plain.epub",
                                  [(f"{n}.xhtml", None, f"Words {n}.") for n in range(3)]))
    assert [(c.title, c.text) for c in book.chapters] == [
        ("Chapter 1", "Words 0.\n\nWords 1.\n\nWords 2.")]


def test_the_book_command_says_one_error_line_for_a_zip_bomb(tmp_path, capsys):
    pytest.importorskip("ebooklib")
    bomb = crafted_epub(tmp_path / "bomb.epub", [("a.xhtml", "A", None)],
                        bodies={"a.xhtml": (b" " * MB for _ in range(64))})
    assert main(["book", str(bomb), "-o", str(tmp_path / "out"), "--model",
                 str(tmp_path / "no-model"), "--no-download"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: book: bomb.epub: 'OEBPS/a.xhtml' inflates to 67108864 bytes")
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


def test_a_re_rendered_book_holds_exactly_its_chapters(tmp_path):
    """Chapter 2 renamed, chapter 3 deleted, then the run again: the old files of chapters 2
    and 3 are moved aside into a dated folder (said in the report), so the folder holds exactly
    the chapters, and its listing is what the docs' ffmpeg recipe joins; files that are not a
    book's are left alone, a killed run's temporary files are removed."""
    from types import SimpleNamespace

    import torch

    class Speaker:  # a short tone per chapter, no model: this is about the files
        def tts(self, text, voice, **_):
            wave = 0.1 * torch.sin(torch.arange(2205 + len(text)) / 5.0)
            return SimpleNamespace(waveform=wave, sample_rate=44100,
                                   duration=wave.shape[0] / 44100, words=None)

    out = tmp_path / "out"
    first = text_chapters("Morning\n\nThe sun.\n\n\n\nNoon\n\nThe heat.\n\n\n\nNight\n\nThe moon.")
    render_book(Speaker(), first, out, seed=1)
    assert sorted(p.name for p in out.glob("0*.wav")) == [
        "001 Morning.wav", "002 Noon.wav", "003 Night.wav"]
    (out / "notes.txt").write_text("mine")
    (out / ".001 Morning.wav.k2j4x9ab.tmp").write_bytes(b"half")  # a killed run's
    second = text_chapters("Morning\n\nThe sun.\n\n\n\nMidday\n\nThe heat.")
    result = render_book(Speaker(), second, out, seed=1)
    chapters = ["001 Morning.wav", "002 Midday.wav"]
    aside = result.stale.folder
    assert aside is not None and aside.parent == out and aside.name.startswith("stale-")
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == sorted(
        chapters + ["book.json", "chapters.json", "book.cue", "chapters.ffmetadata", "notes.txt"])
    assert sorted(p.name for p in aside.iterdir()) == ["002 Noon.wav", "003 Night.wav"]
    listed = json.loads((out / "chapters.json").read_text())["chapters"]
    assert [c["file"] for c in listed] == chapters
    assert result.stale.note() == (f"moved 2 files of chapters the book no longer has "
                                   f"(002 Noon.wav, 003 Night.wav) to {aside}")
    assert [c.skipped for c in result.chapters] == [True, False]
    again = render_book(Speaker(), second, out, seed=1)  # nothing stale: nothing moved
    assert again.stale.files == [] and again.stale.note() == ""
