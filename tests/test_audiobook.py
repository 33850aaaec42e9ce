"""Books (``text/book.py`` reads chapters, ``speech/audiobook.py`` speaks them): .txt, .md and
an EPUB built here with three chapters; one file per chapter, chapters.json, a cue sheet and
ffmetadata; an interrupted run (Cancel in the Python API, and a real ``book`` process killed
mid-way) resumes, leaving finished chapters untouched."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import soundfile as sf

from fish_core.cli import main
from fish_core.params import Cancelled
from fish_core.speech.audiobook import render_book
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
