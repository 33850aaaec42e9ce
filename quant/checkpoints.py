"""FP8 checkpoints in the community layout (``drbaph/s2-pro-fp8``, ``AEmotionStudio/…-fp8``).

Layout: ``<name>`` holds float8_e4m3fn codes ``[N, K]`` and ``<name>.scale`` its fp32 ``[N, 1]``
row scales (``<name>`` = ``layers.3.attention.wqkv.weight`` or its HF form
``text_model.model.layers.3.attention.wqkv.weight``); everything else is bf16; ``_buf.*`` entries
(the reference's freqs_cis / causal_mask buffers) are ignored. One ``model.safetensors`` or
shards with an index. A checkpoint is FP8 when one of its tensors is float8_e4m3fn, whatever
its folder is called.

Our extension: the embedding tables (``embeddings``, ``codebook_embeddings``, ``fast_embeddings``)
may be stored the same way (``export_fp8(..., embeddings=True)``), ``[V, D]`` codes and ``[V, 1]``
scales. The community loaders expect them in bf16, so that is not the default.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from . import fish_core
from .convert import Converter, embedding_weights, linear_weights, skipped
from .fp8 import FP8, QuantizationError, quantize_rows

BUFFER_PREFIX = "_buf."
SCALE_SUFFIX = ".scale"
INFO_FILE = "quantization_info.json"
METHOD = "per_row_symmetric_fp8"
COPIED = ("tokenizer*", "special_tokens_map.json", "added_tokens.json", "chat_template*",
          "vocab*", "merges.txt", "generation_config.json", "codec.pth", "codec_config.json",
          "LICENSE*", "README*")


def is_fp8_checkpoint(folder: str | Path) -> bool:
    """Whether any tensor of the checkpoint is float8_e4m3fn (read from the headers only)."""
    ck = fish_core("checkpoint")
    for path in ck.shard_files(folder):
        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                if any(f.get_slice(name).get_dtype() == "F8_E4M3" for name in f.keys()):
                    return True
        except (OSError, RuntimeError, SafetensorError) as e:
            raise ck.CheckpointError(f"cannot read {path}: {e}") from None
    return False


def stored_fp8(folder: str | Path) -> list[str]:
    """Internal names of the tensors stored as float8_e4m3fn (from the headers only)."""
    ck = fish_core("checkpoint")
    return [ck.to_internal(name) for name, (_, dtype) in stored_shapes(folder).items()
            if dtype == "F8_E4M3"]


class Problems:
    """Missing / unexpected / mis-shaped tensors, reported together in one CheckpointError."""

    def __init__(self):
        self.missing, self.unexpected, self.misshaped = [], [], []

    def raise_if_any(self, folder) -> None:
        if not (self.missing or self.unexpected or self.misshaped):
            return
        lines = [f"{folder}: the weights do not match config.json"]
        for label, items in (("missing", sorted(self.missing)),
                             ("unexpected", sorted(self.unexpected)),
                             ("wrong shape or dtype", self.misshaped)):
            if items:
                lines.append(f"  {label} ({len(items)}): " + ", ".join(items[:20])
                             + (" …" if len(items) > 20 else ""))
        raise fish_core("checkpoint").CheckpointError("\n".join(lines))


def load_fp8(folder: str | Path, device, dtype: torch.dtype, converter: Converter, config=None):
    """Build the model of an FP8 checkpoint; every e4m3 weight (a Linear weight or an embedding
    table) goes through ``converter.from_fp8`` with its scale, every other tensor through
    ``converter``. FP8 anywhere else (a norm) is an error."""
    ck = fish_core("checkpoint")
    folder, device = Path(folder), torch.device(device)
    config = config or fish_core("config").ModelConfig.from_file(folder)
    model = ck.build_meta(config, dtype)
    shapes = ck.expected_shapes(model)
    rowwise = {**linear_weights(model), **embedding_weights(model)}  # may be stored as FP8 rows
    seen, plain, problems = set(), set(), Problems()
    codes, scales, scale_names = {}, {}, {}  # weight name → e4m3 codes / scale / stored scale name

    def place(name, tensor):
        ck.assign(model, name, tensor)
        seen.add(name)

    def pair(weight):
        if weight in codes and weight in scales:
            place(weight, converter.from_fp8(weight, codes.pop(weight), scales.pop(weight)))

    for stored, tensor in ck.iter_tensors(folder):
        if stored.startswith(BUFFER_PREFIX):
            continue
        name = ck.to_internal(stored)
        weight = name[: -len(SCALE_SUFFIX)] if name.endswith(SCALE_SUFFIX) else None
        if weight in rowwise:  # a row-scale tensor
            n = rowwise[weight][0]
            if weight in scale_names:
                problems.unexpected.append(stored)
            elif tuple(tensor.shape) not in ((n, 1), (n,)) or not tensor.is_floating_point() \
                    or tensor.dtype == FP8:
                problems.misshaped.append(f"{stored}: {tuple(tensor.shape)} {tensor.dtype}, "
                                          f"expected ({n}, 1) float32")
            elif not bool(torch.isfinite(tensor).all()):
                problems.misshaped.append(f"{stored}: holds inf or NaN")
            else:
                scales[weight] = tensor
                pair(weight)
            scale_names.setdefault(weight, stored)
        elif name not in shapes or name in seen or name in codes:
            problems.unexpected.append(stored)
        elif tuple(tensor.shape) != shapes[name]:
            problems.misshaped.append(f"{stored}: {tuple(tensor.shape)}, expected {shapes[name]}")
            seen.add(name)
        elif tensor.dtype == FP8:
            if name in rowwise:
                codes[name] = tensor
                pair(name)
            else:
                problems.misshaped.append(f"{stored}: float8_e4m3fn, but only Linear weights "
                                          "and embedding tables may be FP8")
                seen.add(name)
        else:
            if name in rowwise:
                plain.add(name)
            place(name, converter(name, tensor.to(device=device, dtype=dtype)))
    for weight in codes:  # e4m3 codes whose scale is missing or was reported as bad
        if weight not in scale_names:
            problems.missing.append(ck.to_hf(weight) + SCALE_SUFFIX)
        seen.add(weight)
    problems.unexpected += [f"{stored} (its weight is not FP8)"
                            for weight, stored in scale_names.items() if weight in plain]
    problems.missing += [ck.to_hf(n) for n in shapes.keys() - seen]
    problems.raise_if_any(folder)
    model.reset_buffers(device)
    return converter.finish(model).eval()


def stored_shapes(folder: str | Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """``{stored name: (shape, safetensors dtype)}`` from the shard headers (no tensor is read)."""
    ck = fish_core("checkpoint")
    out = {}
    for path in ck.shard_files(folder):
        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                for name in f.keys():
                    info = f.get_slice(name)
                    out[name] = (tuple(info.get_shape()), info.get_dtype())
        except (OSError, RuntimeError, SafetensorError) as e:
            raise ck.CheckpointError(f"cannot read {path}: {e}") from None
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
            (self.folder / fish_core("checkpoint").INDEX_FILE).write_text(
                json.dumps(index, indent=2), encoding="utf-8")
        return names


def export_fp8(src: str | Path, dst: str | Path, skip=(), names: str = "hf",
               shard_bytes: int | None = None, embeddings: bool = False) -> dict:
    """Write ``src`` (a bf16 checkpoint folder) to ``dst`` in the community FP8 layout: every
    Linear weight not matched by ``skip`` as e4m3 + ``.scale``, the rest bf16, tensor names
    ``"hf"`` or ``"internal"``; copies config.json, the tokenizer and codec files, and writes
    quantization_info.json. Streams the source: one tensor in flight. Returns the info dict.

    ``embeddings=True`` also stores the embedding tables not matched by ``skip`` that way
    (≈4.57 GB instead of ≈5.08 GB for S2-Pro). Only our loader reads that; the default (bf16
    embeddings) loads in the community loaders too."""
    ck, cfg = fish_core("checkpoint"), fish_core("config")
    src, dst = Path(src), Path(dst)
    if names not in ("hf", "internal"):
        raise QuantizationError(f"names must be 'hf' or 'internal', got {names!r}")
    config = cfg.ModelConfig.from_file(src)
    meta = ck.build_meta(config)
    shapes, linears = ck.expected_shapes(meta), linear_weights(meta)
    targets = {n for n in linears if not skipped(n, skip)}
    tables = {n for n in embedding_weights(meta) if embeddings and not skipped(n, skip)}

    # Check names and shapes from the headers before writing anything.
    problems, seen = Problems(), set()
    for stored, (shape, dtype) in stored_shapes(src).items():
        name = ck.to_internal(stored)
        if stored.startswith(BUFFER_PREFIX):
            continue
        if dtype == "F8_E4M3" or name.endswith(SCALE_SUFFIX):
            raise QuantizationError(f"{src} is already an FP8 checkpoint ({stored}); "
                                    "copy it instead of exporting it again")
        if name not in shapes or name in seen:
            problems.unexpected.append(stored)
        elif shape != shapes[name]:
            problems.misshaped.append(f"{stored}: {shape}, expected {shapes[name]}")
        seen.add(name)
    problems.missing += [ck.to_hf(n) for n in shapes.keys() - seen]
    problems.raise_if_any(src)

    if dst.exists() and any(dst.glob("*.safetensors")):
        raise QuantizationError(f"{dst} already holds *.safetensors; export into a new folder")
    dst.mkdir(parents=True, exist_ok=True)
    key = ck.to_hf if names == "hf" else str
    writer, fp8_params, other_params = ShardWriter(dst, shard_bytes), 0, 0
    for stored, tensor in ck.iter_tensors(src):
        if stored.startswith(BUFFER_PREFIX):
            continue
        name = ck.to_internal(stored)
        if name in targets or name in tables:
            q, scale = quantize_rows(tensor)
            writer.add(key(name), q)
            writer.add(key(name) + SCALE_SUFFIX, scale)
            fp8_params += q.numel()
        else:
            writer.add(key(name), tensor.to(torch.bfloat16))
            other_params += tensor.numel()
    files = writer.close()

    shutil.copy2(src / "config.json", dst / "config.json")
    for pattern in COPIED:
        for path in src.glob(pattern):
            if path.is_file():
                shutil.copy2(path, dst / path.name)
    info = {
        "method": METHOD,
        "weight_dtype": "float8_e4m3fn",
        "scale": "float32 [out_features, 1] = max(abs(row)) / 448 (all-zero rows: 1)",
        "dequantize": "(weight.float() * scale).to(activation dtype)",
        "activation_dtype": "bfloat16",
        "other_tensors": "bfloat16",
        "fp8_embeddings": sorted(n.rpartition(".")[0] for n in tables),
        "tensor_names": names,
        "num_quantized_layers": len(targets),
        "skipped_layers": sorted(n.rpartition(".")[0] for n in linears.keys() - targets),
        "fp8_params": fp8_params,
        "bf16_params": other_params,
        "total_bytes": writer.total,
        "files": files,
        "torch_version": torch.__version__.split("+")[0],
        "tool": "sailfish quant export",
    }
    (dst / INFO_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")
    return info
