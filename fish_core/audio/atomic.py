"""Writing a user's file so that nothing is lost: the content goes to a temporary file in the
same folder, is flushed to the disk, and only then takes the file's name (``os.replace``). A
write that fails (a full disk, a quota, a file-size limit, Ctrl-C) removes its temporary file and
leaves the old file as it was; a reader never sees half a file under the real name.

Every writer of audio, voices, codes, captions, books and JSON goes through ``write_file``.
A failure is a ``WriteError`` (a ``ValueError``: the CLI's one ``error:`` line, a node's error;
``serve`` answers 507 when ``full``) naming the file and the reason in words.
"""

from __future__ import annotations

import errno
import os
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO, Callable

# The errors that mean "the disk cannot take this file": HTTP's 507 Insufficient Storage.
FULL = {errno.ENOSPC: "no space left on the device", errno.EFBIG: "the file is too large "
        "for this file system or the file-size limit"}
if hasattr(errno, "EDQUOT"):
    FULL[errno.EDQUOT] = "the disk quota is exceeded"
TEMP_PREFIX = "."  # a temporary file is hidden: ``.out.wav.k3j9x2.tmp``
TEMP_SUFFIX = ".tmp"
TEMP_BYTES = 16  # what a temporary name adds to the file's name, at most (mkstemp: 8 + dots)
_UMASK_LOCK = threading.Lock()


class WriteError(ValueError):
    """A file could not be written; the old file, if any, is untouched. ``reason`` is in
    words; ``full`` is True for a full disk, a quota or a file-size limit."""

    def __init__(self, path, reason: str, code: int | None = None):
        self.path, self.reason, self.errno = Path(path), reason, code
        self.full = code in FULL
        super().__init__(f"cannot write {path}: {reason}")


def reason_of(error: OSError) -> str:
    """An OSError in words: ``no space left on the device``, ``permission denied``."""
    if error.errno in FULL:
        return FULL[error.errno]
    text = error.strerror or str(error) or type(error).__name__
    return text[:1].lower() + text[1:]


def write_file(path, write: Callable[[BinaryIO], object]) -> Path:
    """``write(f)`` into a temporary file beside ``path``, flushed and synced, then renamed to
    ``path`` (missing folders are made). Returns ``path``. On any failure the temporary file is
    removed, ``path`` keeps its old content, and an OSError becomes a ``WriteError``. A link at
    ``path`` is followed: the file it points to is replaced, the link kept."""
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    temp = None
    try:
        fd, temp = temp_beside(target)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, mode_for(target))
        os.replace(temp, target)
        temp = None
    except OSError as e:
        raise WriteError(path, reason_of(e), e.errno) from None
    finally:
        if temp is not None:
            remove_quietly(temp)
    sync_folder(target.parent)
    return path


def temp_beside(target: Path) -> tuple[int, str]:
    """A new hidden temporary file in ``target``'s folder (made if missing): (fd, its path)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    prefix = TEMP_PREFIX + (target.name if len(target.name.encode()) <= 200 else "sailfish")
    return tempfile.mkstemp(prefix=prefix + ".", suffix=TEMP_SUFFIX, dir=target.parent)


def remove_quietly(temp: str) -> None:
    """Remove a temporary file; one that cannot be removed is left (the write's own error is
    the one to report)."""
    try:
        os.unlink(temp)
    except OSError:
        pass


def write_bytes(path, data: bytes) -> Path:
    """``data`` as the whole of ``path``, atomically (``write_file``)."""
    return write_file(path, lambda f: f.write(data))


def write_text(path, text: str) -> Path:
    """``text`` (UTF-8) as the whole of ``path``, atomically (``write_file``)."""
    return write_bytes(path, text.encode("utf-8"))


def mode_for(path: Path) -> int:
    """The permissions a rewritten file keeps (its old ones), or a new file's (0666 less the
    umask, as ``open`` would give it; ``mkstemp`` makes 0600)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        pass
    return 0o666 & ~umask()


def umask() -> int:
    """The process's umask: read where the system shows it (Linux), else set and restored
    (to the strictest mask meanwhile, so a file another thread makes then is never more open
    than it should be)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def sync_folder(folder: Path) -> None:
    """The rename made durable (the folder's entry synced), where the platform allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
