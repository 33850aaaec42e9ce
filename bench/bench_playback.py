"""Live playback benchmark: a ~20 s clip generated with a listening browser (the node's
sender active: per-frame columns, live decode, 16-bit PCM + base64 per chunk, one JSON event
per chunk) and without one (the plain path), runs interleaved, median of --repeats.

    python bench/bench_playback.py                          # tiny fixture checkpoint, CPU
    python bench/bench_playback.py --checkpoint models/s2-pro --device cuda --dtype bf16

The stop token is ignored (as in bench_takes.py), so every run makes exactly the clip's frames.
The fake server's ``send_sync`` serializes each event to JSON on the generating thread, which
is more than ComfyUI's does there (it hands the dict to its event loop), so ``with`` is an
upper bound. Also reported: the seconds spent inside the sender (encoding + sending) per run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fish_core import Synthesizer  # noqa: E402

TEXT = "Live playback benchmark: speech heard while it is generated, chunk after chunk."


def pack():
    """The repository as a package (as ComfyUI imports it), for nodes.playback."""
    spec = importlib.util.spec_from_file_location(
        "sailfish_bench", ROOT / "__init__.py", submodule_search_locations=[str(ROOT)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class JsonServer:
    """A PromptServer stand-in: ``send_sync`` serializes the event as ComfyUI would send it."""

    def __init__(self):
        self.sockets, self.events, self.bytes = {"bench": object()}, 0, 0

    def send_sync(self, event, data, sid=None):
        self.bytes += len(json.dumps({"type": event, "data": data}))
        self.events += 1


def run(synth: Synthesizer, frames: int, playback, listening: bool) -> dict:
    on_chunk, spent, server = None, [0.0], JsonServer()
    if listening:
        sender = playback.PlaybackSender(server, "bench", "7", "p")
        sender.start()

        def on_chunk(samples, rate):
            t = time.perf_counter()
            sender.chunk(samples, rate)
            spent[0] += time.perf_counter() - t

    start = time.perf_counter()
    speech = synth.tts(TEXT, seed=1, max_new_tokens=frames, on_chunk=on_chunk)
    seconds = time.perf_counter() - start
    if listening:
        sender.close("done")
    return {"seconds": seconds, "audio_seconds": speech.waveform.shape[0] / speech.sample_rate,
            "sender_seconds": spent[0], "events": server.events, "bytes": server.bytes}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", default=str(ROOT / "tests" / "fixtures" / "tiny-s2"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--seconds", type=float, default=20.0, help="clip length")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (1: steadier on a shared machine)")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    playback = pack().nodes.playback
    synth = Synthesizer.from_pretrained(args.checkpoint, device=args.device, dtype=args.dtype,
                                        download=False)
    object.__setattr__(synth.runtime.config, "eos_token_id", -1)  # never stop early
    frames = round(args.seconds * synth.sample_rate / synth.runtime.codec.frame_length)
    run(synth, 8, playback, True)  # warm-up (caches, first decode)
    runs = {"without": [], "with": []}
    for _ in range(args.repeats):  # interleaved, so load changes hit both alike
        for name in ("without", "with"):
            runs[name].append(run(synth, frames, playback, name == "with"))
            print(f"{name:>7}: {runs[name][-1]['seconds']:.2f} s", flush=True)
    results = {"checkpoint": Path(args.checkpoint).name, "device": args.device,
               "dtype": args.dtype, "frames": frames, "repeats": args.repeats,
               "threads": torch.get_num_threads(),
               "machine": platform.processor() or platform.machine()}
    for name, done in runs.items():
        results[name] = {
            "seconds_median": round(statistics.median(r["seconds"] for r in done), 3),
            "seconds_all": [round(r["seconds"], 3) for r in done],
            "audio_seconds": round(done[0]["audio_seconds"], 3),
            "sender_seconds_median": round(statistics.median(r["sender_seconds"]
                                                             for r in done), 4),
            "events": done[0]["events"], "json_bytes": done[0]["bytes"]}
    ratio = results["with"]["seconds_median"] / results["without"]["seconds_median"]
    results["with_over_without"] = round(ratio, 4)
    print(f"{frames} frames ({results['with']['audio_seconds']} s of audio): "
          f"without {results['without']['seconds_median']} s, with "
          f"{results['with']['seconds_median']} s (x{ratio:.3f}); sender "
          f"{results['with']['sender_seconds_median']} s for {results['with']['events']} "
          f"events, {results['with']['json_bytes'] / 1e6:.2f} MB of JSON", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
