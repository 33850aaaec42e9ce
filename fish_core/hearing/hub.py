"""Where the listening models come from: a folder you name (``--aligner FOLDER``), or the
official checkpoint downloaded on first use into the models folder (only the files it needs,
at the reviewed commit, announced on stderr first, refused cleanly when offline) — the same
download as S2's (``loading.hub.fetch``)."""

from __future__ import annotations

import os
from pathlib import Path

from ..loading.hub import DEFAULT_MODELS_DIR, ModelNotFound, Variant, fetch

# What a folder needs to load (chat_template.json and generation_config.json are not read).
ALIGNER_FILES = ("config.json", "model.safetensors", "vocab.json", "merges.txt",
                 "tokenizer_config.json", "preprocessor_config.json")
ALIGNER = Variant(
    "qwen3-forced-aligner-0.6b", "Qwen/Qwen3-ForcedAligner-0.6B", ALIGNER_FILES,
    "Apache-2.0 word-timing model, 1.84 GB bf16",
    revision="c7cbfc2048c462b0d63a45797104fc9db3ad62b7")
ALIGNER_YOURS = ("pass an aligner folder you have (--aligner FOLDER; `hf download "
                 "Qwen/Qwen3-ForcedAligner-0.6B --local-dir DIR` on a connected machine makes one)")


def is_hearing_dir(path: Path, files: tuple[str, ...] = ALIGNER_FILES) -> bool:
    return path.is_dir() and all((path / f).is_file() for f in files)


def resolve_aligner(folder: str | os.PathLike | None = None,
                    models_dir: str | os.PathLike | None = None,
                    download: bool = True) -> Path:
    """The aligner checkpoint folder: ``folder`` when given (it must hold the aligner's files),
    else ``models_dir/qwen3-forced-aligner-0.6b``, downloaded there first when missing and
    ``download`` allows (``HF_HUB_OFFLINE=1`` refuses with a clear error, no network tried)."""
    if folder is not None:
        path = Path(folder).expanduser()
        if not is_hearing_dir(path):
            missing = [f for f in ALIGNER_FILES if not (path / f).is_file()]
            raise ModelNotFound(f"aligner folder {path.name or path}: not a Qwen3-ForcedAligner "
                                f"checkpoint (lacks {', '.join(missing) or 'the folder'})")
        return path
    target = Path(models_dir or DEFAULT_MODELS_DIR).expanduser() / ALIGNER.name
    if is_hearing_dir(target):
        return target
    if not download:
        raise ModelNotFound(f"the aligner is not in {target.parent} and downloading is off: "
                            f"{ALIGNER_YOURS}")
    return fetch(ALIGNER, target, required=ALIGNER_FILES, yours=ALIGNER_YOURS, flag="--aligner")
