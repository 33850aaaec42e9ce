"""Serving benchmark over real HTTP (loopback): time to first audio (p50/p95, streamed) and
throughput (audio seconds per second) with 1, 4, 8 and 16 concurrent clients; one shared saved
voice or a distinct voice per client; static vs continuous batching; voice-prefix KV reuse on vs
off. The figures are compared with issue 21's targets at the end.

    python bench/bench_serve.py                               # medium body on the CPU
    python bench/bench_serve.py --clients 1,4 --frames 6 --batching continuous --reuse on
    python bench/bench_serve.py --device cuda --config real --frames 64 --json serve.json

The model has random weights of the ``--config`` size (bench_decode's sizes) with the tiny
fixture's vocabulary, so that the fixture's tokenizer and codec fit it; speed does not depend
on the weights' values. The stop token is taken out of the sampled rows, so every request makes
exactly ``--frames`` frames. Saved voices hold ``--reference-frames`` random reference frames
(~10 s of real reference audio is ~215 frames). The codec is the fixture's (small): decode time
is not the real codec's.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_decode import make_config, random_model  # noqa: E402
from fish_core.codec.model import Codec  # noqa: E402
from fish_core.engine.config import ModelConfig  # noqa: E402
from fish_core.engine.prefix_cache import PrefixCache, megabytes  # noqa: E402
from fish_core.serve.background import BackgroundServer  # noqa: E402
from fish_core.serve.limits import Limits  # noqa: E402
from fish_core.serve.service import Service  # noqa: E402
from fish_core.params import FIRST_FRAMES  # noqa: E402
from fish_core import Synthesizer  # noqa: E402
from fish_core.speech.voices import Voice  # noqa: E402
from fish_core.text.prompt import Reference  # noqa: E402
from fish_core.text.tokenizer import FishTokenizer  # noqa: E402

TINY = ROOT / "tests" / "fixtures" / "tiny-s2"
TEXT = "The quick brown fox jumps over the lazy dog, and then it rests for a while."


BODY = ("dim", "n_layer", "n_head", "n_local_heads", "head_dim", "intermediate_size")


def build_synth(config_name: str, device: str, dtype: torch.dtype) -> Synthesizer:
    """The tiny fixture's config with the body (layers and widths) of ``config_name``."""
    data = ModelConfig.from_file(TINY / "config.json").to_dict()
    if config_name != "fixture":
        sized = make_config(config_name).to_dict()
        for part in ("text_config", "audio_decoder_config"):
            data[part].update({k: sized[part][k] for k in BODY})
        data["audio_decoder_config"]["text_dim"] = sized["audio_decoder_config"]["text_dim"]
    model = random_model(ModelConfig.from_dict(data), device, dtype)
    codec = Codec.from_file(TINY, device, torch.float32 if device == "cpu" else dtype)
    synth = Synthesizer(model, FishTokenizer.from_dir(TINY), codec)
    # Never sample the stop token: every request makes --frames frames.
    engine = synth.runtime.engine
    engine.allowed = [t for t in engine.allowed if t != engine.config.eos_token_id]
    engine._weights = None
    engine.follow_model()
    return synth


def save_voices(folder: Path, synth: Synthesizer, distinct: int, frames: int) -> None:
    """``shared``, ``repeat``, ``warm`` and ``v0 … v{distinct-1}``: random reference codes."""
    c, g = synth.runtime.config, torch.Generator().manual_seed(0)
    for name in ["shared", "repeat", "warm", *[f"v{i}" for i in range(distinct)]]:
        codes = torch.randint(0, c.codebook_size, (c.num_codebooks, frames), generator=g)
        clip = Reference("This is what the reference clip says, more or less, in the voice.",
                         codes)
        Voice(name, [clip], synth.sample_rate, synth.runtime.codec.frame_length).save(
            folder / f"{name}.safetensors")


def post(port: int, body: dict) -> tuple[float, float, int]:
    """One streamed request: (seconds to the first audio byte, seconds to the end, bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1200)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/audio/speech", json.dumps(body),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    first = response.read(1)  # raw PCM: the first byte is audio
    t_first = time.perf_counter() - t0
    rest = response.read()
    t_end = time.perf_counter() - t0
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {first + rest!r}")
    return t_first, t_end, len(first) + len(rest)


def body(frames: int, seed: int, voice: str) -> dict:
    return {"input": TEXT, "voice": voice, "response_format": "pcm", "seed": seed,
            "max_new_tokens": frames, "stream_format": "audio"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def concurrent(server, frames: int, clients: int, per_client: int, shared: bool,
               sample_rate: int) -> dict:
    """``clients`` clients, each sending ``per_client`` streamed requests one after another."""
    port, rows = server.port, server.service.scheduler.batch_sizes
    rows.clear()
    results: list[tuple[float, float, int]] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        for r in range(per_client):
            result = post(port, body(frames, 100 * c + r, "shared" if shared else f"v{c}"))
            with lock:
                results.append(result)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    firsts = [f for f, _, _ in results]
    audio = sum(n for _, _, n in results) / 2 / sample_rate  # 16-bit mono PCM
    return {"ttfa_p50_s": statistics.median(firsts), "ttfa_p95_s": percentile(firsts, 0.95),
            "audio_s_per_s": audio / wall, "wall_s": wall,
            "rows_mean": statistics.mean(rows) if rows else 0.0}


def repeated_voice(server, frames: int, repeats: int) -> float:
    """Median time to first audio of a request in a voice that was just used."""
    times = []
    for i in range(repeats):
        post(server.port, body(frames, 900 + i, "repeat"))
        times.append(post(server.port, body(frames, 950 + i, "repeat"))[0])
    return statistics.median(times)


def run_config(synth, voices: Path, args, batching: str, reuse: bool, clients: list[int],
               report: dict, deadline: float) -> None:
    synth.runtime.engine.prefixes = PrefixCache(megabytes(args.prefix_cache_mb) if reuse else 0)
    limits = Limits(max_new_tokens=max(args.frames, 1024))
    service = Service.standalone(lambda: synth, voices=[voices], limits=limits,
                                 max_batch=max(clients), batching=batching)
    name = f"{batching}, reuse {'on' if reuse else 'off'}"
    out = report["configs"].setdefault(name, {"rows": {}})
    with BackgroundServer(service) as server:
        post(server.port, body(args.frames, 0, "warm"))  # warm-up (a voice not measured)
        out["repeat_ttfa_s"] = repeated_voice(server, args.frames, args.repeats)
        for shared in (True, False):
            for n in clients:
                if time.monotonic() > deadline:
                    report["skipped"].append(f"{name}: {n} clients, "
                                             f"{'shared' if shared else 'distinct'}")
                    continue
                key = f"{n} clients, {'shared voice' if shared else 'distinct voices'}"
                out["rows"][key] = row = concurrent(server, args.frames, n, args.per_client,
                                                    shared, synth.sample_rate)
                print(f"{name} | {key} | {row}", flush=True)
    service.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=["fixture", "tiny", "medium", "real"], default="medium")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, help="default float32 on cpu, bfloat16 on cuda")
    ap.add_argument("--frames", type=int, default=8, help="frames per request")
    ap.add_argument("--reference-frames", type=int, default=100,
                    help="frames of each saved voice's reference")
    ap.add_argument("--repeats", type=int, default=3, help="requests per repeated-voice median")
    ap.add_argument("--clients", default="1,4,8,16")
    ap.add_argument("--per-client", type=int, default=2, help="requests per client")
    ap.add_argument("--batching", default="continuous,static")
    ap.add_argument("--reuse", default="on,off")
    ap.add_argument("--prefix-cache-mb", type=float, default=None)
    ap.add_argument("--max-seconds", type=float, default=1800,
                    help="start no new measurement after this long (what was skipped is listed)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype) if args.dtype else (
        torch.float32 if args.device == "cpu" else torch.bfloat16)
    deadline = time.monotonic() + args.max_seconds
    synth = build_synth(args.config, args.device, dtype)
    clients = [int(c) for c in args.clients.split(",")]
    report = {"config": args.config, "device": args.device, "dtype": str(dtype),
              "frames": args.frames, "reference_frames": args.reference_frames,
              "per_client": args.per_client, "first_chunk_frames": FIRST_FRAMES,
              "configs": {}, "skipped": []}
    with tempfile.TemporaryDirectory() as folder:
        save_voices(Path(folder), synth, max(clients), args.reference_frames)
        for batching in args.batching.split(","):
            for reuse in args.reuse.split(","):
                run_config(synth, Path(folder), args, batching, reuse == "on", clients, report,
                           deadline)
    report["targets"] = targets(report)
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


def targets(report: dict) -> dict:
    """Issue 21's targets, for every configuration that has the rows they need."""
    out = {}
    for name, config in report["configs"].items():
        rows = config["rows"]
        one, eight = rows.get("1 clients, shared voice"), rows.get("8 clients, shared voice")
        if one and eight:
            out[f"{name}: throughput 8 shared / 1 (target >= 4x)"] = (
                eight["audio_s_per_s"] / one["audio_s_per_s"])
            out[f"{name}: TTFA p50 8 shared / 1 (target <= 2x)"] = (
                eight["ttfa_p50_s"] / one["ttfa_p50_s"])
    for batching in ("continuous", "static"):
        on, off = (report["configs"].get(f"{batching}, reuse {r}") for r in ("on", "off"))
        if on and off:
            out[f"{batching}: repeated voice first audio sooner with reuse "
                "(target >= 30 %)"] = 1 - on["repeat_ttfa_s"] / off["repeat_ttfa_s"]
    return out


def print_report(report: dict) -> None:
    print(f"\n{report['config']} on {report['device']} ({report['dtype']}), "
          f"{report['frames']} frames per request, {report['per_client']} per client, "
          f"voices of {report['reference_frames']} reference frames, "
          f"first chunk after {report['first_chunk_frames']} frames")
    print("| batching, reuse | clients, voices | TTFA p50 s | TTFA p95 s | audio s/s | "
          "rows at joins |")
    print("|---|---|---|---|---|---|")
    for name, config in report["configs"].items():
        for key, row in config["rows"].items():
            print(f"| {name} | {key} | {row['ttfa_p50_s']:.2f} | {row['ttfa_p95_s']:.2f} | "
                  f"{row['audio_s_per_s']:.3f} | {row['rows_mean']:.1f} |")
    print("| batching, reuse | repeated voice TTFA s |\n|---|---|")
    for name, config in report["configs"].items():
        print(f"| {name} | {config['repeat_ttfa_s']:.3f} |")
    for what, value in report["targets"].items():
        print(f"{what}: {value:.2f}")
    if report["skipped"]:
        print("skipped (--max-seconds):", "; ".join(report["skipped"]))


if __name__ == "__main__":
    main()
