"""Load S2-Pro weights: safetensors shards listed by ``model.safetensors.index.json``.

The model is built on the ``meta`` device and each tensor is streamed in, cast and placed on
its device one at a time, so peak memory is one copy of the model plus one tensor. Both the HF
names (``text_model.model.*``, ``audio_decoder.*``) and fish-speech's internal names are accepted;
any missing, unexpected or mis-shaped tensor is reported in one error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from .config import ModelConfig
from .model import DualAR

HF_TEXT = "text_model.model."
HF_AUDIO = "audio_decoder."
INDEX_FILE = "model.safetensors.index.json"


class CheckpointError(ValueError):
    """The checkpoint folder is incomplete, or its tensors do not fit the config."""


def to_internal(name: str) -> str:
    """HF tensor name → fish-speech internal name (internal names pass through)."""
    if name.startswith(HF_TEXT):
        return name[len(HF_TEXT):]
    if name.startswith(HF_AUDIO):
        rest = name[len(HF_AUDIO):]
        return rest if rest.startswith("codebook_embeddings.") else "fast_" + rest
    return name


def to_hf(name: str) -> str:
    """Internal name → HF tensor name."""
    if name.startswith("codebook_embeddings."):
        return HF_AUDIO + name
    if name.startswith("fast_"):
        return HF_AUDIO + name[len("fast_"):]
    return HF_TEXT + name


def shard_files(folder: str | Path) -> list[Path]:
    """The safetensors files of a checkpoint folder, all resolved inside that folder."""
    folder = Path(folder).resolve()
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index}: not a valid safetensors index ({e})") from None
        names = sorted(set(weight_map.values()))
    else:
        names = sorted(p.name for p in folder.glob("*.safetensors"))
    if not names:
        raise CheckpointError(f"{folder}: no {INDEX_FILE} and no *.safetensors weights")
    files = []
    for name in names:
        path = (folder / name).resolve()
        if path.parent != folder:
            raise CheckpointError(f"{index}: shard {name!r} points outside the model folder")
        if not path.is_file():
            raise CheckpointError(f"{folder}: shard {name} listed in {INDEX_FILE} is missing")
        files.append(path)
    return files


def iter_tensors(folder: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(stored name, tensor)`` for every tensor of every shard, one at a time."""
    for path in shard_files(folder):
        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                for name in f.keys():
                    yield name, f.get_tensor(name)
        except (OSError, RuntimeError, SafetensorError) as e:
            raise CheckpointError(f"cannot read {path}: {e}") from None


def build_meta(config: ModelConfig, dtype: torch.dtype = torch.bfloat16) -> DualAR:
    """The model with every parameter on the meta device (no memory)."""
    with torch.device("meta"):
        return DualAR(config).to(dtype)


def expected_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def assign(model: nn.Module, name: str, tensor: torch.Tensor) -> None:
    module_name, _, leaf = name.rpartition(".")
    module = model.get_submodule(module_name) if module_name else model
    module._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)


def load_model(folder: str | Path, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.bfloat16, config: ModelConfig | None = None,
               convert: Callable[[str, torch.Tensor], torch.Tensor] | None = None) -> DualAR:
    """Build the Dual-AR model of ``folder`` with weights cast to ``dtype`` on ``device``.

    ``convert(name, tensor)`` may replace a tensor before it is placed (used by quantizers)."""
    folder = Path(folder)
    config = config or ModelConfig.from_file(folder)
    model = build_meta(config, dtype)
    shapes = expected_shapes(model)
    device = torch.device(device)
    seen, unexpected, misshaped = set(), [], []
    for stored, tensor in iter_tensors(folder):
        name = to_internal(stored)
        if name not in shapes or name in seen:
            unexpected.append(stored)
            continue
        if tuple(tensor.shape) != shapes[name]:
            misshaped.append(f"{stored}: {tuple(tensor.shape)}, expected {shapes[name]}")
            seen.add(name)
            continue
        tensor = tensor.to(device=device, dtype=dtype)
        if convert is not None:
            tensor = convert(name, tensor)
        assign(model, name, tensor)
        seen.add(name)
    missing = sorted(to_hf(n) for n in shapes.keys() - seen)
    if missing or unexpected or misshaped:
        lines = [f"{folder}: the weights do not match config.json"]
        for label, items in (("missing", missing), ("unexpected", sorted(unexpected)),
                             ("wrong shape", misshaped)):
            if items:
                lines.append(f"  {label} ({len(items)}): " + ", ".join(items[:20])
                             + (" …" if len(items) > 20 else ""))
        raise CheckpointError("\n".join(lines))
    model.reset_buffers(device)
    return model.eval()
