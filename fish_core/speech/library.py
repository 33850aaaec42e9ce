"""The voice library: saved voices (``<voices folder>/<name>.safetensors``, the file
``speech.voices.Voice.save`` writes) found by name. One rule for the ComfyUI nodes (Voice
Save / Voice Load) and the HTTP service (``/v1/audio/voices``, fish-speech's references), so a
voice saved on one side is named the same way on the other.

**Names.** A name is parts joined by ``/`` (sub-folders): ``alice``, ``sailfish/émile_00001``.
Each part is 1 to ``MAX_PART`` characters (and at most ``MAX_PART_BYTES`` bytes of UTF-8, as
file systems count bytes) of letters and digits of any script
(``str.isalnum``), ``_``, ``-``, ``.`` and space; it does not start with ``.`` (no ``..``, no
hidden files) and does not start or end with a space. The whole name is at most ``MAX_NAME``
characters. No separator other than ``/``, no drive, no control character: a name that passes
is a relative path that stays below its folder. It is checked before any file is touched.

**Folders.** ``VoiceFolders(roots)`` searches its folders in order; new voices go into the
first. The folders themselves are the operator's (ComfyUI's ``fish_speech_voices`` paths,
``serve --voices``) and may be symlinks.

**Symlinks inside a folder** are followed only while they stay inside it: every file a name
reaches, and every sub-folder listed, must resolve (``realpath``) below the folder's own real
path. The service renames and deletes voices on a client's request, so a link out of the folder
would let a client reach files elsewhere; a voices folder kept elsewhere is added as a folder of
its own instead (``extra_model_paths.yaml``: ``fish_speech_voices: /path``, or ``--voices``),
or the whole voices folder is the symlink.
"""

from __future__ import annotations

import os
from pathlib import Path

SUFFIX = ".safetensors"
MAX_PART = 128  # characters of one part (a typed prefix + "_00001" fits)
MAX_NAME = 255  # characters of the whole name
# UTF-8 bytes of one part: file systems take 255 (NAME_MAX counts bytes), the suffix and a
# Voice Save number ("_00001") included
MAX_PART_BYTES = 255 - len(SUFFIX) - len("_00001")
PUNCTUATION = "_-. "
RULE = ("letters, digits, '_', '-', '.' and ' ' (and '/' between folders; no part starting "
        "with '.' or a space)")


class VoiceNameError(ValueError):
    """A voice name that breaks the rule (the message names the field)."""


def check_name(value, field: str = "name", limit: int = MAX_PART) -> str:
    """``value`` if it is a valid voice name; ``VoiceNameError`` naming ``field`` otherwise.
    ``limit``: the longest part (a typed prefix leaves room for its number)."""
    if not isinstance(value, str):
        raise VoiceNameError(f"{field} must be text, got {type(value).__name__}")
    control = sorted({repr(ch) for ch in value if ord(ch) < 32 or ord(ch) == 127})
    if control:
        raise VoiceNameError(f"{field} holds control characters ({', '.join(control)})")
    if not value:
        raise VoiceNameError(f"{field} is empty: name the voice ({RULE})")
    parts = value.split("/")
    _check_length(value, parts, field, limit)
    if any(not part or part.startswith(".") for part in parts):
        raise VoiceNameError(f"{field}: {value!r} must name a file inside the voices folder "
                             "(no empty parts, no part starting with '.')")
    wrong = sorted({ch for ch in value if not (ch.isalnum() or ch in PUNCTUATION or ch == "/")})
    if wrong:
        raise VoiceNameError(f"{field} may hold {RULE}; not {', '.join(map(repr, wrong))}, "
                             f"got {value!r}")
    if any(part.strip() != part for part in parts):
        raise VoiceNameError(f"{field}: no part may start or end with a space, got {value!r}")
    return value


def _check_length(value: str, parts: list[str], field: str, limit: int) -> None:
    """Each part (``parts``: of ``value``, split at '/') at most ``limit`` characters and
    ``MAX_PART_BYTES`` bytes in UTF-8, the whole name at most ``MAX_NAME`` characters."""
    longest = max(len(part) for part in parts)
    if longest > limit or len(value) > MAX_NAME:
        raise VoiceNameError(f"{field} is too long ({max(longest, len(value))} characters; "
                             f"at most {limit} per folder or file name, {MAX_NAME} in all)")
    widest = max(len(part.encode("utf-8", "surrogatepass")) for part in parts)
    if widest > MAX_PART_BYTES:  # file systems count bytes: 255 per name, the suffix included
        raise VoiceNameError(f"{field} is too long for a file name ({widest} bytes in UTF-8; at "
                             f"most {MAX_PART_BYTES} per folder or file name, as the file "
                             f"system takes 255 with {SUFFIX!r} and a number)")


def is_name(value: str) -> bool:
    try:
        check_name(value)
    except VoiceNameError:
        return False
    return True


def inside(root: Path, path: Path) -> bool:
    """Whether ``path`` resolves to a place below ``root``'s real path."""
    return Path(os.path.realpath(root)) in Path(os.path.realpath(path)).parents


class VoiceFolders:
    """Voice files by name in ``roots`` (searched in order; new voices go into the first)."""

    def __init__(self, roots):
        self.roots = [Path(r) for r in roots]

    def names(self) -> list[str]:
        """Every voice's name, first folder first, sorted within a folder; a name found in two
        folders is the first one's. Files whose name breaks the rule, or that lead out of their
        folder, are not listed (no name could reach them)."""
        found: dict[str, None] = {}
        for root in self.roots:
            for name in _walk(root):
                found.setdefault(name, None)
        return list(found)

    def path(self, root: Path, name: str, field: str = "name") -> Path:
        """Where ``name`` lives (or would) in ``root``; ``VoiceNameError`` when it breaks the rule
        or resolves outside ``root``."""
        check_name(name, field)
        path = Path(root, name + SUFFIX)
        if not inside(root, path):
            raise VoiceNameError(f"{field}: {name!r} leads outside the voices folder")
        return path

    def find(self, name: str, field: str = "voice") -> Path | None:
        """The file of ``name`` in the first folder that has it; None when none does."""
        check_name(name, field)
        for root in self.roots:
            path = Path(root, name + SUFFIX)
            if path.is_file() and inside(root, path):
                return path
        return None

    def new_path(self, name: str, field: str = "name") -> Path:
        """Where a new voice ``name`` is saved (the nodes add a number to its file name): in
        the first folder (``VoiceNameError`` when a file stands where a folder must be)."""
        path = self.path(self.roots[0], name, field)
        blocked = self.blocked(self.roots[0], name, file=False)
        if blocked is not None:
            raise VoiceNameError(f"{field}: {name!r} {blocked}; pick another name")
        return path

    def blocked(self, root: Path, name: str, file: bool = True) -> str | None:
        """What keeps a voice ``name`` from being saved in ``root`` (a checked name): a part
        before the last that is a file, not a folder (``victim.safetensors/x``), or (``file``)
        its file name taken by a folder. None when nothing does."""
        parts = name.split("/")
        path = Path(root)
        for i, part in enumerate(parts[:-1]):
            path = path / part
            if not os.path.lexists(path):
                return None
            if not path.is_dir():
                return f"would be saved inside {'/'.join(parts[:i + 1])!r}, which is a file"
        path = path / (parts[-1] + SUFFIX)
        if file and os.path.lexists(path) and not path.is_file():
            return f"would be saved as {name + SUFFIX!r}, which is a folder"
        return None


def _walk(root: Path):
    """Valid names below ``root``, following links only while they stay inside it."""
    if not root.is_dir():
        return
    real_root = os.path.realpath(root)
    above: dict[str, frozenset] = {}  # folder → the real paths of it and the folders above it
    for folder, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        chain = above.get(os.path.dirname(folder), frozenset())
        if real in chain or not (real == real_root or inside(root, Path(folder))):
            dirs[:] = []  # a link out of the folder, or back up into itself (a loop)
            continue
        above[folder] = chain | {real}
        dirs.sort()
        for file in sorted(files):
            if not file.endswith(SUFFIX):
                continue
            path = Path(folder, file)
            name = path.relative_to(root).as_posix()[: -len(SUFFIX)]
            if is_name(name) and path.is_file() and inside(root, path):
                yield name
