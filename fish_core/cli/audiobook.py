"""Audiobooks: a book (``text.book``) spoken chapter by chapter into a folder, resumable.

    result = render_book(synth, "novel.epub", "out/", voice=v, seed=7, loudness=-18)

What the folder gets:

* one audio file per chapter, in reading order: ``001 Title.wav`` (or ``.flac``), each spoken
  by ``synth.tts`` with the same voice, seed, loudness, speed and lexicon;
* ``chapters.json``: the book's title and, per chapter, its title, file, start time in the
  chapters played one after another, and duration;
* ``book.cue`` (a cue sheet: one FILE/TRACK per chapter) and ``chapters.ffmetadata``
  (``ffmpeg -f concat -safe 0 -i list.txt -i chapters.ffmetadata -map_metadata 1 book.m4b``
  makes a chaptered audiobook), so players show the chapters;
* ``book.json``: what each finished chapter was made from (a digest of its text and of every
  setting: voice, seed, finishing, sampling, model). A run that is interrupted (Ctrl-C, a
  crash, a kill) resumes: a chapter whose file is there with the same digest is left
  untouched and skipped. Files are written under a temporary name and renamed when complete,
  so a killed run never leaves a half chapter that looks finished;
* after a run that spoke the whole book, the files of chapters it no longer has (renamed,
  removed, another format) are moved aside into ``stale-<date>/`` (``cli.stale_chapters``),
  so the folder holds exactly the book's chapters.

With ``check`` (a setting) every chapter is heard and scored against its text
(``Speech.check``); with ``retake_above`` a chapter scored past that error rate is spoken again
with the next seeds, at most ``retakes`` times (each retake logged), and the take heard nearest
its text is kept.

Without a seed the first run picks one and keeps it in ``book.json``, so a resumed run
speaks in the same voice. Progress (``on_progress(done, total)``) counts characters of the
whole book.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Callable

import torch

from ..audio.atomic import TEMP_BYTES, write_text
from ..params import MAX_SEED
from ..speech.settings import Settings
from ..speech.voices import Voice
from ..speech.words import TimedWord
from ..text.book import Book, read_book
from .stale_chapters import SetAside, set_aside

MANIFEST = "book.json"
FORMATS = ("wav", "flac")
VERSION = 1
NAME_BYTES = 255  # a file name's limit on common file systems (ext4, APFS, NTFS in UTF-16)
TITLE_BYTES = 200  # a title's part of a chapter's file name
PARTIAL = "." + "x" * TEMP_BYTES  # what a chapter file's temporary name adds (audio.atomic)


@dataclass
class ChapterFile:
    index: int
    title: str
    file: str
    seconds: float
    skipped: bool  # finished by an earlier run
    words: str | None = None  # its timed words' file (``NAME.words.json``), when asked


@dataclass
class BookResult:
    title: str
    folder: Path
    seed: int
    chapters: list[ChapterFile] = field(default_factory=list)
    stale: SetAside = field(default_factory=SetAside)  # chapters the book no longer has

    @property
    def skipped(self) -> int:
        return sum(c.skipped for c in self.chapters)


def render_book(synth, book: Book | str | Path, out_dir: str | Path, *,
                voice: Voice | None = None, settings: Settings | None = None,
                audio_format: str = "wav", model: str = "",
                on_progress: Callable[[int, int], None] | None = None,
                cancel: Callable[[], bool] | None = None, retake_above: float | None = None,
                retakes: int = 2, log: Callable[[str], None] | None = None,
                **options) -> BookResult:
    """Speak every chapter of ``book`` (a ``Book`` or a .txt/.md/.epub path) into ``out_dir``
    with ``synth`` (local or remote), resuming an earlier run there. ``settings`` and/or flat
    keywords as ``tts`` takes them (``Settings.of``); ``model`` names the model in the chapters'
    digests (another model re-speaks them). With ``words`` (``speech.words``) each chapter's
    timed words go beside it, ``NAME.words.json`` (``read_chapter_words``)."""
    settings = Settings.of(settings, "tts", **options)  # checked before any work
    check_retakes(settings, retake_above, retakes)
    book, settings, chapters = open_book(book, out_dir, settings, voice, model, audio_format)
    progress = BookProgress(on_progress, book)
    for i, chapter in enumerate(book.chapters, 1):
        if not chapters.keep(i, chapter):
            speak = partial(synth.tts, chapter.text, voice, cancel=cancel,
                            on_progress=progress.within(chapter))
            speech = retaken(speak(settings=settings), speak, settings, i, retake_above,
                             retakes, log)
            chapters.write(i, chapter, speech)
        progress.past(chapter)
    return chapters.close()


def open_book(book: Book | str | Path, out_dir: str | Path, settings: Settings,
              voice: Voice | None, model: str, audio_format: str
              ) -> tuple[Book, Settings, Chapters]:
    """The book read and its folder opened (made if new): the settings with the book's seed
    and the chapters an earlier run left there."""
    if audio_format not in FORMATS:
        raise ValueError(f"audio_format must be one of {', '.join(FORMATS)}, got "
                         f"{audio_format!r}")
    if not isinstance(book, Book):
        book = read_book(book)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(folder)
    settings = book_seed(settings, manifest)
    chapters = Chapters(folder, book, recorded(settings, voice, model, audio_format), manifest,
                        audio_format)
    return book, settings, chapters


class BookProgress:
    """``on_progress(done, total)`` in characters of the whole book, within a chapter too."""

    def __init__(self, on_progress: Callable[[int, int], None] | None, book: Book):
        self.on_progress, self.done = on_progress, 0
        self.total = sum(len(c.text) for c in book.chapters)

    def within(self, chapter) -> Callable[[int, int], None]:
        """A chapter's ``on_progress(step, steps)``, reported as the book's."""
        base, size = self.done, len(chapter.text)

        def report(done: int, steps: int) -> None:
            if self.on_progress is not None and steps:
                self.on_progress(base + size * min(done, steps) // steps, self.total)

        return report

    def past(self, chapter) -> None:
        """Chapter ``chapter`` done (spoken or kept)."""
        self.done += len(chapter.text)
        if self.on_progress is not None:
            self.on_progress(self.done, self.total)


def book_seed(settings: Settings, manifest: dict) -> Settings:
    """The settings with the book's seed: the one given, the earlier run's, or a fresh one."""
    kept = manifest.get("seed") if isinstance(manifest.get("seed"), int) else None
    if settings.seed is not None or kept is None:
        return settings.seeded()
    return replace(settings, seed=kept)


def recorded(settings: Settings, voice: Voice | None, model: str, fmt: str) -> dict:
    """What a chapter's digest is made of besides its text: a change re-speaks it (a chapter
    made without its words, too, when words are asked for)."""
    found = {"version": VERSION, "voice": voice_digest(voice), "seed": settings.seed,
             "finishing": settings.finishing.as_dict(), "sampling": sampling_of(settings),
             "model": model, "format": fmt}
    if settings.words:
        found["words"] = settings.words
    return found


MAX_RETAKES = 5


def check_retakes(settings: Settings, retake_above, retakes) -> None:
    """``retake_above`` (an error rate ≥ 0) needs checked chapters; ``retakes`` 1 … 5."""
    if retake_above is None:
        return
    if (isinstance(retake_above, bool) or not isinstance(retake_above, (int, float))
            or not retake_above >= 0):
        raise ValueError(f"retake_above must be an error rate ≥ 0 (0.1: one word in ten), "
                         f"got {retake_above!r}")
    if not settings.check:
        raise ValueError("retake_above needs check=True (the chapters heard and scored)")
    if isinstance(retakes, bool) or not isinstance(retakes, int) or not (
            1 <= retakes <= MAX_RETAKES):
        raise ValueError(f"retakes must be a whole number from 1 to {MAX_RETAKES}, got "
                         f"{retakes!r}")


def retaken(speech, speak, settings: Settings, index: int, above: float | None, retakes: int,
            log: Callable[[str], None] | None):
    """A chapter spoken again (``speak(settings=...)``) with the next seeds while its score is
    past ``above``, at most ``retakes`` times; the take heard nearest its text is kept (the
    first of equals). Without ``above``, ``speech`` as it is."""
    best = speech
    if above is None:
        return best
    for attempt in range(1, retakes + 1):
        if best.check.rate <= above:
            break
        seed = (settings.seed + attempt) % (MAX_SEED + 1)
        again = speak(settings=replace(settings, seed=seed))
        if log is not None:
            log(f"chapter {index}: heard {best.check.rate:.1%} off (past {above:.1%}); "
                f"retake {attempt} of {retakes} with seed {seed}: {again.check.rate:.1%} off")
        if again.check.rate < best.check.rate:
            best = again
    return best


def sampling_of(settings: Settings) -> dict:
    """What a chapter's digest records of the sampling and batching."""
    return {"history_turns": settings.history_turns, **settings.sampling.__dict__,
            "max_bytes": settings.max_bytes}


class Chapters:
    """The chapter files of one run in ``folder``: those kept from an earlier run (same
    digest, file and size) and those written now, the manifest written after each."""

    def __init__(self, folder: Path, book: Book, settings: dict, manifest: dict, fmt: str):
        self.folder, self.settings, self.title = folder, settings, book.title
        self.names = [chapter_file(i, c.title, fmt) for i, c in enumerate(book.chapters, 1)]
        self.before = {c.get("index"): c for c in manifest.get("chapters", [])
                       if isinstance(c, dict)}
        self.entries: list[dict] = []
        self.result = BookResult(book.title, folder, settings["seed"])

    def keep(self, i: int, chapter) -> bool:
        """Whether chapter ``i`` is kept from the earlier run (and recorded so)."""
        key = digest(self.settings, chapter.title, chapter.text)
        name, kept = self.names[i - 1], self.before.get(i)
        path = self.folder / name
        if not (kept and kept.get("key") == key and kept.get("file") == name
                and isinstance(kept.get("seconds"), (int, float)) and path.is_file()
                and path.stat().st_size == kept.get("size")):
            return False
        self.entries.append(kept)
        self.result.chapters.append(ChapterFile(i, chapter.title, name, kept["seconds"], True,
                                                kept.get("words")))
        return True

    def write(self, i: int, chapter, speech) -> None:
        """Chapter ``i`` spoken: its file, then the manifest (a kill after this keeps it)."""
        name = self.names[i - 1]
        write_audio(self.folder / name, speech.waveform, speech.sample_rate)
        entry = {"index": i, "title": chapter.title, "file": name,
                 "key": digest(self.settings, chapter.title, chapter.text),
                 "seconds": round(speech.duration, 6), "samples": speech.waveform.shape[0],
                 "sample_rate": speech.sample_rate,
                 "size": (self.folder / name).stat().st_size}
        if speech.words is not None:
            entry["words"] = words_file(name)
            write_json(self.folder / entry["words"], {
                "texts": [s.text for s in speech.segments],
                "words": [w.as_dict() for w in speech.words]})
        self.entries.append(entry)
        self.result.chapters.append(ChapterFile(i, chapter.title, name, entry["seconds"], False,
                                                entry.get("words")))
        later = [c for n, c in self.before.items() if isinstance(n, int) and n > i]
        self.manifest(self.entries + later)

    def manifest(self, chapters: list) -> None:
        write_json(self.folder / MANIFEST, {"title": self.title, "seed": self.settings["seed"],
                                            "settings": self.settings, "chapters": chapters})

    def close(self) -> BookResult:
        self.manifest(self.entries)
        write_chapter_files(self.folder, self.result)
        self.result.stale = set_aside(self.folder, self.names)  # exactly the book's chapters
        return self.result


# ---------------------------------------------------------------- digests and files
def voice_digest(voice: Voice | None) -> str | None:
    """What a voice sounds like, as a digest (its clips' codes or audio and transcripts)."""
    if voice is None:
        return None
    h = hashlib.sha256()
    for clip in voice.clips:
        h.update(clip.codes.to(torch.int64).numpy().tobytes())
        h.update(clip.text.encode())
    for clip in getattr(voice, "references", []) or []:  # a remote voice: its audio
        h.update(clip.audio.numpy().tobytes())
        h.update(clip.text.encode())
    if voice.lexicon:
        h.update(voice.lexicon.digest().encode())
    return h.hexdigest()[:32]


def digest(settings: dict, title: str, text: str) -> str:
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    h.update(b"\0" + title.encode() + b"\0" + text.encode())
    return h.hexdigest()[:32]


def safe_name(title: str, limit: int = 60, max_bytes: int = TITLE_BYTES) -> str:
    """A chapter title as a file name part: letters, digits, spaces and ``-_.,'``; at most
    ``limit`` characters and ``max_bytes`` bytes of UTF-8 (cut between characters)."""
    name = re.sub(r"[^\w\s\-.,']", "", title, flags=re.UNICODE)
    name = re.sub(r"\s+", " ", name).strip(" .")[:limit]
    name = name.encode()[:max_bytes].decode("utf-8", "ignore").strip(" .")
    return name or "chapter"


def chapter_file(index: int, title: str, audio_format: str) -> str:
    """Chapter ``index``'s file name, checked against the file system's limit on a name's
    bytes (with the temporary name's prefix) before any chapter is spoken."""
    name = f"{index:03d} {safe_name(title)}.{audio_format}"
    if len(f"{PARTIAL}{name}".encode()) > NAME_BYTES:
        raise ValueError(f"chapter {index}: its file name {name[:40]!r}… is longer than "
                         f"{NAME_BYTES} bytes")
    return name


def words_file(audio_name: str) -> str:
    """A chapter's words file: ``001 Title.words.json`` beside ``001 Title.wav``."""
    return f"{Path(audio_name).stem}.words.json"


def read_chapter_words(folder: Path, result: BookResult) -> tuple[list[TimedWord], list[str]]:
    """Every chapter's words on the book's timeline (the chapters played one after another, as
    ``chapters.json`` starts them) and the texts their ``segment`` indices name."""
    words: list[TimedWord] = []
    texts: list[str] = []
    start = 0.0
    for chapter in result.chapters:
        if chapter.words is None:
            raise ValueError(f"chapter {chapter.index} has no words file")
        data = json.loads((Path(folder) / chapter.words).read_text(encoding="utf-8"))
        for w in data["words"]:
            words.append(TimedWord(w["text"], round(start + w["start"], 6),
                                   round(start + w["end"], 6), w.get("speaker"), 0,
                                   len(texts) + w["segment"], w.get("level", "word")))
        texts += data["texts"]
        start += chapter.seconds
    return words, texts


def read_manifest(folder: Path) -> dict:
    """The earlier run's record; an unreadable one is ignored (every chapter is re-made)."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(path: Path, data: dict) -> None:
    write_text(path, json.dumps(data, ensure_ascii=False, indent=1))


def write_audio(path: Path, wave: torch.Tensor, sample_rate: int) -> None:
    from ..audio.files import save_audio

    save_audio(path, wave, sample_rate)  # atomic: a temporary file, renamed when whole


def write_chapter_files(folder: Path, result: BookResult) -> None:
    """``chapters.json``, ``book.cue`` and ``chapters.ffmetadata``."""
    start, rows = 0.0, []
    for c in result.chapters:
        rows.append({"index": c.index, "title": c.title, "file": c.file,
                     "start": round(start, 6), "duration": c.seconds})
        start += c.seconds
    write_json(folder / "chapters.json", {"title": result.title, "seed": result.seed,
                                          "duration": round(start, 6), "chapters": rows})
    cue = [f'TITLE "{cue_text(result.title)}"']
    for row in rows:
        kind = "WAVE"  # cue sheets call PCM files WAVE (FLAC players accept it too)
        cue += [f'FILE "{cue_text(row["file"])}" {kind}',
                f"  TRACK {row['index']:02d} AUDIO",
                f'    TITLE "{cue_text(row["title"])}"',
                "    INDEX 01 00:00:00"]
    write_text(folder / "book.cue", "\n".join(cue) + "\n")
    meta = [";FFMETADATA1", f"title={ffmeta_text(result.title)}"]
    for row in rows:
        begin = round(row["start"] * 1000)
        meta += ["", "[CHAPTER]", "TIMEBASE=1/1000", f"START={begin}",
                 f"END={begin + round(row['duration'] * 1000)}",
                 f"title={ffmeta_text(row['title'])}"]
    write_text(folder / "chapters.ffmetadata", "\n".join(meta) + "\n")


def one_line(value: str) -> str:
    """``value`` with control characters (CR, LF, NUL, …) and line separators as spaces."""
    return "".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in value)


def cue_text(value: str) -> str:
    return one_line(value).replace('"', "'")


def ffmeta_text(value: str) -> str:
    return re.sub(r"([=;#\\])", r"\\\1", one_line(value))
