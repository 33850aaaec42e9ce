"""The voice library behind the HTTP routes: ``<voices folder>/<name>.safetensors`` files (the
format ``fish_core.speech.voices`` writes, in the folder the ComfyUI Voice Save node uses).

Names, folders and symlinks follow ``fish_core.speech.library`` (the rule the nodes use too):
a name is checked before any file is touched, and the file it reaches must lie inside its
folder, so no name can reach outside it. This module adds the service's side: HTTP errors
(400 for a bad name, 404 unknown, 409 taken, 422 unusable), one change at a time, and a cached
listing: walking a folder of 20,000 voices takes seconds, so the names are kept and walked again
only when one of the folders changed (its modification time, checked with one ``stat`` per
folder) or the library itself changed a voice. The routes call ``names`` on an executor thread.

Loaded voices are kept too (``load``: at most ``MEMO_VOICES``, least recently used out first): a
voice file is read once, and again only when it changed (``access.file_stamp``: its size, times
or inode, one ``stat``; a file written in the last seconds is read again), or when the library
added, renamed or deleted a voice.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from pathlib import Path

from ..access import file_stamp
from ..audio.atomic import WriteError
from ..speech.library import VoiceFolders, VoiceNameError
from ..speech.voices import Voice, VoiceError
from .http.errors import ApiError, detail
from .http.fields import voice_name

MEMO_VOICES = 64  # loaded voices kept (a voice is its codes: tens of KiB)


class VoiceLibrary:
    def __init__(self, roots: list[Path]):
        """``roots``: voice folders, searched in order; new voices go into the first."""
        if not roots:
            raise ValueError("a voice library needs at least one folder")
        self.folders = VoiceFolders(roots)
        self.roots = self.folders.roots
        self._lock = threading.Lock()  # add / rename / delete one at a time
        self._listing = threading.Lock()  # one walk at a time; the others wait for its result
        self._listed: list[str] | None = None
        self._listed_folders: list[Path] = []
        self._listed_stamp: tuple = ()
        self.walks = 0  # full walks of the folders (tests check the cache)
        self._loaded: OrderedDict[tuple, tuple[tuple, Voice]] = OrderedDict()
        self.loads = 0  # voice files read (tests check the memo)

    def names(self) -> list[str]:
        """Every voice's name (``speech.library``'s listing), cached until a folder changes."""
        with self._listing:
            if self._listed is None or stamp(self._listed_folders) != self._listed_stamp:
                folders = [folder for root in self.roots for folder in subfolders(root)]
                seen = stamp(folders)  # before the walk: a change during it is seen next time
                self._listed = self.folders.names()
                self._listed_folders, self._listed_stamp = folders, seen
                self.walks += 1
            return list(self._listed)

    def changed(self) -> None:
        """Forget the listing (a voice was added, renamed or deleted here)."""
        with self._listing:
            self._listed = None
            self._loaded.clear()

    def _inside(self, root: Path, name: str, param: str = "name") -> Path:
        try:
            return self.folders.path(root, name, param)
        except VoiceNameError as e:  # its text starts with the field's name
            raise ApiError(400, str(e), param) from None

    def find(self, name: str, param: str = "voice") -> Path:
        voice_name(name, param)
        for root in self.roots:
            self._inside(root, name, param)
        path = self.folders.find(name, param)
        if path is None:
            raise ApiError(404, f"{param}: no saved voice named {name!r} (list them at "
                                "GET /v1/audio/voices)", param, "voice_not_found")
        return path

    def load(self, name: str, param: str = "voice", num_codebooks: int | None = None,
             codebook_size: int | None = None) -> Voice:
        """The saved voice ``name``, from the memo while its file is unchanged. Callers must
        not change the ``Voice`` they get (it is shared)."""
        path = self.find(name, param)
        key, seen = (path, num_codebooks, codebook_size), file_stamp(path)
        with self._listing:
            kept = self._loaded.get(key)
            if seen is not None and kept is not None and kept[0] == seen:
                self._loaded.move_to_end(key)
                return kept[1]
        try:
            voice = Voice.load(path, num_codebooks, codebook_size)
        except VoiceError as e:  # its text names the file: say the voice's name instead
            reason = detail(str(e).replace(str(path), "the file"))
            raise ApiError(422, f"{param}: voice {name!r} cannot be used: {reason}",
                           param) from None
        with self._listing:
            self.loads += 1
            self._loaded[key] = (seen, voice)
            while len(self._loaded) > MEMO_VOICES:
                self._loaded.popitem(last=False)
        return voice

    def check_free(self, name: str, param: str = "name") -> None:
        """A valid name that no voice has yet (409 otherwise)."""
        voice_name(name, param)
        self._inside(self.roots[0], name, param)
        if self.folders.find(name, param) is not None:
            raise ApiError(409, f"{param}: a voice named {name!r} exists already", param,
                           "voice_exists")
        blocked = self.folders.blocked(self.roots[0], name)
        if blocked is not None:
            raise self.taken(name, param, blocked)

    @staticmethod
    def taken(name: str, param: str, why: str) -> ApiError:
        return ApiError(409, f"{param}: {name!r} {why}; pick another name", param,
                        "voice_exists")

    def add(self, name: str, voice: Voice, param: str = "name") -> Path:
        with self._lock:
            self.check_free(name, param)
            path = self._inside(self.roots[0], name, param)
            voice.name = name.rsplit("/", 1)[-1]
            try:
                return voice.save(path)  # atomic: a failed write leaves no file
            except (FileExistsError, NotADirectoryError, IsADirectoryError):  # made meanwhile
                raise self.taken(name, param, "is taken by a file or folder") from None
            except WriteError as e:
                raise not_saved(name, param, e) from None
            finally:
                self.changed()

    def delete(self, name: str, param: str = "name") -> None:
        with self._lock:
            self.find(name, param).unlink()
            self.changed()

    def rename(self, old: str, new: str, old_param: str = "old_name",
               new_param: str = "new_name") -> Path:
        with self._lock:
            source = self.find(old, old_param)
            self.check_free(new, new_param)
            target = self._inside(self.roots[0], new, new_param)
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, target)
            except (FileExistsError, NotADirectoryError, IsADirectoryError):  # made meanwhile
                raise self.taken(new, new_param, "is taken by a file or folder") from None
            finally:
                self.changed()
            return target


def not_saved(name: str, param: str, error: WriteError) -> ApiError:
    """A voice the disk would not take: 507 Insufficient Storage when it is full (or over a
    quota), 409 when the name is taken by a folder meanwhile, else 500; the reason, never the
    server's path."""
    if error.errno in (errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
        return VoiceLibrary.taken(name, param, "is taken by a file or folder")
    status = 507 if error.full else 500
    return ApiError(status, f"{param}: the voice {name!r} could not be saved: {error.reason}",
                    param, "insufficient_storage" if error.full else "voice_not_saved")


def subfolders(root: Path) -> list[Path]:
    """``root`` and every real folder below it (links are not followed: a link that stays
    inside ``root`` leads to a folder listed here anyway)."""
    if not root.is_dir():
        return [root]
    return [root] + [Path(folder, d) for folder, dirs, _ in os.walk(root) for d in dirs
                     if not os.path.islink(os.path.join(folder, d))]


def stamp(folders: list[Path]) -> tuple:
    """What changes when a voice file appears in, or leaves, one of ``folders``."""
    out = []
    for folder in folders:
        try:
            info = os.stat(folder)
            out.append((info.st_mtime_ns, info.st_ino))
        except OSError:
            out.append(None)
    return tuple(out)
