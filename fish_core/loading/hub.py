"""Where checkpoints come from: a local folder, or a Hugging Face repo downloaded into a models
directory with only the files the chosen variant needs.

A built-in variant is downloaded at the commit it was reviewed at (``Variant.revision``, a full
commit sha), never at whatever the repo's main branch holds that day: a repo whose owner (or
an attacker with their token) pushes new files cannot change what Sailfish loads. A variant
with no reviewed revision is not downloaded. A repo id the operator types (CLI, Python) is
theirs to vouch for and downloads at its latest revision."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODELS_DIR = Path(os.environ.get("SAILFISH_MODELS_DIR",
                                         Path.home() / ".cache" / "sailfish" / "models"))
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]


@dataclass(frozen=True)
class Variant:
    name: str
    repo_id: str
    files: tuple[str, ...]  # glob patterns, relative to the repo root
    note: str
    revision: str | None = None  # the reviewed commit (full sha) downloads are pinned to


VARIANTS = {
    v.name: v for v in (
        Variant("s2-pro", "fishaudio/s2-pro",
                ("config.json", "model.safetensors.index.json", "model-*.safetensors",
                 "codec.pth", *TOKENIZER_FILES),
                "official bf16 weights, 11.0 GB (9.1 GB weights + 1.9 GB codec)",
                revision="1de9996b6be38b745688de084d87a5633f714e4e"),
        # No community FP8 checkpoint is offered: none has a reviewed revision. FP8 is
        # `--quantization fp8` on s2-pro (the same per-row e4m3), or a folder you downloaded.
    )
}
# What a repo id typed by the operator downloads: the official layout, or a community one with a
# single model.safetensors and its quantization_info.json (drbaph/s2-pro-fp8).
REPO_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json",
              "model-*.safetensors", "codec.pth", "quantization_info.json", *TOKENIZER_FILES)
NO_FP8_DOWNLOAD = ("FP8 needs no download of its own: --quantization fp8 (the Model Loader's "
                   "quantization: fp8) quantizes s2-pro while it loads; a community FP8 "
                   "checkpoint you trust is a folder (hf download OWNER/REPO --revision COMMIT "
                   "--local-dir DIR) or its repo id")
REQUIRED_FILES = ("config.json", "tokenizer.json")  # and codec.pth for audio


class ModelNotFound(FileNotFoundError):
    """The model is neither a local folder nor downloadable right now."""


def is_model_dir(path: Path, codec: bool = False) -> bool:
    """Whether ``path`` is a checkpoint folder (with ``codec.pth`` too when ``codec``)."""
    files = REQUIRED_FILES + (("codec.pth",) if codec else ())
    return path.is_dir() and all((path / f).is_file() for f in files)


def resolve(spec: str | os.PathLike, models_dir: str | os.PathLike | None = None,
            download: bool = True) -> Path:
    """A local checkpoint folder for ``spec``: a folder path, a variant name (``s2-pro``) or a
    Hugging Face repo id (``owner/name``). Downloads into ``models_dir/<name>`` when needed."""
    path = Path(spec).expanduser()
    if path.is_dir():
        if not is_model_dir(path):
            raise ModelNotFound(f"{path} is not an S2 checkpoint folder (needs config.json and "
                                "tokenizer.json, and codec.pth for audio)")
        return path
    spec = str(spec)
    variant = VARIANTS.get(spec)
    models = Path(models_dir or DEFAULT_MODELS_DIR).expanduser()
    if variant is None:
        if spec.count("/") != 1 or spec.startswith((".", "/")):
            if "/" not in spec and spec not in (".", "..") and is_model_dir(models / spec, True):
                return models / spec  # a folder of the models dir, by its name
            hint = f"; {NO_FP8_DOWNLOAD}" if "fp8" in spec.lower() else ""
            raise ModelNotFound(f"model {spec!r}: no such folder, and not a known variant "
                                f"({', '.join(VARIANTS)}) or a Hugging Face repo id "
                                f"(owner/name){hint}")
        variant = Variant(spec.split("/")[1], spec, REPO_FILES, "custom repo")
    target = models / variant.name
    if is_model_dir(target, codec=True):
        return target
    if not download:
        raise ModelNotFound(f"model {spec!r} is not in {target.parent} and downloading is off")
    return fetch(variant, target)


def fetch(variant: Variant, target: Path) -> Path:
    """Download ``variant`` into ``target`` (only its files). Honours ``HF_HUB_OFFLINE``."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import HfHubHTTPError, LocalEntryNotFoundError

    if VARIANTS.get(variant.name) is variant and not variant.revision:
        raise ModelNotFound(
            f"model {variant.name!r} ({variant.repo_id}): this release pins no reviewed "
            "revision of it, so it is not downloaded automatically. Download a revision you "
            f"trust yourself (hf download {variant.repo_id} --revision COMMIT "
            f"--local-dir {target}), or pick another model.")
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    if offline:
        raise ModelNotFound(
            f"model {variant.name!r} ({variant.repo_id}) is not in {target.parent} and "
            "HF_HUB_OFFLINE is set, so it cannot be downloaded. Download it once online, or "
            "pass a local checkpoint folder.")
    try:
        snapshot_download(repo_id=variant.repo_id, revision=variant.revision,
                          local_dir=str(target), allow_patterns=list(variant.files))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as e:
        raise ModelNotFound(f"could not download {variant.repo_id} into {target}: {e}") from None
    if not is_model_dir(target):
        raise ModelNotFound(f"{variant.repo_id} downloaded into {target} but it lacks "
                            f"{' / '.join(REQUIRED_FILES)}")
    return target

