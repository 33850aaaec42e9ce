"""Safetensors checkpoint folders: which files hold the tensors, reading them one tensor at a
time, and writing them back (one file, or numbered shards with an index).

Every ``safe_open`` goes through ``open_shard``, so an unreadable file is reported one way.

Memory: ``safe_open`` maps each file once, and a tensor it returns is a view of that map, so a
tensor kept as stored costs no copy and its pages are resident only once read. A tensor that is
converted (quantized, cast, moved to a GPU) must not come from the map: the pages read for it
would stay resident for as long as any tensor of the same file is alive, a second copy of the
model. ``iter_tensors(folder, mapped=...)`` therefore reads the tensors ``mapped`` refuses with
plain file reads into memory of their own (``read_tensor``), freed once converted.

Shard names come from ``model.safetensors.index.json`` (or the folder's ``*.safetensors``); a
name must be a plain file name in the folder (``../x`` and absolute paths are refused), while
the file itself may be a symlink anywhere, as in a Hugging Face cache snapshot
(``snapshots/<rev>/model.safetensors`` → ``../../blobs/<sha>``).
"""

from __future__ import annotations

import json
import math
import struct
from contextlib import contextmanager, nullcontext
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Callable, Iterator

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


def iter_tensors(folder: str | Path,
                 mapped: Callable[[str, str, tuple[int, ...]], bool] | None = None
                 ) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(stored name, tensor)`` for every tensor of every shard, one at a time.

    ``mapped(name, safetensors dtype, shape)`` says whether a tensor may be a view of the file's
    memory map (None: all may); the others are read into memory of their own
    (``read_tensor``)."""
    for path in shard_files(folder):
        with open_shard(path) as f:
            names = list(f.keys())
            copied = [n for n in names if mapped and not mapped(
                n, f.get_slice(n).get_dtype(), tuple(f.get_slice(n).get_shape()))]
            offsets = data_offsets(path) if copied else {}
            with open(path, "rb") if copied else nullcontext() as raw:
                for name in names:
                    if name in offsets:
                        yield name, read_tensor(raw, f.get_slice(name), *offsets[name], path)
                    else:
                        yield name, f.get_tensor(name)


DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
          "F64": torch.float64, "I8": torch.int8, "U8": torch.uint8, "I16": torch.int16,
          "I32": torch.int32, "I64": torch.int64, "BOOL": torch.bool,
          "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}


def data_offsets(path: Path) -> dict[str, tuple[int, int]]:
    """``{name: (start, end)}``: where each tensor's bytes lie in a safetensors file (its
    header: an 8-byte little-endian length, then JSON). ``safe_open`` has already validated the
    file; offsets that are not as it read them are refused again here."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as fh:
            length = struct.unpack("<Q", fh.read(8))[0]
            if length > size - 8:
                raise CheckpointError(f"cannot read {path}: header larger than the file")
            header = json.loads(fh.read(length))
    except (OSError, struct.error, ValueError) as e:
        raise CheckpointError(f"cannot read {path}: {e}") from None
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = (8 + length + int(o) for o in info["data_offsets"])
        if not 8 + length <= start <= end <= size:
            raise CheckpointError(f"cannot read {path}: {name} lies outside the file")
        out[name] = (start, end)
    return out


def read_tensor(raw, info, start: int, end: int, path: Path) -> torch.Tensor:
    """The tensor described by ``info`` (``safe_open``'s slice: dtype, shape) from bytes
    ``start:end`` of the open file ``raw``, in memory of its own."""
    dtype, shape = DTYPES.get(info.get_dtype()), tuple(info.get_shape())
    if dtype is None:
        raise CheckpointError(f"cannot read {path}: unsupported dtype {info.get_dtype()}")
    nbytes = math.prod(shape) * dtype.itemsize
    if end - start != nbytes:
        raise CheckpointError(f"cannot read {path}: {nbytes} bytes expected, {end - start} stored")
    out = torch.empty(nbytes, dtype=torch.uint8)
    raw.seek(start)
    if nbytes and raw.readinto(out.numpy()) != nbytes:
        raise CheckpointError(f"cannot read {path}: the file ends early")
    return out.view(dtype).reshape(shape)


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
