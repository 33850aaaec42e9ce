"""The voice library behind the HTTP routes: ``<voices folder>/<name>.safetensors`` files (the
format ``fish_core.speech.voices`` writes, in the folder the ComfyUI Voice Save node uses).

Names, folders and symlinks follow ``fish_core.speech.library`` (the rule the nodes use too):
a name is checked before any file is touched, and the file it reaches must lie inside its
folder, so no name can reach outside it. This module adds the service's side: HTTP errors
(400 for a bad name, 404 unknown, 409 taken, 422 unusable) and one change at a time.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ..speech.library import VoiceFolders, VoiceNameError
from ..speech.voices import Voice, VoiceError
from .requests import ApiError, detail, voice_name


class VoiceLibrary:
    def __init__(self, roots: list[Path]):
        """``roots``: voice folders, searched in order; new voices go into the first."""
        if not roots:
            raise ValueError("a voice library needs at least one folder")
        self.folders = VoiceFolders(roots)
        self.roots = self.folders.roots
        self._lock = threading.Lock()  # add / rename / delete one at a time

    def names(self) -> list[str]:
        return self.folders.names()

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
        path = self.find(name, param)
        try:
            return Voice.load(path, num_codebooks, codebook_size)
        except VoiceError as e:  # its text names the file: say the voice's name instead
            reason = detail(str(e).replace(str(path), "the file"))
            raise ApiError(422, f"{param}: voice {name!r} cannot be used: {reason}",
                           param) from None

    def check_free(self, name: str, param: str = "name") -> None:
        """A valid name that no voice has yet (409 otherwise)."""
        voice_name(name, param)
        self._inside(self.roots[0], name, param)
        if self.folders.find(name, param) is not None:
            raise ApiError(409, f"{param}: a voice named {name!r} exists already", param,
                           "voice_exists")

    def add(self, name: str, voice: Voice, param: str = "name") -> Path:
        with self._lock:
            self.check_free(name, param)
            path = self._inside(self.roots[0], name, param)
            voice.name = name.rsplit("/", 1)[-1]
            return voice.save(path)

    def delete(self, name: str, param: str = "name") -> None:
        with self._lock:
            self.find(name, param).unlink()

    def rename(self, old: str, new: str, old_param: str = "old_name",
               new_param: str = "new_name") -> Path:
        with self._lock:
            source = self.find(old, old_param)
            self.check_free(new, new_param)
            target = self._inside(self.roots[0], new, new_param)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, target)
            return target
