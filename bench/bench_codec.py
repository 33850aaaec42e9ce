"""Codec speed and memory: encode/decode real-time factor and peak RSS, whole vs chunked.

Each (operation, duration, mode) runs in a fresh subprocess, so ``ru_maxrss`` is that
measurement's own peak. RTF = wall seconds / audio seconds (below 1 is faster than real time);
CPU s is the process CPU time of the same run (all threads), which other load on the machine
inflates much less than wall time. The load average is recorded with the results.

    python bench/bench_codec.py --config tiny                      # fixture codec (tests/fixtures)
    python bench/bench_codec.py --config real --long-repeats 1     # real size, random weights, fp32
    python bench/bench_codec.py --ckpt /path/to/s2-pro             # a real codec.pth
    python bench/bench_codec.py --precision fp32 fp16 bf16 --snr   # per precision, SNR vs fp32
    python bench/bench_codec.py --first-chunk-check --config real --precision fp16   # on CUDA

``--first-chunk-check`` (``first_chunk_check``): a stream's first chunk eager against its CUDA
graph's replay (equal bit for bit, the next chunks too, where eager's cuDNN algorithms are
deterministic: the graph is captured with deterministic ones; capture failures; ms each),
the Snake op against the eager formula, and ``cudnn.benchmark`` as it was after. On a CPU the
eager path runs both ways (no graph): a dry run.
"""

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from fish_core.codec.model import DEFAULT_CHUNK_FRAMES, Codec, CodecConfig, build_codec  # noqa: E402
from fish_core.engine.device import DTYPES  # noqa: E402


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def random_real_codec(seed: int = 0, device="cpu") -> Codec:
    """Real-size codec with random weights (DAC-like init scale) in fp32 on ``device``."""
    codec = build_codec(CodecConfig(), device="meta").to_empty(device=device)
    gen = torch.Generator(device).manual_seed(seed)
    with torch.no_grad():
        for name, p in codec.named_parameters():
            if name.endswith("alpha") or name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith("gamma"):
                p.fill_(0.01)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02, generator=gen)
    return codec


def load(args) -> Codec:
    if args.ckpt:
        return Codec.from_file(args.ckpt)
    if args.config == "real":
        return random_real_codec()
    fixtures = Path(os.environ.get("SAILFISH_FIXTURES", ROOT / "tests" / "fixtures"))
    return Codec.from_file(fixtures / "tiny-s2")


def worker(args) -> dict:
    """One measurement in this process; prints a JSON line."""
    torch.set_num_threads(args.threads)
    codec = load(args)
    dtype = DTYPES[args.precision[0]]
    codec.set_precision(encode=dtype, decode=dtype)
    if args.compile:
        codec.compile_activations()
    frames = round(args.seconds * codec.sample_rate / codec.frame_length)
    gen = torch.Generator().manual_seed(1234)
    if args.op == "encode":
        t = torch.arange(frames * codec.frame_length) / codec.sample_rate
        data = 0.5 * torch.sin(2 * torch.pi * (100 + 200 * t) * t) + 0.05 * torch.randn(t.shape,
                                                                                        generator=gen)
        run = lambda: codec.encode(data, chunk_frames=args.chunk_frames or None)  # noqa: E731
    else:
        sizes = torch.tensor([codec.config.semantic_codebook_size]
                             + [codec.config.codebook_size] * codec.config.n_codebooks)
        data = (torch.rand(codec.num_codebooks, frames, generator=gen) * sizes[:, None]).long()
        run = lambda: codec.decode(data, chunk_frames=args.chunk_frames or None)  # noqa: E731
    rss_loaded = maxrss_mb()
    snr = None
    if args.snr and dtype != torch.float32:  # this precision's output against fp32's
        ref = load(args)
        out, want = run(), (ref.encode if args.op == "encode" else ref.decode)(
            data, chunk_frames=args.chunk_frames or None)
        if args.op == "encode":
            snr = {"codes_equal_fraction": (out == want).float().mean().item()}
        else:
            noise = (out.double() - want.double()).pow(2).sum().item()
            power = want.double().pow(2).sum().item()
            snr = {"snr_db": 10 * math.log10(power / max(noise, 1e-300))}
        del ref
    times, cpu = [], []
    for _ in range(args.repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        run()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return {"times": times, "cpu": cpu, "rss_loaded_mb": rss_loaded, "rss_peak_mb": maxrss_mb(),
            "frames": frames, "vs_fp32": snr}


def first_chunk_check(codec: Codec, repeats: int = 20) -> dict:
    """The codec's CUDA-side first audio on its device: see the module's docstring."""
    from fish_core.codec.snake import snake_eager, snake_op
    from fish_core.params import FIRST_FRAMES

    device, graphs = codec.device, codec.first_chunk_graphs
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    benchmark = torch.backends.cudnn.benchmark
    gen = torch.Generator().manual_seed(0)
    sizes = torch.tensor([codec.config.semantic_codebook_size]
                         + [codec.config.codebook_size] * codec.config.n_codebooks)
    codes = (torch.rand(1, codec.num_codebooks, 3 * FIRST_FRAMES, generator=gen)
             * sizes[:, None]).long().to(device)

    def stream(graphed: bool) -> torch.Tensor:
        graphs.enabled, state = graphed, {}
        first = codec.decode_chunk(codes[..., :FIRST_FRAMES], state)
        return torch.cat([first, codec.decode_chunk(codes[..., FIRST_FRAMES:], state)], -1)

    def first_chunk_ms(graphed: bool) -> float:
        graphs.enabled, times = graphed, []
        for _ in range(repeats):
            sync()
            start = time.perf_counter()
            codec.decode_chunk(codes[..., :FIRST_FRAMES], {})
            sync()
            times.append(time.perf_counter() - start)
        return round(1000 * statistics.median(times), 3)

    eager = stream(False)
    captured, replayed = stream(True), stream(True)
    timing = {"eager": first_chunk_ms(False), "graphed": first_chunk_ms(True)}
    graphs.enabled = True
    x = torch.randn(1, 64, 8192, generator=gen).to(device, codec.decode_dtype) * 3
    alpha = (torch.rand(1, 64, 1, generator=gen) + 0.05).to(device, codec.decode_dtype)
    inverse = (alpha.float() + 1e-9).reciprocal().to(codec.decode_dtype)
    exact = snake_eager(x.double(), alpha.double(), inverse.double())
    errors = {name: ((y.double() - exact).abs().max() / exact.abs().max()).item()
              for name, y in (("op", snake_op(x, alpha, inverse)),
                              ("eager", snake_eager(x, alpha, inverse)))}
    return {"device": str(device), "dtype": str(codec.decode_dtype),
            "graphs": [list(map(str, key)) for key in graphs.graphs],
            "failures": {str(key): why for key, why in graphs.failures.items()},
            "graphed_equals_eager": torch.equal(captured, eager) and torch.equal(replayed, eager),
            "graphed_max_diff": max((captured - eager).abs().max().item(),
                                    (replayed - eager).abs().max().item()),
            "first_chunk_ms": timing, "snake_error_vs_fp64": errors,
            "cudnn_benchmark_restored": torch.backends.cudnn.benchmark == benchmark}


def measure(args, op: str, seconds: float, chunk_frames: int, repeats: int,
            precision: str = "fp32") -> dict:
    cmd = [sys.executable, __file__, "--worker", "--op", op, "--seconds", str(seconds),
           "--chunk-frames", str(chunk_frames), "--repeats", str(repeats),
           "--threads", str(args.threads),
           "--config", args.config, "--precision", precision]
    cmd += ["--ckpt", args.ckpt] if args.ckpt else []
    cmd += ["--snr"] * args.snr + ["--compile"] * args.compile
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    median = statistics.median(result["times"])
    return {"op": op, "seconds": seconds, "precision": precision, "vs_fp32": result["vs_fp32"],
            "mode": f"chunk {chunk_frames}" if chunk_frames else "whole",
            "repeats": repeats, "median_s": median, "rtf": median / seconds,
            "median_cpu_s": statistics.median(result["cpu"]), "load_avg": os.getloadavg()[0],
            "peak_rss_mb": result["rss_peak_mb"],
            "activation_mb": result["rss_peak_mb"] - result["rss_loaded_mb"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=("tiny", "real"), default="tiny")
    parser.add_argument("--ckpt",
                        help="folder or codec.pth of a real checkpoint (overrides --config)")
    parser.add_argument("--seconds", type=float, nargs="+", default=[10.0, 60.0])
    parser.add_argument("--chunk-frames", type=int, default=DEFAULT_CHUNK_FRAMES,
                        help="chunk size of the chunked mode (0 = whole)")
    parser.add_argument("--modes", nargs="+", choices=("whole", "chunked"),
                        default=["whole", "chunked"])
    parser.add_argument("--ops", nargs="+", choices=("encode", "decode"),
                        default=["encode", "decode"])
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs per measurement (median)")
    parser.add_argument("--long-repeats", type=int,
                        help="repeats for durations over 30 s (default --repeats)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--precision", nargs="+", choices=tuple(DTYPES), default=["fp32"],
                        help="codec precisions to run (encode and decode alike)")
    parser.add_argument("--snr", action="store_true",
                        help="also the decode's SNR / encode's equal codes against fp32")
    parser.add_argument("--compile", action="store_true", help="codec.compile_activations()")
    parser.add_argument("--first-chunk-check", action="store_true",
                        help="first_chunk_check on --device (the first --precision)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--op", choices=("encode", "decode"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.first_chunk_check:
        codec = load(args).to(args.device)
        dtype = DTYPES[args.precision[0]]
        codec.set_precision(decode=dtype)
        print(json.dumps(first_chunk_check(codec), indent=1))
        return
    if args.worker:
        args.seconds = args.seconds[0]
        args.precision = args.precision[:1]
        print(json.dumps(worker(args)))
        return

    rows = []
    print(f"{'op':7} {'prec':>5} {'audio':>6} {'mode':>9} {'n':>2} {'median s':>9} {'RTF':>7} "
          f"{'CPU s':>8} {'peak RSS MB':>12} {'activ. MB':>10} {'load':>5}  vs fp32")
    for seconds in args.seconds:
        repeats = args.long_repeats if args.long_repeats and seconds > 30 else args.repeats
        for op in args.ops:
            for mode in args.modes:
                for precision in args.precision:
                    row = measure(args, op, seconds, args.chunk_frames if mode == "chunked" else 0,
                                  repeats, precision)
                    rows.append(row)
                    print(f"{op:7} {precision:>5} {seconds:5.0f}s {row['mode']:>9} {repeats:2d} "
                          f"{row['median_s']:9.3f} {row['rtf']:7.3f} {row['median_cpu_s']:8.2f} "
                          f"{row['peak_rss_mb']:12.0f} {row['activation_mb']:10.0f} "
                          f"{row['load_avg']:5.1f}  {row['vs_fp32'] or ''}", flush=True)
    if args.json:
        meta = {"config": args.ckpt or args.config, "threads": args.threads,
                "torch": torch.__version__}
        Path(args.json).write_text(json.dumps({"meta": meta, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
