"""Where the speech recogniser comes from: a folder you name (``--asr FOLDER``), or the
official Qwen3-ASR-0.6B downloaded on first use into the models folder, the same way as the
aligner (``hub.py``) and S2 (``loading.hub.fetch``: only the files it needs, at the pinned
commit, announced on stderr first, refused cleanly offline)."""

from __future__ import annotations

import os
from pathlib import Path

from ..loading.hub import Variant
from .hub import resolve

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
    return resolve(ASR, ASR_YOURS, "--asr", ("ASR folder", "Qwen3-ASR", "the speech recogniser"),
                   folder, models_dir, download)
