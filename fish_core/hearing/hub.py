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
    return resolve(ALIGNER, ALIGNER_YOURS, "--aligner", ("aligner folder", "Qwen3-ForcedAligner",
                                                         "the aligner"),
                   folder, models_dir, download)


def resolve(variant: Variant, yours: str, flag: str, names: tuple[str, str, str],
            folder: str | os.PathLike | None, models_dir: str | os.PathLike | None,
            download: bool) -> Path:
    """A listening model's folder: ``folder`` when given (it must hold ``variant.files``), else
    ``models_dir/<variant.name>``, downloaded there first when missing and ``download`` allows.
    ``names``: how errors call the folder, the checkpoint and the model."""
    files = tuple(variant.files)
    folder_name, checkpoint, model = names
    if folder is not None:
        path = Path(folder).expanduser()
        if not is_hearing_dir(path, files):
            missing = [f for f in files if not (path / f).is_file()]
            raise ModelNotFound(f"{folder_name} {path.name or path}: not a {checkpoint} "
                                f"checkpoint (lacks {', '.join(missing) or 'the folder'})")
        return path
    target = Path(models_dir or DEFAULT_MODELS_DIR).expanduser() / variant.name
    if is_hearing_dir(target, files):
        return target
    if not download:
        raise ModelNotFound(f"{model} is not in {target.parent} and downloading is off: "
                            f"{yours}")
    return fetch(variant, target, required=files, yours=yours, flag=flag)
