"""Output files: checked before any work starts (a typo in ``-o`` must not cost a whole run),
written atomically (``audio.atomic``: a failed write leaves the old file as it was), and a
result that still cannot be written where asked is kept whole elsewhere, said where, never
lost."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Callable

from .audio.atomic import WriteError, reason_of as os_reason, write_bytes, write_text  # noqa: F401
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


def existing_ancestor(folder: Path) -> Path:
    """The nearest of ``folder`` and its parents that exists (as a file or a folder)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def write_or_keep(write: Callable[[Path], object], path: Path, what: str) -> str | None:
    """``write(path)`` (an atomic writer: a failure leaves ``path`` as it was and no partial
    file). If it fails, write a spare copy next to ``path``, else in the working folder, else
    in the temp folder; only a copy written whole is kept. Returns a note saying where ``what``
    went (None when ``path`` was written); an ``OutputError`` when no copy could be written."""
    try:
        write(path)
        return None
    except (OSError, RuntimeError, WriteError) as e:  # soundfile's errors are RuntimeErrors
        reason = reason_of(e)
    spare_name = f"{path.stem}.unsaved-{time.strftime('%Y%m%d-%H%M%S')}{path.suffix}"
    for folder in dict.fromkeys((path.parent, Path.cwd(), Path(tempfile.gettempdir()))):
        spare = folder / spare_name
        try:
            write(spare)
        except (OSError, RuntimeError, WriteError):
            remove(spare)  # a writer that is not atomic may have left part of it
            continue
        return f"cannot write {path}: {reason}; the {what} is kept whole in {spare}"
    raise OutputError(f"cannot write {path}: {reason} (and no spare copy of the {what} could "
                      "be written: nothing was saved)")


def reason_of(error: Exception) -> str:
    """Why a write failed, in words (no repeated path)."""
    if isinstance(error, WriteError):
        return error.reason
    if isinstance(error, OSError):
        return os_reason(error)
    return str(error)


def remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def partial_path(path) -> Path:
    """Where a streamed answer grows until it is whole: ``talk.wav`` → ``talk.partial.wav``."""
    path = Path(path)
    return path.with_name(f"{path.stem}.partial{path.suffix}")


class StreamFile:
    """A streamed answer written to a file as it arrives: under ``partial_path`` (playable while
    it grows; a WAV header holds the length written so far), renamed to ``path`` only when
    ``finish`` says the answer is whole. A stream that fails or is stopped keeps its name
    marked partial (``abandon``), and the old ``path``, if any, is untouched."""

    def __init__(self, path, sample_rate: int, header: Callable[[int, int], bytes] | None):
        self.path, self.partial = Path(path), partial_path(path)
        self.sample_rate, self.header, self.samples = sample_rate, header, 0
        try:
            self.partial.parent.mkdir(parents=True, exist_ok=True)
            self.file = open(self.partial, "wb")
        except OSError as e:
            raise WriteError(self.partial, os_reason(e), e.errno) from None

    def write(self, data: bytes, samples: int) -> None:
        try:
            self.file.write(data)
            self.file.flush()
        except OSError as e:
            raise WriteError(self.partial, os_reason(e), e.errno) from None
        self.samples += samples

    def _close(self) -> None:
        if self.header is not None:  # the real length, so that players read all of it
            self.file.seek(0)
            self.file.write(self.header(self.sample_rate, self.samples))
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()

    def finish(self) -> None:
        """The answer is whole: it takes its name."""
        try:
            self._close()
            os.replace(self.partial, self.path)
        except OSError as e:
            self.abandon()
            raise WriteError(self.path, os_reason(e), e.errno) from None

    def abandon(self) -> str:
        """The answer is not whole: the file keeps its partial name. Returns what it holds."""
        try:
            if not self.file.closed:
                self._close()
        except OSError:
            self.file.close()
        return (f"{self.partial} holds the {self.samples / self.sample_rate:.2f} s streamed "
                f"before it (a partial answer); {self.path} was not written")
