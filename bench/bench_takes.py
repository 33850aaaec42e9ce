"""Takes benchmark: decode frames/s with 1, 2, 4, 8 takes of one prompt decoded together (each
take with its own seed, as ``Synthesizer.tts(takes=N)`` runs them).

    python bench/bench_takes.py --config medium --frames 32 --repeats 5
    python bench/bench_takes.py --config real --device cuda --dtype bfloat16 --json takes.json

Per take count: ``frames_per_s`` (decode steps per second: how fast each take grows) and
``take_frames_per_s`` (frames of audio per second over all takes), the median of --repeats
runs. Random weights (speed does not depend on them); the stop token is ignored, so every take
decodes exactly --frames frames.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_decode import SIZES, make_config, prompt_for, random_model, sync  # noqa: E402
from fish_core.engine.runner import Engine  # noqa: E402
from fish_core.engine.rows import generate  # noqa: E402
from fish_core.params import SamplingParams  # noqa: E402


def decode_fps(engine: Engine, prompt: torch.Tensor, takes: int, frames: int,
               device: torch.device) -> float:
    """Decode steps per second of one run of ``takes`` rows (the prefill excluded: timed from
    the first frame's callback to the last)."""
    stamps = []

    def on_frame(i, n):
        sync(device)
        stamps.append(time.perf_counter())

    generate(engine, [prompt] * takes, SamplingParams(max_new_tokens=frames),
                    seeds=list(range(takes)), on_frame=on_frame, stop_on_eos=False)
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="medium", choices=[*SIZES, "real"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--takes", default="1,2,4,8", help="comma-separated take counts")
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--prompt-length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--compile", action="store_true", help="torch.compile the decode step")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    config = make_config(args.config)
    model = random_model(config, device, dtype)
    engine = Engine(model, compile=args.compile)
    prompt = prompt_for(config, args.prompt_length)
    results = {"config": args.config, "device": str(device), "dtype": args.dtype,
               "frames": args.frames, "repeats": args.repeats, "compile": args.compile,
               "threads": torch.get_num_threads(), "machine": platform.processor() or
               platform.machine(), "takes": {}}
    for takes in [int(t) for t in args.takes.split(",")]:
        decode_fps(engine, prompt, takes, 4, device)  # warm-up (and compile) at this batch
        runs = [decode_fps(engine, prompt, takes, args.frames, device)
                for _ in range(args.repeats)]
        fps = statistics.median(runs)
        results["takes"][takes] = {"frames_per_s": round(fps, 3),
                                   "take_frames_per_s": round(fps * takes, 3),
                                   "frames_per_s_all": [round(r, 3) for r in runs]}
        print(f"takes {takes}: {fps:.2f} frames/s per take, {fps * takes:.2f} take-frames/s "
              f"(median of {args.repeats})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
