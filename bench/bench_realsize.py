"""Real-size CPU (or GPU) figures from a checkpoint folder in the real layout (the stand-in of
``bench/make_standin.py``, or the real S2-Pro): per precision, load time and memory, decode
frames/s against the bandwidth bound, time to the first audio chunk, and the codec's speed.

    python bench/bench_realsize.py --model ../realsize/s2-standin --precisions bf16,int8,int4 \\
        --rounds 3 --threads 2 --bandwidth 28 --json ../realsize/realsize.json

Each run is a fresh process (``--one PRECISION``), so every load starts from nothing and the
peak memory is that load's; the precisions alternate, round after round. One run measures:

- ``load_s``: ``load_model`` (read, convert, place); ``rss_before_GB`` (imports done),
  ``load_peak_rss_GB`` (the process's peak after the load), ``load_added_GB`` (peak - before)
  and ``load_added_over_weights`` = that over ``weight_GB`` (the weights' bytes in the chosen
  precision: the goal is at most 1.15, no second copy);
- ``frames_per_s``: ``(n - 1) / (t(frame n) - t(frame 1))`` over ``--frames`` frames (prefill and
  the first frame excluded; the stand-in never stops early), ``bytes_per_frame_GB`` and, with
  ``--bandwidth`` (the GEMV bandwidth of ``bench_cpu.py --kernels``), ``fraction_of_bound``;
- ``first_chunk_s``: ``Synthesizer.stream`` of ``--text`` until its first chunk (prefill,
  ``FIRST_FRAMES`` frames and their codec decode);
- ``codec_decode_rtf``: seconds of codec decode per second of audio, ``--codec-frames`` frames
  of codes (the real codec, fp32 on the CPU), and ``peak_rss_GB`` at the end.

``--load-only`` stops after the load figures (``gpu_first.py``'s ``realsize-load`` stage).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

QUANTIZATION = {"bf16": "none", "bf16-plain": "none", "int8": "int8", "int8-torch": "int8",
                "int4": "int4", "fp8": "fp8"}
TEXT = "Hello there. This is a benchmark of the decode speed at the real size."


def rss_now() -> int:
    """Resident bytes now (Linux /proc; else the peak so far)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return peak_rss()


def peak_rss() -> int:
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def one(args) -> dict:
    """One precision in this process."""
    import torch

    import quant
    from bench_cpu import frame_bytes, frame_rate, text_prompt
    from fish_core.codec.model import Codec
    from fish_core.engine.device import codec_dtypes_for
    from fish_core.engine.rows import generate
    from fish_core.loading.checkpoint import load_model
    from fish_core.params import SamplingParams
    from fish_core.local.synthesizer import Synthesizer
    from fish_core.text.tokenizer import FishTokenizer

    torch.set_num_threads(args.threads)
    if args.one == "bf16-plain":  # nn.Linear, as before packing (quant/packed.py)
        os.environ[quant.packed.ENV] = "0"
    if args.one == "int8-torch":  # torch's int8 kernel, not ours (quant/cpu_gemv.py)
        os.environ[quant.cpu_gemv.ENV] = "0"
    device = torch.device(args.device)
    dtype = torch.bfloat16
    out = {"precision": args.one, "threads": args.threads, "device": str(device),
           "load_avg_1min": round(os.getloadavg()[0], 2)}
    before = rss_now()
    t0 = time.perf_counter()
    model = load_model(args.model, device, dtype, QUANTIZATION[args.one])
    out["load_s"] = round(time.perf_counter() - t0, 2)
    weights = quant.weight_bytes(model)
    out.update(rss_before_GB=round(before / 1e9, 3), weight_GB=round(weights / 1e9, 3),
               weight_bytes=weights,
               load_peak_rss_GB=round(peak_rss() / 1e9, 3),
               rss_after_load_GB=round(rss_now() / 1e9, 3))
    out["load_added_GB"] = round((peak_rss() - before) / 1e9, 3)
    out["load_added_over_weights"] = round((peak_rss() - before) / weights, 3)
    if device.type == "cuda":
        out["vram_GB"] = round(torch.cuda.memory_allocated(device) / 1e9, 3)
    if args.load_only:
        return out

    encode, decode = codec_dtypes_for(device)
    codec = Codec.from_file(args.model, device, encode, decode_dtype=decode)
    synth = Synthesizer(model, FishTokenizer.from_dir(args.model), codec)
    engine = synth.runtime.engine
    prompt = text_prompt(args.model, args.text)
    out["prompt_tokens"] = prompt.shape[1]
    with torch.inference_mode():
        generate(engine, prompt, SamplingParams(max_new_tokens=2), seed=0)  # warm-up
        rates = [frame_rate(engine, prompt, args.frames) for _ in range(args.repeats)]
    fps = statistics.median(r[0] for r in rates)
    nbytes = frame_bytes(model, engine, engine.caches.shape[1])
    out.update(frames=args.frames, frames_per_s=round(fps, 3),
               frames_per_s_runs=[round(r[0], 3) for r in rates],
               prefill_and_first_frame_s=round(statistics.median(r[1] for r in rates), 2),
               bytes_per_frame_GB=round(nbytes / 1e9, 3),
               effective_GB_per_s=round(nbytes * fps / 1e9, 2),
               realtime_factor=round(21.533 / fps, 2))
    if args.bandwidth:
        out["fraction_of_bound"] = round(nbytes * fps / 1e9 / args.bandwidth, 3)

    t0 = time.perf_counter()
    stream = synth.stream(args.text, seed=0, max_new_tokens=args.frames)
    next(iter(stream))
    out["first_chunk_s"] = round(time.perf_counter() - t0, 2)
    stream.close() if hasattr(stream, "close") else None

    codes = torch.randint(0, 1024, (1, codec.num_codebooks, args.codec_frames))
    with torch.inference_mode():
        codec.decode(codes[..., :4])  # warm-up
        t0 = time.perf_counter()
        audio = codec.decode(codes)
        seconds = time.perf_counter() - t0
    out["codec_decode_rtf"] = round(seconds / (audio.shape[-1] / codec.sample_rate), 3)
    out["codec_GB"] = round(quant.weight_bytes(codec) / 1e9, 3)
    out["peak_rss_GB"] = round(peak_rss() / 1e9, 3)
    return out


def summarise(runs: list[dict]) -> dict:
    """Per precision: median / min / max of every numeric field over the alternated runs."""
    table = {}
    for precision in dict.fromkeys(r["precision"] for r in runs):
        mine = [r for r in runs if r["precision"] == precision]
        row = {}
        for key, value in mine[0].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values = [r[key] for r in mine if key in r]
                row[key] = {"median": statistics.median(values), "min": min(values),
                            "max": max(values)}
        table[precision] = row
    return table


def drive(args) -> dict:
    """Alternate fresh processes over the precisions, ``--rounds`` times."""
    runs = []
    precisions = args.precisions.split(",")
    for r in range(args.rounds):
        for precision in precisions[r % len(precisions):] + precisions[: r % len(precisions)]:
            cmd = [sys.executable, __file__, "--one", precision, "--model", args.model,
                   "--threads", str(args.threads), "--frames", str(args.frames),
                   "--repeats", str(args.repeats), "--codec-frames", str(args.codec_frames),
                   "--device", args.device, "--text", args.text]
            cmd += ["--load-only"] if args.load_only else []
            if args.bandwidth:
                cmd += ["--bandwidth", str(args.bandwidth)]
            if args.taskset:
                cmd = ["taskset", "-c", args.taskset] + cmd
            done = subprocess.run(cmd, capture_output=True, text=True)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            if done.returncode or not lines:
                runs.append({"precision": precision, "failed": done.stderr[-2000:]})
            else:
                runs.append(json.loads(lines[-1]))
            print(json.dumps(runs[-1]), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(
                    {"runs": runs, "summary": summarise([x for x in runs if "failed" not in x])},
                    indent=2))
    return {"runs": runs, "summary": summarise([x for x in runs if "failed" not in x])}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint folder in the real layout")
    ap.add_argument("--precisions", default="bf16,int8,int4")
    ap.add_argument("--one", choices=list(QUANTIZATION), help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--taskset", default=None, help="pin each run to these CPUs (e.g. 0 or 0,1)")
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=1, help="decode runs per process")
    ap.add_argument("--codec-frames", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--bandwidth", type=float, default=None, help="GEMV bandwidth, GB/s")
    ap.add_argument("--load-only", action="store_true",
                    help="only the load figures (a folder without tokenizer or codec)")
    ap.add_argument("--json", help="write the runs and the summary here")
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args)), flush=True)
        return None
    return drive(args)


if __name__ == "__main__":
    main()
