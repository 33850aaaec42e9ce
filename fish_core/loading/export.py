"""Write an FP8 checkpoint in the community layout (``quant.layout``) from a bf16 one.

    python -m fish_core.loading.export SRC_DIR DST_DIR [--skip fast_output] [--fp8-embeddings] …

Steps: check every stored name and shape against the config (from the headers, before writing
anything), stream the tensors into new shards (Linear weights, and the embedding tables when
asked, as e4m3 + ``.scale``; the rest bf16), copy config, tokenizer and codec files, and write
``quantization_info.json``. One tensor is in flight at a time.
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from .checkpoint import build_meta
from ..engine.config import ModelConfig
from .shards import CheckpointError, ShardWriter, iter_tensors, read_headers
from .siblings import quant
from .tensor_names import to_hf, to_internal
from .weights import StreamedLoad

layout = quant.layout


@dataclass
class Plan:
    """What an export writes: the weights stored as FP8 rows, and how names are spelled."""

    targets: set[str]  # Linear weights to store as e4m3 + scale
    tables: set[str]  # embedding tables to store that way
    skipped: set[str]  # Linear weights kept in bf16
    key: Callable[[str], str]  # internal name → stored name


def export_fp8(src: str | Path, dst: str | Path, skip=(), names: str = "hf",
               shard_bytes: int | None = None, embeddings: bool = False) -> dict:
    """Write ``src`` (a bf16 checkpoint folder) to ``dst`` in the community FP8 layout: every
    Linear weight not matched by ``skip`` as e4m3 + ``.scale``, the rest bf16, tensor names
    ``"hf"`` or ``"internal"``; copies config.json, the tokenizer and codec files, and writes
    quantization_info.json. Returns the info dict.

    ``embeddings=True`` also stores the embedding tables not matched by ``skip`` that way (about
    a tenth smaller for S2-Pro). Only our loader reads that; the default (bf16 embeddings) loads
    in the community loaders too."""
    src, dst = Path(src), Path(dst)
    if names not in ("hf", "internal"):
        raise quant.QuantizationError(f"names must be 'hf' or 'internal', got {names!r}")
    meta = build_meta(ModelConfig.from_file(src))
    check_source(src, meta)
    plan = plan_export(meta, skip, embeddings, to_hf if names == "hf" else str)
    prepare_destination(dst)
    info = write_tensors(src, dst, plan, shard_bytes)
    copy_side_files(src, dst)
    info = layout.export_info(names=names, **info,
                              quantized=[n.rpartition(".")[0] for n in plan.targets],
                              skipped=[n.rpartition(".")[0] for n in plan.skipped],
                              tables=[n.rpartition(".")[0] for n in plan.tables])
    (dst / layout.INFO_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")
    return info


def check_source(src: Path, meta: torch.nn.Module) -> None:
    """Refuse an FP8 source; report every stored name and shape that does not fit ``meta``."""
    load = StreamedLoad(meta, display=to_hf)
    for stored, (shape, dtype) in read_headers(src).items():
        if stored.startswith(layout.BUFFER_PREFIX):
            continue
        name = to_internal(stored)
        if dtype == layout.STORED_DTYPE or layout.weight_of_scale(name):
            raise quant.QuantizationError(f"{src} is already an FP8 checkpoint ({stored}); "
                                          "copy it instead of exporting it again")
        if load.expects(stored, name, shape):
            load.seen.add(name)
    load.finish(f"{src}: the weights do not match config.json", CheckpointError)


def plan_export(meta: torch.nn.Module, skip, embeddings: bool, key) -> Plan:
    linears = set(quant.linear_weights(meta))
    targets = {n for n in linears if not quant.skipped(n, skip)}
    tables = {n for n in quant.embedding_weights(meta)
              if embeddings and not quant.skipped(n, skip)}
    return Plan(targets, tables, linears - targets, key)


def prepare_destination(dst: Path) -> None:
    if dst.exists() and any(dst.glob("*.safetensors")):
        raise quant.QuantizationError(
            f"{dst} already holds *.safetensors; export into a new folder")
    dst.mkdir(parents=True, exist_ok=True)


def write_tensors(src: Path, dst: Path, plan: Plan, shard_bytes: int | None) -> dict:
    """Stream ``src``'s tensors into shards in ``dst``; returns counts for the info file."""
    writer, fp8_params, bf16_params = ShardWriter(dst, shard_bytes), 0, 0
    for stored, tensor in iter_tensors(src):
        if stored.startswith(layout.BUFFER_PREFIX):
            continue
        name = to_internal(stored)
        if name in plan.targets or name in plan.tables:
            for key, part in layout.stored_rows(plan.key(name), tensor):
                writer.add(key, part)
            fp8_params += tensor.numel()
        else:
            writer.add(plan.key(name), tensor.to(torch.bfloat16))
            bf16_params += tensor.numel()
    files = writer.close()
    return {"fp8_params": fp8_params, "bf16_params": bf16_params, "total_bytes": writer.total,
            "files": files}


def copy_side_files(src: Path, dst: Path) -> None:
    """config.json, the tokenizer and codec files (symlinks are copied as the files they name)."""
    shutil.copy2(src / "config.json", dst / "config.json")
    for pattern in layout.COPIED:
        for path in src.glob(pattern):
            if path.is_file():
                shutil.copy2(path, dst / path.name)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m fish_core.loading.export",
                                 description="Write an FP8 checkpoint in the community layout.")
    ap.add_argument("src", help="bf16 checkpoint folder (config.json + safetensors)")
    ap.add_argument("dst", help="new folder for the FP8 checkpoint")
    ap.add_argument("--skip", action="append", default=None, metavar="PATTERN",
                    help="Linear module name pattern kept in bf16, e.g. fast_output (repeatable; "
                         f"default: {', '.join(quant.DEFAULT_SKIP) or 'none'})")
    ap.add_argument("--names", choices=["hf", "internal"], default="hf",
                    help="tensor names: HF (text_model.model.…) or fish-speech internal")
    ap.add_argument("--shard-mb", type=float, default=None,
                    help="split into shards of at most this many MB (default: one file)")
    ap.add_argument("--fp8-embeddings", action="store_true",
                    help="store the embedding tables as FP8 rows too (about 0.5 GB smaller; only "
                         "Sailfish loads that, the default bf16 tables load in other loaders)")
    args = ap.parse_args(argv)
    skip = quant.DEFAULT_SKIP if args.skip is None else tuple(args.skip)
    shard = int(args.shard_mb * 1e6) if args.shard_mb else None
    info = export_fp8(args.src, args.dst, skip=skip, names=args.names, shard_bytes=shard,
                      embeddings=args.fp8_embeddings)
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
