"""The speech recogniser's time and memory: one clip of N seconds, per stage (features + audio
encoder + prompt pass, then each greedy decode step on the static KV cache), and the process's
peak RSS over the weights.

Each (config, seconds) runs in a fresh subprocess, so ``ru_maxrss`` is that run's own peak.
Weights are random (no download), so the model never chooses to stop: every run decodes exactly
``--tokens`` tokens (the end tokens are taken away), and a transcript's time is
``prompt_s + tokens × step_ms``. ``tiny`` is the fixture checkpoint; ``real`` is
Qwen3-ASR-0.6B's dims from tests/fixtures/aligner/real-manifest.json (unverified against the
official files; the vocabulary head sized like the aligner's text vocabulary, 152064);
``medium`` is those widths with a quarter of the layers.

    python bench/bench_asr.py --config tiny medium --seconds 5 20
    python bench/bench_asr.py --config real --seconds 20 --dtype bf16 --device cuda
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench_aligner import maxrss_mb  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "aligner"
REAL_VOCAB = 152064


def config_for(name: str) -> dict:
    """``config.json`` of the chosen size (the tiny ASR's with the real dims where asked)."""
    tiny = json.loads((FIXTURE / "tiny-asr" / "config.json").read_text(encoding="utf-8"))
    if name == "tiny":
        return tiny
    real = json.loads((FIXTURE / "real-manifest.json").read_text(encoding="utf-8"))
    dims = real["Qwen/Qwen3-ASR-0.6B"]["config"]
    text = {k: v for k, v in dims["text_config"].items() if k != "tie_word_embeddings"}
    thinker = dict(tiny["thinker_config"])
    thinker["audio_config"] = {**tiny["thinker_config"]["audio_config"], **dims["audio_config"]}
    tiny_text = tiny["thinker_config"]["text_config"]
    thinker["text_config"] = {**tiny_text, **text, "vocab_size": REAL_VOCAB, "rms_norm_eps": 1e-6,
                              "rope_theta": 1000000.0,
                              "rope_scaling": {**tiny_text["rope_scaling"],
                                               "mrope_section": [24, 20, 20]}}
    if name == "medium":
        thinker["audio_config"]["encoder_layers"] //= 4
        thinker["text_config"]["num_hidden_layers"] //= 4
    return {**tiny, "thinker_config": thinker}


def build(name: str, device: str, dtype: torch.dtype):
    """A SpeechRecognizer of size ``name`` with random weights (the fixture's tokenizer)."""
    from fish_core.hearing.asr import SpeechRecognizer
    from fish_core.hearing.audio_encoder import sinusoids
    from fish_core.hearing.checkpoint import load_thinker
    from fish_core.hearing.config import HearingConfig
    from fish_core.hearing.features import FeatureConfig
    from fish_core.hearing.thinker import Thinker
    from fish_core.hearing.tokenizer import HearingTokenizer

    folder = FIXTURE / "tiny-asr"
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
    recognizer = SpeechRecognizer(model, HearingTokenizer.from_dir(folder),
                                  FeatureConfig.from_dir(folder))
    recognizer.eos_ids = (-1,)  # random weights: decode the asked number of tokens, always
    return recognizer


def measure(name: str, seconds: float, tokens: int, device: str, dtype_name: str,
            repeats: int) -> dict:
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    torch.manual_seed(0)
    start = time.perf_counter()
    recognizer = build(name, device, dtype)
    built = time.perf_counter() - start
    weights = sum(p.numel() * p.element_size() for p in recognizer.model.parameters())
    rss_built = maxrss_mb()
    wave = torch.randn(int(seconds * recognizer.sample_rate)) * 0.1

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    prompt, whole = [], []
    for _ in range(repeats + 1):  # the first run warms up
        sync()
        t0 = time.perf_counter()
        first = recognizer.decode([wave], [""], [None], max_new_tokens=1)
        sync()
        t1 = time.perf_counter()
        decoded = recognizer.decode([wave], [""], [None], max_new_tokens=tokens)
        sync()
        t2 = time.perf_counter()
        prompt.append(t1 - t0)
        whole.append(t2 - t1)
    assert len(decoded.tokens[0]) == tokens
    prompt_s, whole_s = statistics.median(prompt[1:]), statistics.median(whole[1:])
    step_ms = 1000 * (whole_s - prompt_s) / max(1, tokens - 1)
    step_ms = step_ms if step_ms > 0 else None  # lost in the noise of a busy machine
    out = {"config": name, "device": device, "dtype": dtype_name, "seconds": seconds,
           "prompt_tokens": int(first.prompt_ids.shape[1]), "tokens": tokens,
           "params_m": round(weights / dtype.itemsize / 1e6, 1),
           "weights_mb": round(weights / 2**20, 1), "build_s": round(built, 2),
           "prompt_s": round(prompt_s, 3),
           "step_ms": round(step_ms, 2) if step_ms else None,
           "tokens_per_s": round(1000 / step_ms, 1) if step_ms else None,
           "transcribe_s": round(whole_s, 3), "rtf": round(whole_s / seconds, 4),
           "peak_rss_mb": round(maxrss_mb(), 1), "rss_after_build_mb": round(rss_built, 1),
           "threads": torch.get_num_threads(), "loadavg": os.getloadavg()[0]}
    if device.startswith("cuda"):
        out["cuda_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", nargs="+", default=["tiny", "medium"],
                        choices=["tiny", "medium", "real"])
    parser.add_argument("--seconds", nargs="+", type=float, default=[5.0, 20.0])
    parser.add_argument("--tokens", type=int, default=48,
                        help="tokens decoded per run (~3 s of English speech per 16)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.one:
        print(json.dumps(measure(args.config[0], args.seconds[0], args.tokens, args.device,
                                 args.dtype, args.repeats)))
        return
    rows = []
    for name in args.config:
        for seconds in args.seconds:
            cmd = [sys.executable, __file__, "--one", "--config", name, "--seconds", str(seconds),
                   "--tokens", str(args.tokens), "--device", args.device, "--dtype", args.dtype,
                   "--repeats", str(args.repeats)]
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
    keys = ["config", "dtype", "seconds", "prompt_tokens", "tokens", "params_m", "prompt_s",
            "step_ms", "tokens_per_s", "rtf", "peak_rss_mb", "weights_mb"]
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
