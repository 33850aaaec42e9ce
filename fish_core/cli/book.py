"""``book``: a book spoken chapter by chapter into a folder, an application of ``tts``
(``speech.audiobook.render_book``)."""

from __future__ import annotations

from .parser import plural
from . import inputs
from .progress import Bar
from .request import finishing, sampling
from .inputs import load_voices


def cmd_book(args) -> str:
    """``book``: one audio file per chapter, chapters.json, a cue sheet and ffmetadata;
    an interrupted run resumes where it stopped."""
    from ..speech.audiobook import render_book
    from ..text.book import read_book

    book = read_book(args.book)  # a bad book fails before the model loads
    synth = inputs.load_synth(args)
    voices = load_voices(args, synth)
    voice = voices[0] if voices else None
    options = {k: v for k, v in sampling(args).items() if k != "seed"}  # seeded per chapter
    bar = Bar(book.title[:30] or "book")
    try:
        result = render_book(synth, book, args.out, voice=voice, seed=args.seed,
                             audio_format=args.format, model=str(args.remote or args.model),
                             max_bytes=args.max_bytes, on_progress=bar, **options,
                             **finishing(args))
    finally:
        bar.close()
    made = len(result.chapters) - result.skipped
    stale = result.stale.note()
    return (f"wrote {args.out}: {plural(len(result.chapters), 'chapter')} ({made} spoken, "
            f"{result.skipped} already done), seed {result.seed}; chapters.json, book.cue, "
            "chapters.ffmetadata" + (f"; {stale}" if stale else ""))
