"""Finishing beside other clients (issue 36): a served request of 600 s of ``[pause:…]`` tags
with ``loudness -16``, and another client's small request sent while it runs. Reports how long
the small one took, beside the same big request without loudness, and how much the server
process grew (peak resident memory). Targets: < 5 s, < 4x the wait without loudness, < 1 GiB.

    python bench/bench_finishing.py            # both modes, each in a fresh process
    python bench/bench_finishing.py --mode loudness

The model is the tiny fixture checkpoint (SAILFISH_FIXTURES, as the tests); the answer's length
(600 s of silence at its sample rate) is what finishing costs, not the model.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def post_json(url: str, body: dict) -> int:
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        response.read()
        return response.status


def run(mode: str) -> dict:
    from conftest import fixtures_dir

    from fish_core.local.synthesizer import Synthesizer
    from fish_core.serve.background import BackgroundServer
    from fish_core.serve.service import Service

    synth = Synthesizer.from_pretrained(fixtures_dir() / "tiny-s2", device="cpu", dtype="fp32")
    big = {"text": "[pause:60s]" * 10 + " Ok.", "format": "wav", "seed": 1, "max_new_tokens": 8}
    if mode == "loudness":
        big["loudness"] = -16
    small = {"text": "Ok.", "format": "wav", "seed": 2, "max_new_tokens": 8}
    with tempfile.TemporaryDirectory() as voices:
        service = Service.standalone(lambda: synth, voices=[Path(voices)])
        with BackgroundServer(service) as server:
            url = server.url + "/v1/tts"
            post_json(url, {**small, "loudness": -16})  # warm: model loaded, imports done
            before = peak_rss_mib()
            times = {}

            def post(name, body):
                start = time.perf_counter()
                status = post_json(url, body)
                times[name] = time.perf_counter() - start
                assert status == 200, status

            thread = threading.Thread(target=post, args=("big", big))
            thread.start()
            time.sleep(0.3)  # the big request is on the worker
            post("small", small)
            thread.join()
        service.close()
    return {"mode": mode, "small_s": round(times["small"], 3), "big_s": round(times["big"], 3),
            "growth_mib": round(peak_rss_mib() - before, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("plain", "loudness"))
    args = ap.parse_args()
    if args.mode:
        print(json.dumps(run(args.mode)))
        return
    results = {}
    for mode in ("plain", "loudness"):
        out = subprocess.run([sys.executable, __file__, "--mode", mode], capture_output=True,
                             text=True, check=True, env=os.environ)
        results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        print(results[mode])
    plain, loud = results["plain"]["small_s"], results["loudness"]["small_s"]
    print(f"small request beside 600 s of pauses: {loud:.2f} s with loudness, {plain:.2f} s "
          f"without ({loud / plain:.1f}x; targets < 5 s and < 4x); server grew "
          f"{results['loudness']['growth_mib']:.0f} MiB (target < 1024)")


if __name__ == "__main__":
    main()
