"""The voice library behind the HTTP routes: ``<voices folder>/<name>.safetensors`` files (the
format ``fish_core.speech.voices`` writes, in the folder the ComfyUI Voice Save node uses).

A name is path segments of ``[A-Za-z0-9_\\- ]`` joined by ``/`` (``alice``, ``sailfish/voice_00001``);
it is checked before any file is touched, and the resolved file must lie inside its folder, so no
name can reach outside it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ..speech.voices import Voice, VoiceError
from .requests import ApiError, bad, detail, voice_name

SUFFIX = ".safetensors"


class VoiceLibrary:
    def __init__(self, roots: list[Path]):
        """``roots``: voice folders, searched in order; new voices go into the first."""
        if not roots:
            raise ValueError("a voice library needs at least one folder")
        self.roots = [Path(r) for r in roots]
        self._lock = threading.Lock()  # add / rename / delete one at a time

    def names(self) -> list[str]:
        found: dict[str, None] = {}
        for root in self.roots:
            if not root.is_dir():
                continue
            for folder, dirs, files in os.walk(root):
                dirs.sort()
                for file in sorted(files):
                    if file.endswith(SUFFIX):
                        rel = Path(folder, file).relative_to(root).as_posix()
                        found.setdefault(rel[: -len(SUFFIX)], None)
        return list(found)

    def _inside(self, root: Path, name: str) -> Path:
        path = (root / (name + SUFFIX)).resolve()
        if root.resolve() not in path.parents:
            raise bad("name", f"{name!r} leads outside the voices folder")
        return path

    def find(self, name: str, param: str = "voice") -> Path:
        voice_name(name, param)
        for root in self.roots:
            path = self._inside(root, name)
            if path.is_file():
                return path
        raise ApiError(404, f"{param}: no saved voice named {name!r} (list them at "
                            "GET /v1/audio/voices)", param, "voice_not_found")

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
        self._inside(self.roots[0], name)
        if any(self._inside(root, name).is_file() for root in self.roots):
            raise ApiError(409, f"{param}: a voice named {name!r} exists already", param,
                           "voice_exists")

    def add(self, name: str, voice: Voice, param: str = "name") -> Path:
        with self._lock:
            self.check_free(name, param)
            path = self._inside(self.roots[0], name)
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
            target = self._inside(self.roots[0], new)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, target)
            return target
