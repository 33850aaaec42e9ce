"""Safetensors checkpoint folders: which files hold the tensors, reading them one tensor at a
time, and writing them back (one file, or numbered shards with an index).

Every ``safe_open`` goes through ``open_shard``, so an unreadable file is reported one way.
Shard names come from ``model.safetensors.index.json`` (or the folder's ``*.safetensors``); a
name must be a plain file name in the folder (``../x`` and absolute paths are refused), while
the file itself may be a symlink anywhere, as in a Hugging Face cache snapshot
(``snapshots/<rev>/model.safetensors`` → ``../../blobs/<sha>``).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Iterator

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

INDEX_FILE = "model.safetensors.index.json"


class CheckpointError(ValueError):
    """The checkpoint folder is incomplete, or its tensors do not fit the config."""


def plain_file_name(name: str) -> bool:
    """Whether ``name`` names a file directly in its folder (no folder part, not ``..``)."""
    if not isinstance(name, str) or name in ("", ".", ".."):
        return False
    return PurePosixPath(name).name == name and PureWindowsPath(name).name == name


def listed_names(folder: Path) -> list[str]:
    """Shard file names from the index, else every ``*.safetensors`` of the folder."""
    index = folder / INDEX_FILE
    if not index.is_file():
        return sorted(p.name for p in folder.glob("*.safetensors"))
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return sorted(set(weight_map.values()))
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{index}: not a valid safetensors index ({e})") from None


def shard_files(folder: str | Path) -> list[Path]:
    """The safetensors files of a checkpoint folder, each named directly inside it."""
    folder = Path(folder).resolve()
    names = listed_names(folder)
    if not names:
        raise CheckpointError(f"{folder}: no {INDEX_FILE} and no *.safetensors weights")
    files = []
    for name in names:
        if not plain_file_name(name):
            raise CheckpointError(f"{folder / INDEX_FILE}: shard {name!r} points outside the "
                                  "model folder (shard names must be plain file names)")
        path = folder / name
        if not path.is_file():  # follows symlinks: a dangling one is missing too
            raise CheckpointError(f"{folder}: shard {name} listed in {INDEX_FILE} is missing")
        files.append(path)
    return files


@contextmanager
def open_shard(path: Path):
    """``safe_open`` on CPU; any failure to read the file becomes one ``CheckpointError``."""
    try:
        with safe_open(str(path.resolve()), framework="pt", device="cpu") as f:
            yield f
    except (OSError, RuntimeError, SafetensorError) as e:
        raise CheckpointError(f"cannot read {path}: {e}") from None


def iter_tensors(folder: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(stored name, tensor)`` for every tensor of every shard, one at a time."""
    for path in shard_files(folder):
        with open_shard(path) as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def read_headers(folder: str | Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """``{stored name: (shape, safetensors dtype)}`` from the shard headers (no tensor is read)."""
    out = {}
    for path in shard_files(folder):
        with open_shard(path) as f:
            for name in f.keys():
                info = f.get_slice(name)
                out[name] = (tuple(info.get_shape()), info.get_dtype())
    return out


class ShardWriter:
    """Collect tensors and write ``model.safetensors`` (or numbered shards + index when the
    tensors exceed ``shard_bytes``)."""

    def __init__(self, folder: Path, shard_bytes: int | None):
        self.folder, self.shard_bytes = folder, shard_bytes
        self.current, self.size, self.files, self.weight_map, self.total = {}, 0, [], {}, 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        nbytes = tensor.numel() * tensor.element_size()
        if self.shard_bytes and self.current and self.size + nbytes > self.shard_bytes:
            self._flush()
        self.current[name] = tensor.contiguous()
        self.size += nbytes
        self.total += nbytes

    def _flush(self) -> None:
        path = self.folder / f"shard-{len(self.files):05d}.tmp"
        save_file(self.current, str(path), metadata={"format": "pt"})
        self.files.append((path, list(self.current)))
        self.current, self.size = {}, 0

    def close(self) -> list[str]:
        """Name the files (``model.safetensors`` or ``model-0000i-of-0000n.safetensors``), write
        the index when there are several; returns the file names."""
        if self.current or not self.files:
            self._flush()
        n, names = len(self.files), []
        for i, (path, keys) in enumerate(self.files):
            name = "model.safetensors" if n == 1 else f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            path.rename(self.folder / name)
            names.append(name)
            self.weight_map.update({k: name for k in keys})
        if n > 1:
            index = {"metadata": {"total_size": self.total}, "weight_map": self.weight_map}
            (self.folder / INDEX_FILE).write_text(json.dumps(index, indent=2), encoding="utf-8")
        return names
