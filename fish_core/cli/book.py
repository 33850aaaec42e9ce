"""``book``: a book spoken chapter by chapter into a folder, an application of ``tts``
(``cli.audiobook.render_book``)."""

from __future__ import annotations

import sys

from .parser import plural
from . import inputs
from .progress import Bar
from .request import settings
from .inputs import load_voices


def cmd_book(args) -> str:
    """``book``: one audio file per chapter, chapters.json, a cue sheet and ffmetadata;
    an interrupted run resumes where it stopped."""
    from .audiobook import check_retakes
    from ..text.book import read_book

    book = read_book(args.book)  # a bad book fails before the model loads
    checked = settings(args, "tts")  # and so do the flags
    check_retakes(checked, args.retake_above, args.retakes)
    synth = inputs.load_synth(args)
    voices = load_voices(args, synth)
    result = speak_book(args, synth, book, voices[0] if voices else None, checked)
    made = len(result.chapters) - result.skipped
    said = ""
    stale = result.stale.note()
    if stale:
        said += f"; {stale}"
    if args.words:
        save_book_words(args.words, result)
        said += f"; words in {args.words}"
    return (f"wrote {args.out}: {plural(len(result.chapters), 'chapter')} ({made} spoken, "
            f"{result.skipped} already done), seed {result.seed}; chapters.json, book.cue, "
            f"chapters.ffmetadata{said}")


def speak_book(args, synth, book, voice, checked):
    """``render_book`` with a progress bar; each retake said on stderr."""
    from .audiobook import render_book

    bar = Bar(book.title[:30] or "book")
    try:
        return render_book(synth, book, args.out, voice=voice, settings=checked,
                           audio_format=args.format, model=str(args.remote or args.model),
                           on_progress=bar, retake_above=args.retake_above,
                           retakes=args.retakes, log=lambda line: print(line, file=sys.stderr))
    finally:
        bar.close()


def save_book_words(path: str, result) -> None:
    """The whole book's words (``--words``): chapter after chapter on one timeline."""
    from pathlib import Path

    from ..outputs import OutputError, write_or_keep, write_text
    from .audiobook import read_chapter_words
    from ..speech.words import caption_format, captions

    words, texts = read_chapter_words(result.folder, result)
    text = captions(words, caption_format(path), texts)
    note = write_or_keep(lambda p: write_text(p, text), Path(path), "words")
    if note:
        raise OutputError(note)
