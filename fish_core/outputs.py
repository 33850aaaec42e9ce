"""Output files: checked before any work starts (a typo in ``-o`` must not cost a whole run),
and a result that still cannot be written where asked is kept next to it, never lost."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Callable

from .audio.formats import SUFFIXES, format_of, write as write_audio  # noqa: F401 - for cli

AUDIO_SUFFIXES = tuple(SUFFIXES)  # what audio.formats writes: .wav .flac .mp3 .opus .ogg .pcm
CODES_SUFFIXES = (".npy", ".safetensors")
VOICE_SUFFIXES = (".safetensors",)


class OutputError(ValueError):
    """A result could not be written where asked (the message says where it went, if anywhere)."""


def check_output(path, field: str, suffixes: tuple[str, ...]) -> Path:
    """``path`` if a file with a supported suffix can be created there (missing folders are
    created on writing); else a ValueError naming ``field``."""
    if "\x00" in str(path):
        raise ValueError(f"{field}: the path holds a NUL byte")
    path = Path(path).expanduser()
    if path.suffix.lower() not in suffixes:
        raise ValueError(f"{field}: {path.name!r} must end in {' or '.join(suffixes)}")
    if path.is_dir():
        raise ValueError(f"{field}: {path} is a folder; name the file to write in it")
    folder = existing_ancestor(path.parent)
    if not folder.is_dir():
        raise ValueError(f"{field}: cannot create {path}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{field}: cannot write into {folder}: permission denied")
    return path


def check_audio_output(path, field: str) -> Path:
    """``check_output`` for audio, and the format the suffix names is one this installation
    can write (mp3 and opus need a recent libsndfile)."""
    path = check_output(path, field, AUDIO_SUFFIXES)
    format_of(path, field)
    return path


def take_paths(path, takes: int) -> list[str]:
    """Where each take goes: ``path`` itself for one, ``NAME-1.wav`` … ``NAME-N.wav`` for N."""
    if takes <= 1:
        return [str(path)]
    path = Path(path)
    return [str(path.with_name(f"{path.stem}-{k}{path.suffix}")) for k in range(1, takes + 1)]


def write_text(path, text: str) -> Path:
    """``text`` written to ``path`` whole or not at all: a temporary file in the same folder,
    then renamed over it (a failed write leaves the old file and no temporary)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    return path


def existing_ancestor(folder: Path) -> Path:
    """The nearest of ``folder`` and its parents that exists (as a file or a folder)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def write_or_keep(write: Callable[[Path], object], path: Path, what: str) -> str | None:
    """``write(path)``. If the file system refuses, write to a spare name next to ``path``, else
    in the working folder, else in the temp folder; returns a note saying where ``what`` went
    (None when ``path`` was written)."""
    try:
        write(path)
        return None
    except (OSError, RuntimeError) as e:  # soundfile's write errors are RuntimeErrors
        reason = getattr(e, "strerror", None) or str(e)
    spare_name = f"{path.stem}.unsaved-{time.strftime('%Y%m%d-%H%M%S')}{path.suffix}"
    for folder in (path.parent, Path.cwd(), Path(tempfile.gettempdir())):
        try:
            write(folder / spare_name)
        except (OSError, RuntimeError):
            continue
        return f"could not write {path} ({reason}); the {what} is kept in {folder / spare_name}"
    raise OutputError(f"could not write {path} ({reason}) nor a spare copy of the {what}")
