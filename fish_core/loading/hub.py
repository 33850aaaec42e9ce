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
        return checked_folder(path)
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
        variant = Variant(spec.split("/")[1], spec, REPO_FILES, "a repo you named; size unknown")
    target = models / variant.name
    if is_model_dir(target, codec=True):
        return target
    if not download:
        raise ModelNotFound(f"model {spec!r} is not in {target.parent} and downloading is off")
    return fetch(variant, target)


def checked_folder(path: Path) -> Path:
    """``path``, a folder, when it is an S2 checkpoint folder."""
    if not is_model_dir(path):
        raise ModelNotFound(f"{path} is not an S2 checkpoint folder (needs config.json and "
                            "tokenizer.json, and codec.pth for audio)")
    return path


PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                   "all_proxy")
YOURS = ("pass a checkpoint folder you have (--model FOLDER; `hf download` on a connected "
         "machine makes one), or try the install on the tiny one (--model tests/fixtures/tiny-s2)")


def endpoint() -> str:
    """The Hugging Face endpoint the hub library talks to (``HF_ENDPOINT``)."""
    from huggingface_hub import constants

    return constants.ENDPOINT


def unreachable(url: str, timeout: float = 5.0) -> str | None:
    """Why ``url``'s host cannot be reached (no network, no DNS, refused), or None. One quick
    TCP connection, so an offline machine fails at once instead of after the hub's retries
    (~25 s of them). Behind a proxy nothing is probed: the hub library goes through it."""
    import socket
    from urllib.parse import urlsplit

    if any(os.environ.get(name) for name in PROXY_VARIABLES):
        return None
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return None
    except OSError as e:
        return f"{parts.hostname} cannot be reached ({e.strerror or type(e).__name__})"


def announce(variant: Variant, target: Path, flag: str = "--model") -> str:
    """The line said before a download: what, how big, where, how to stop or avoid it
    (``flag FOLDER``: the option that names a checkpoint folder instead)."""
    at = f" at {variant.revision[:8]}" if variant.revision else ""
    return (f"downloading {variant.name} ({variant.repo_id}{at}: {variant.note}) into {target}; "
            f"Ctrl-C stops it (it resumes next time); {flag} FOLDER uses a checkpoint you "
            "already have")


def fetch(variant: Variant, target: Path, required: tuple[str, ...] = REQUIRED_FILES,
          yours: str = YOURS, flag: str = "--model") -> Path:
    """Download ``variant`` into ``target`` (only its files), said on stderr first. Honours
    ``HF_HUB_OFFLINE``; a failure is one ``ModelNotFound`` line saying how to go on without it
    (``yours``; the hub's own retry warnings are held back). ``required``: the files the
    folder must hold afterwards (an S2 checkpoint's by default); ``flag`` is named in the
    announcement as the way to use a folder instead."""
    import sys

    refuse_download(variant, target, yours)
    print(announce(variant, target, flag), file=sys.stderr, flush=True)
    download(variant, target, yours)
    if not all((target / f).is_file() for f in required):
        raise ModelNotFound(f"{variant.repo_id} downloaded into {target} but it lacks "
                            f"{' / '.join(required)}")
    return target


def could_not(variant: Variant, target: Path) -> str:
    """The start of a failed download's line."""
    return f"could not download {variant.name} ({variant.repo_id}) into {target}"


def refuse_download(variant: Variant, target: Path, yours: str) -> None:
    """Raise ``ModelNotFound`` when ``variant`` is not to be downloaded (a built-in one with no
    reviewed revision) or cannot be (``HF_HUB_OFFLINE``, the hub unreachable)."""
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
            f"HF_HUB_OFFLINE is set, so it cannot be downloaded: {yours}.")
    why = unreachable(endpoint())
    if why:
        raise ModelNotFound(f"{could_not(variant, target)}: {why}. Offline, {yours}; "
                            "HF_HUB_OFFLINE=1 skips the attempt.")


def download(variant: Variant, target: Path, yours: str) -> None:
    """``snapshot_download`` of the variant's files into ``target``; a failure is one
    ``ModelNotFound`` line (the hub's own retry warnings are held back)."""
    import logging

    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import HfHubHTTPError, LocalEntryNotFoundError

    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)  # its "Retrying in 2s [Retry 2/5]" lines
    try:
        snapshot_download(repo_id=variant.repo_id, revision=variant.revision,
                          local_dir=str(target), allow_patterns=list(variant.files))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as e:
        reason = next((line.strip() for line in str(e).splitlines() if line.strip()),
                      type(e).__name__)
        raise ModelNotFound(f"{could_not(variant, target)}: {reason[:200]}. "
                            f"{yours[0].upper()}{yours[1:]}.") from None
    finally:
        hub_log.setLevel(level)
