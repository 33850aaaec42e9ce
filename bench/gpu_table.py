"""The GPU table for the README/closing note, in one command (< 8 minutes on one H200):

    python bench/gpu_table.py --json gpu_table.json

Real-size S2-Pro with random weights (speed does not depend on their values; the stop token is
ignored), batch 1, a 256-token prompt, 128 frames, median of 3 interleaved runs per mode:

    bf16   eager / CUDA graph / torch.compile + CUDA graph
    fp8    CUDA graph (quant FP8Linear, fastest path per shape) / compiled
    int8   CUDA graph (torchao int8 weight-only)
    int4   CUDA graph (torchao int4 weight-only, group 128)

Each row: decode frames/s, prefill tokens/s, fast-AR share of a frame, effective GB/s and the
fraction of the bandwidth bound (H200: 4.8 TB/s), time to first audio (a 256-token voice-clone
prompt + 5 frames + their codec decode), peak VRAM, recompiles / graph captures over 128 frames.
Runs that would start after --budget seconds are skipped (and listed as skipped).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_decode  # noqa: E402

RUNS = [  # (quantization, modes)
    ("none", "eager,graph,compiled"),
    ("fp8", "graph,compiled"),
    ("int8", "graph"),
    ("int4", "graph"),
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="real", choices=["tiny", "medium", "real"])
    ap.add_argument("--frames", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bandwidth", type=float, default=4800.0, help="GB/s (H200: 4800)")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds; later runs are skipped")
    ap.add_argument("--json", default="gpu_table.json")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("gpu_table.py needs a CUDA GPU (use bench_decode.py on the CPU)")

    start, rows, skipped = time.perf_counter(), [], []
    for quantization, modes in RUNS:
        if time.perf_counter() - start > args.budget:
            skipped.append(f"{quantization}: {modes}")
            continue
        try:
            report = bench_decode.main([
                "--config", args.config, "--device", "cuda", "--dtype", "bfloat16",
                "--quantization", quantization, "--modes", modes, "--frames", str(args.frames),
                "--repeats", str(args.repeats), "--bandwidth", str(args.bandwidth),
                "--ttfa-frames", "5"])
            rows.append(report)
        except Exception as e:  # a mode this GPU/torchao cannot run: record why, go on
            rows.append({"quantization": quantization, "error": f"{type(e).__name__}: {e}"})
        gc.collect()
        torch.cuda.empty_cache()
    table = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
             "seconds": round(time.perf_counter() - start, 1), "rows": rows, "skipped": skipped}
    Path(args.json).write_text(json.dumps(table, indent=2))
    print("| quant | mode | frames/s | GB/s | of bound | fast-AR share | prefill tok/s | TTFA s |"
          " VRAM GB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['quantization']} | error: {r['error'][:80]} |")
            continue
        for mode, e in r["modes"].items():
            print(f"| {r['quantization']} | {mode} | {e['decode_frames_per_s']} | "
                  f"{e['effective_GB_per_s']} | {e.get('fraction_of_bound')} | "
                  f"{e['fast_ar_share']} | {e['prefill_tokens_per_s']} | "
                  f"{e.get('time_to_first_audio_s')} | {r.get('peak_memory_GB')} |")
    print(f"total {table['seconds']} s; skipped: {skipped or 'none'}")


if __name__ == "__main__":
    main()
