"""Where checkpoints and voices live: ComfyUI model folders, honouring extra_model_paths.yaml.

* ``fish_speech`` (default ``models/fish_speech``): one sub-folder per checkpoint. Checkpoints in
  the ``tts``/``TTS`` folders other TTS packs use are listed too. Downloads go into the first
  ``fish_speech`` folder.
* ``fish_speech_voices`` (default ``models/fish_speech_voices``): voice ``.safetensors`` files.

Only names listed here are ever resolved, so a combo value can never reach outside these
folders. Without ComfyUI (scripts) the folders are fish_core's model cache and a ``voices``
folder next to it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..fish_core.loading import hub
from ..fish_core.speech import library
from ..fish_core.speech.library import SUFFIX, VoiceFolders
from . import host

MODELS = "fish_speech"
VOICES = "fish_speech_voices"
SHARED_MODELS = ("tts", "TTS")  # folder names other TTS packs register
DOWNLOAD = " (download)"  # combo suffix of a variant that is fetched when the loader runs
MAX_NAME = 100  # characters of a voice name or a file name part typed into a node
STANDALONE = {MODELS: hub.DEFAULT_MODELS_DIR, VOICES: hub.DEFAULT_MODELS_DIR.parent / "voices"}


def register_folders() -> None:
    """Add our folders to ComfyUI (after any extra_model_paths.yaml entries for them)."""
    folder_paths = host.module("folder_paths")
    if folder_paths is not None:
        for name in (MODELS, VOICES):
            folder_paths.add_model_folder_path(name, os.path.join(folder_paths.models_dir, name))


def roots(name: str) -> list[Path]:
    folder_paths = host.module("folder_paths")
    if folder_paths is None:  # a plain script: our own folders only, no other pack's
        return [STANDALONE[name]] if name in STANDALONE else []
    try:
        return [Path(p) for p in folder_paths.get_folder_paths(name)]
    except KeyError:  # a folder name nobody registered
        return []


def model_roots() -> list[Path]:
    found = roots(MODELS) + [p for name in SHARED_MODELS for p in roots(name)]
    folder_paths = host.module("folder_paths")
    if folder_paths is not None:
        found += [Path(folder_paths.models_dir, name) for name in SHARED_MODELS]
    unique, seen = [], set()
    for root in found:
        key = os.path.normcase(os.path.realpath(root))
        if key not in seen and root.is_dir():
            seen.add(key)
            unique.append(root)
    return unique


def local_models() -> dict[str, Path]:
    """Checkpoint folders (with a codec) by combo name: ``<folder>`` or ``<folder>/<sub>``."""
    found: dict[str, Path] = {}
    for root in model_roots():
        for child in sorted(p for p in root.iterdir() if p.is_dir()):
            candidates = [child] + sorted(p for p in child.iterdir() if p.is_dir())
            for folder in candidates:
                if hub.is_model_dir(folder, codec=True):
                    found.setdefault(folder.relative_to(root).as_posix(), folder)
    return found


def model_choices() -> list[str]:
    """Local checkpoints first, then the downloadable variants."""
    return list(local_models()) + [name + DOWNLOAD for name in hub.VARIANTS]


def resolve_model(choice: str) -> Path:
    """The checkpoint folder for a combo value; a ``(download)`` variant is fetched now (into
    the first ``fish_speech`` folder) unless it is there already."""
    if choice.endswith(DOWNLOAD) and choice[: -len(DOWNLOAD)] in hub.VARIANTS:
        target = roots(MODELS)[0]
        target.mkdir(parents=True, exist_ok=True)
        return hub.resolve(choice[: -len(DOWNLOAD)], models_dir=target, download=True)
    local = local_models()
    if choice not in local:
        where = ", ".join(str(r) for r in model_roots()) or str(roots(MODELS)[0])
        raise hub.ModelNotFound(
            f"model: {choice!r} is not a checkpoint folder in {where}. Put the folder "
            "(config.json, tokenizer.json, model*.safetensors, codec.pth) there, or pick a "
            "'(download)' entry.")
    return local[choice]


# ---------------------------------------------------------------- voices
def voice_library() -> VoiceFolders:
    """The voices folders, by the rule the HTTP service uses too (``speech.library``: names,
    sub-folders, symlinks only while they stay inside a folder)."""
    return VoiceFolders(roots(VOICES))


def voice_choices() -> list[str]:
    return [name + SUFFIX for name in voice_library().names()]


def resolve_voice(choice: str) -> Path:
    """The file of a Voice Load combo value (looked up by name, no folder scan)."""
    path = None
    if (isinstance(choice, str) and choice.endswith(SUFFIX)
            and library.is_name(choice[: -len(SUFFIX)])):
        path = voice_library().find(choice[: -len(SUFFIX)])
    if path is None:
        where = ", ".join(str(r) for r in roots(VOICES))
        raise FileNotFoundError(f"voice: {choice!r} is not a voice file in {where} "
                                "(save one with Sailfish Voice Save)")
    return path


def voice_name(path: Path) -> str:
    """The combo name of a file saved by ``new_voice_path``."""
    return path.relative_to(roots(VOICES)[0].resolve()).as_posix()


def check_name(value: str, field: str, limit: int = MAX_NAME) -> str:
    """A speaker name typed into a node: a string without control characters (NUL …), each
    ``/`` part at most ``limit`` characters."""
    if not isinstance(value, str):
        raise ValueError(f"{field} must be text, got {type(value).__name__}")
    bad = sorted({repr(ch) for ch in value if ord(ch) < 32 or ord(ch) == 127})
    if bad:
        raise ValueError(f"{field} holds control characters ({', '.join(bad)})")
    longest = max((len(part) for part in value.split("/")), default=0)
    if longest > limit:
        raise ValueError(f"{field} is too long ({longest} characters; at most {limit})")
    return value


def new_voice_path(prefix: str) -> Path:
    """``<voices>/<prefix>_00001.safetensors`` with the next free number; ``prefix`` is a voice
    name by the library's rule (it may hold sub-folders and stays inside the voices folder)."""
    if isinstance(prefix, str):
        prefix = prefix.strip()
    library.check_name(prefix, "filename_prefix", limit=MAX_NAME)
    root = roots(VOICES)[0].resolve()
    target = VoiceFolders([root]).new_path(prefix, "filename_prefix")
    stem = target.name[: -len(SUFFIX)]
    pattern = re.compile(re.escape(stem) + r"_(\d{5})" + re.escape(SUFFIX))
    taken = [int(m.group(1)) for f in (os.listdir(target.parent) if target.parent.is_dir() else [])
             if (m := pattern.fullmatch(f))]
    return target.parent / f"{stem}_{max(taken, default=0) + 1:05d}{SUFFIX}"
