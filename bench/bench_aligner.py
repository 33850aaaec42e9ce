"""The forced aligner's time and memory: one ``align`` of a clip of N seconds with its words, per
stage (features, audio encoder, text pass + head), and the process's peak RSS over the weights.

Each (config, seconds) runs in a fresh subprocess, so ``ru_maxrss`` is that run's own peak. RTF =
wall seconds / audio seconds. Weights are random (no download): ``tiny`` is the fixture
checkpoint; ``real`` is Qwen3-ForcedAligner-0.6B's dims from tests/fixtures/aligner/
real-manifest.json (0.92 B parameters); ``medium`` is those widths with a quarter of the layers.

    python bench/bench_aligner.py --config tiny medium --seconds 5 20
    python bench/bench_aligner.py --config real --seconds 20 --dtype bf16 --device cuda
    python bench/bench_aligner.py --json out.json
"""

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

import torch  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "aligner"
WORDS_PER_SECOND = 2.5  # conversational English


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def config_for(name: str) -> dict:
    """``config.json`` of the chosen size (the fixture's with the real dims where asked)."""
    tiny = json.loads((FIXTURE / "tiny-aligner" / "config.json").read_text(encoding="utf-8"))
    if name == "tiny":
        return tiny
    real = json.loads((FIXTURE / "real-manifest.json").read_text(encoding="utf-8"))
    dims = real["Qwen/Qwen3-ForcedAligner-0.6B"]["config"]["thinker_config"]
    thinker = dict(tiny["thinker_config"], classify_num=dims["classify_num"])
    thinker["audio_config"] = {**tiny["thinker_config"]["audio_config"], **dims["audio_config"]}
    thinker["text_config"] = {**tiny["thinker_config"]["text_config"], **dims["text_config"],
                              "rope_scaling": {
                                  **tiny["thinker_config"]["text_config"]["rope_scaling"],
                                  "mrope_section": [24, 20, 20]}}
    if name == "medium":
        thinker["audio_config"]["encoder_layers"] //= 4
        thinker["text_config"]["num_hidden_layers"] //= 4
    return {**tiny, "thinker_config": thinker}


def build(name: str, device: str, dtype: torch.dtype):
    """A ForcedAligner of size ``name`` with random weights (the fixture's tokenizer)."""
    from fish_core.hearing.aligner import ForcedAligner
    from fish_core.hearing.audio_encoder import sinusoids
    from fish_core.hearing.checkpoint import load_thinker
    from fish_core.hearing.config import HearingConfig
    from fish_core.hearing.features import FeatureConfig
    from fish_core.hearing.thinker import Thinker
    from fish_core.hearing.tokenizer import HearingTokenizer

    folder = FIXTURE / "tiny-aligner"
    if name == "tiny":
        model = load_thinker(folder, device, dtype)
    else:
        config = HearingConfig.from_dict(config_for(name))
        with torch.device("meta"):
            model = Thinker(config)
        model = model.to_empty(device=device).to(dtype)
        gen = torch.Generator(device).manual_seed(0)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if p.dim() == 1:
                    p.fill_(1.0) if pname.endswith("weight") else p.zero_()
                else:
                    p.copy_(torch.randn(p.shape, generator=gen, device=device)
                            / p[0].numel() ** 0.5)
        model.audio_tower.positions = sinusoids(config.audio.max_source_positions,
                                                config.audio.d_model).to(device)
        model.eval()
    return ForcedAligner(model, HearingTokenizer.from_dir(folder), FeatureConfig.from_dir(folder))


def measure(name: str, seconds: float, device: str, dtype_name: str, repeats: int) -> dict:
    from fish_core.hearing.features import batch_features

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    torch.manual_seed(0)
    start = time.perf_counter()
    aligner = build(name, device, dtype)
    built = time.perf_counter() - start
    weights = sum(p.numel() * p.element_size() for p in aligner.model.parameters())
    rss_built = maxrss_mb()
    sr = aligner.sample_rate
    wave = torch.randn(int(seconds * sr)) * 0.1
    words = [f"word{i % 7}" for i in range(max(1, int(seconds * WORDS_PER_SECOND)))]

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    stages = {"features": [], "encoder": [], "text": [], "total": []}
    for _ in range(repeats + 1):  # the first run warms up
        t0 = time.perf_counter()
        features, mask = batch_features([wave], aligner.features)
        t1 = time.perf_counter()
        with torch.inference_mode():
            audio = aligner.model.encode_audio(features.to(device, dtype), mask.to(device))
            sync()
            t2 = time.perf_counter()
            (result,) = aligner.align_words([wave], [words])
            sync()
        t3 = time.perf_counter()
        for key, value in (("features", t1 - t0), ("encoder", t2 - t1),
                           ("text", (t3 - t2) - (t1 - t0) - (t2 - t1)), ("total", t3 - t2)):
            stages[key].append(value)
    median = {k: statistics.median(v[1:]) for k, v in stages.items()}
    peak = maxrss_mb()
    out = {"config": name, "device": device, "dtype": dtype_name, "seconds": seconds,
           "words": len(words), "audio_tokens": int(audio[0].shape[0]),
           "prompt_tokens": int(result.input_ids.numel()),
           "params_m": round(weights / dtype.itemsize / 1e6, 1),
           "weights_mb": round(weights / 2**20, 1), "build_s": round(built, 2),
           "align_s": round(median["total"], 3), "rtf": round(median["total"] / seconds, 4),
           "features_s": round(median["features"], 4), "encoder_s": round(median["encoder"], 3),
           "text_and_head_s": round(median["text"], 3), "peak_rss_mb": round(peak, 1),
           "rss_after_build_mb": round(rss_built, 1), "threads": torch.get_num_threads(),
           "loadavg": os.getloadavg()[0]}
    if device.startswith("cuda"):
        out["cuda_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", nargs="+", default=["tiny", "medium"],
                        choices=["tiny", "medium", "real"])
    parser.add_argument("--seconds", nargs="+", type=float, default=[5.0, 20.0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.one:
        print(json.dumps(measure(args.config[0], args.seconds[0], args.device, args.dtype,
                                 args.repeats)))
        return
    rows = []
    for name in args.config:
        for seconds in args.seconds:
            cmd = [sys.executable, __file__, "--one", "--config", name, "--seconds", str(seconds),
                   "--device", args.device, "--dtype", args.dtype, "--repeats", str(args.repeats)]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                print(done.stderr[-2000:], file=sys.stderr)
                continue
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    keys = ["config", "dtype", "seconds", "words", "params_m", "align_s", "rtf", "encoder_s",
            "text_and_head_s", "peak_rss_mb", "weights_mb"]
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
