"""Where the speech recogniser comes from: a folder you name (``--asr FOLDER``), or the
official Qwen3-ASR-0.6B downloaded on first use into the models folder, the same way as the
aligner (``hub.py``) and S2 (``loading.hub.fetch``: only the files it needs, at the pinned
commit, announced on stderr first, refused cleanly offline)."""

from __future__ import annotations

import os
from pathlib import Path

from ..loading.hub import DEFAULT_MODELS_DIR, ModelNotFound, Variant, fetch
from .hub import is_hearing_dir

# What a folder needs to load (chat_template.json: the prompt is written by transcript.Prompt).
ASR_FILES = ("config.json", "model.safetensors", "vocab.json", "merges.txt",
             "tokenizer_config.json", "preprocessor_config.json")
ASR = Variant(
    "qwen3-asr-0.6b", "Qwen/Qwen3-ASR-0.6B", ASR_FILES,
    "Apache-2.0 speech recognition, 30 languages, about 1.9 GB bf16",
    revision="5eb144179a02acc5e5ba31e748d22b0cf3e303b0")
ASR_YOURS = ("pass a Qwen3-ASR folder you have (--asr FOLDER; `hf download Qwen/Qwen3-ASR-0.6B "
             "--local-dir DIR` on a connected machine makes one)")


def resolve_asr(folder: str | os.PathLike | None = None,
                models_dir: str | os.PathLike | None = None, download: bool = True) -> Path:
    """The recogniser's checkpoint folder: ``folder`` when given (it must hold the files),
    else ``models_dir/qwen3-asr-0.6b``, downloaded there first when missing and ``download``
    allows (``HF_HUB_OFFLINE=1`` refuses with a clear error, no network tried)."""
    if folder is not None:
        path = Path(folder).expanduser()
        if not is_hearing_dir(path, ASR_FILES):
            missing = [f for f in ASR_FILES if not (path / f).is_file()]
            raise ModelNotFound(f"ASR folder {path.name or path}: not a Qwen3-ASR checkpoint "
                                f"(lacks {', '.join(missing) or 'the folder'})")
        return path
    target = Path(models_dir or DEFAULT_MODELS_DIR).expanduser() / ASR.name
    if is_hearing_dir(target, ASR_FILES):
        return target
    if not download:
        raise ModelNotFound(f"the speech recogniser is not in {target.parent} and downloading "
                            f"is off: {ASR_YOURS}")
    return fetch(ASR, target, required=ASR_FILES, yours=ASR_YOURS, flag="--asr")
