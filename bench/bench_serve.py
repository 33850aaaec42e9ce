"""Serving benchmark over real HTTP (loopback): time to the first audio byte, streamed and not,
and throughput with 1, 4 and 8 concurrent clients, one request at a time vs batched.

    python bench/bench_serve.py                       # medium body on the CPU
    python bench/bench_serve.py --device cuda --config real --frames 64 --json serve.json

The model has random weights of the ``--config`` size (bench_decode's sizes) with the tiny
fixture's vocabulary, so that the fixture's tokenizer and codec fit it; speed does not depend
on the weights' values. The stop token is taken out of the sampled rows, so every request makes
exactly ``--frames`` frames. The codec is the fixture's (small): decode time is not the real
codec's.
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
from fish_core.serve.background import BackgroundServer  # noqa: E402
from fish_core.serve.requests import Limits  # noqa: E402
from fish_core.serve.service import Service  # noqa: E402
from fish_core.synthesis.stream import FIRST_FRAMES  # noqa: E402
from fish_core import Synthesizer  # noqa: E402
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
    engine = synth.engine  # never sample the stop token: every request makes --frames frames
    engine.allowed = [t for t in engine.allowed if t != synth.config.eos_token_id]
    engine._weights = None
    engine.follow_model()
    return synth


def post(port: int, body: dict) -> tuple[float, float, int]:
    """One request: (seconds to the first body byte, seconds to the end, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/audio/speech", json.dumps(body),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    first = response.read(1)
    t_first = time.perf_counter() - t0
    rest = response.read()
    t_end = time.perf_counter() - t0
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {first + rest!r}")
    return t_first, t_end, len(first) + len(rest)


def body(frames: int, seed: int, stream: bool) -> dict:
    out = {"input": TEXT, "response_format": "pcm", "seed": seed, "max_new_tokens": frames}
    if stream:
        out["stream_format"] = "audio"
    return out


def first_byte(port: int, frames: int, repeats: int) -> dict:
    out = {}
    post(port, body(frames, 0, False))  # warm-up
    for stream in (False, True):
        times = [post(port, body(frames, i, stream))[0] for i in range(repeats)]
        out["streamed" if stream else "whole"] = statistics.median(times)
    return out


def throughput(server, frames: int, clients: int, per_client: int, sample_rate: int) -> dict:
    port, rounds = server.port, server.service.scheduler.batch_sizes
    rounds.clear()
    results: list[tuple[float, float, int]] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        for r in range(per_client):
            result = post(port, body(frames, 100 * c + r, False))
            with lock:
                results.append(result)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    audio = sum(n for _, _, n in results) / 2 / sample_rate  # 16-bit mono PCM
    return {"requests_per_s": len(results) / wall, "audio_s_per_s": audio / wall,
            "latency_s": statistics.median(t for _, t, _ in results),
            "rows_per_round": statistics.mean(rounds)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=["fixture", "tiny", "medium", "real"], default="medium")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, help="default float32 on cpu, bfloat16 on cuda")
    ap.add_argument("--frames", type=int, default=24, help="frames per request")
    ap.add_argument("--repeats", type=int, default=5, help="requests per first-byte median")
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--per-client", type=int, default=1, help="requests per client")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype) if args.dtype else (
        torch.float32 if args.device == "cpu" else torch.bfloat16)
    synth = build_synth(args.config, args.device, dtype)
    report = {"config": args.config, "device": args.device, "dtype": str(dtype),
              "frames": args.frames, "first_chunk_frames": FIRST_FRAMES, "throughput": {}}
    with tempfile.TemporaryDirectory() as voices:
        for max_batch in (1, max(int(c) for c in args.clients.split(","))):
            limits = Limits(max_new_tokens=max(args.frames, 1024))
            service = Service.standalone(lambda: synth, voices=[Path(voices)], limits=limits,
                                         max_batch=max_batch)
            with BackgroundServer(service) as server:
                if max_batch == 1:
                    report["first_byte_s"] = first_byte(server.port, args.frames, args.repeats)
                for clients in (int(c) for c in args.clients.split(",")):
                    key = f"{clients} clients, max_batch {max_batch}"
                    report["throughput"][key] = throughput(server, args.frames, clients,
                                                           args.per_client, synth.sample_rate)
                    print(key, report["throughput"][key], flush=True)
            service.close()
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


def print_report(report: dict) -> None:
    fb = report["first_byte_s"]
    print(f"\n{report['config']} on {report['device']} ({report['dtype']}), "
          f"{report['frames']} frames per request")
    print(f"time to first audio byte (median): streamed {fb['streamed'] * 1000:.0f} ms "
          f"(first chunk = {report['first_chunk_frames']} frames), whole "
          f"{fb['whole'] * 1000:.0f} ms")
    print("| clients, batching | requests/s | audio s/s | median latency s | rows/round |")
    print("|---|---|---|---|---|")
    for key, row in report["throughput"].items():
        print(f"| {key} | {row['requests_per_s']:.2f} | {row['audio_s_per_s']:.2f} | "
              f"{row['latency_s']:.2f} | {row['rows_per_round']:.1f} |")


if __name__ == "__main__":
    main()
