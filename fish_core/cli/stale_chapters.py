"""A book's folder holds exactly its chapters: after a run that spoke the whole book, the files
of chapters the book no longer has (a chapter renamed or removed, or another ``--format``) are
moved aside into a dated folder, ``stale-YYYYMMDD-HHMMSS/``, never deleted; temporary files a
killed run left behind are removed. Only names a book run writes are touched: chapter files
(``001 Title.wav``) and the hidden temporary files of those and of the book's own files."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

CHAPTER = re.compile(r"\d{3,} .+\.(?:wav|flac)")  # audiobook.chapter_file's names
OWN = r"(?:\d{3,} .+\.(?:wav|flac)|book\.json|chapters\.json|book\.cue|chapters\.ffmetadata)"
LEFTOVER = re.compile(rf"\.(?:{OWN}|sailfish)\.\w+\.tmp"  # audio.atomic's temporary names
                      rf"|\.partial-\d{{3,}} .+\.(?:wav|flac)|\.(?:book|chapters)\.json\.partial")
ASIDE = "stale-"


@dataclass
class SetAside:
    """What a run moved aside: the chapter files (names) and the folder they went to."""

    files: list[str] = field(default_factory=list)
    folder: Path | None = None

    def note(self) -> str:
        """For the report: which files went where (empty when none did)."""
        if not self.files:
            return ""
        shown = ", ".join(self.files[:3]) + (f" and {len(self.files) - 3} more"
                                             if len(self.files) > 3 else "")
        return (f"moved {len(self.files)} file{'' if len(self.files) == 1 else 's'} of chapters "
                f"the book no longer has ({shown}) to {self.folder}")


def set_aside(folder: Path, chapters: list[str]) -> SetAside:
    """Move the chapter files in ``folder`` that are not among ``chapters`` (the book's file
    names now) into ``folder/stale-<date>/``; remove leftover temporary files."""
    keep, stale = set(chapters), []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if not entry.is_file(follow_symlinks=False):
            continue
        if LEFTOVER.fullmatch(entry.name):
            try:
                os.unlink(entry.path)
            except OSError:
                pass
        elif CHAPTER.fullmatch(entry.name) and entry.name not in keep:
            stale.append(entry.name)
    if not stale:
        return SetAside()
    aside = folder / f"{ASIDE}{time.strftime('%Y%m%d-%H%M%S')}"
    aside.mkdir(exist_ok=True)
    for name in stale:
        os.replace(folder / name, aside / name)
    return SetAside(stale, aside)
