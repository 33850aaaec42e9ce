"""``python -m quant export SRC_DIR DST_DIR``: write an FP8 checkpoint in the community layout."""

from __future__ import annotations

import argparse
import json

from . import DEFAULT_SKIP, export_fp8


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m quant", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="quantize a bf16 checkpoint folder to per-row FP8")
    ex.add_argument("src", help="bf16 checkpoint folder (config.json + safetensors)")
    ex.add_argument("dst", help="new folder for the FP8 checkpoint")
    ex.add_argument("--skip", action="append", default=None, metavar="PATTERN",
                    help="Linear module name pattern kept in bf16, e.g. fast_output (repeatable; "
                         f"default: {', '.join(DEFAULT_SKIP) or 'none'})")
    ex.add_argument("--names", choices=["hf", "internal"], default="hf",
                    help="tensor names: HF (text_model.model.…) or fish-speech internal")
    ex.add_argument("--shard-mb", type=float, default=None,
                    help="split into shards of at most this many MB (default: one file)")
    ex.add_argument("--fp8-embeddings", action="store_true",
                    help="store the embedding tables as FP8 rows too (about 0.5 GB smaller; only "
                         "Sailfish loads that, the default bf16 tables load in other loaders)")
    args = ap.parse_args(argv)
    skip = DEFAULT_SKIP if args.skip is None else tuple(args.skip)
    shard = int(args.shard_mb * 1e6) if args.shard_mb else None
    info = export_fp8(args.src, args.dst, skip=skip, names=args.names, shard_bytes=shard,
                      embeddings=args.fp8_embeddings)
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
