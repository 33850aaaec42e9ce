"""GPU checks for quant/ (needs CUDA): per-shape FP8 kernel timings, every mode on the tiny
fixture against bf16, and the compiled FP8 decode step. Prints one JSON document.

    python bench/gpu_quant.py --json gpu_checks.json          # ~2-3 min on one H200

Then the speed table (real-size random weights):

    python bench/bench_quant.py --device cuda --config real --frames 64 --repeats 3 \\
        --modes bf16,fp8:dequant,fp8:scaled_mm,fp8:fastest,int8,int4,fp8-dynamic,nvfp4

1. S2-Pro's Linear shapes at batch 1 and 8: bf16 ``F.linear``, FP8 dequant and W8A8
   ``_scaled_mm``, each eager and compiled (µs per call, CUDA events): which path wins per shape.
2. tiny-s2 loaded with each mode: slow-logit error against bf16 and whether it generates.
3. ``Engine(compile=True)`` (and its CUDA graph) on the FP8 dequant model in fp32 activations:
   same greedy codes as eager (in bf16, fused kernels round differently and codes part on near
   ties, whatever the layers; tests/test_quant.py checks the same on CPU).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import quant  # noqa: E402
from fish_core.checkpoint import load_model  # noqa: E402
from fish_core.generate import Engine, SamplingParams  # noqa: E402
from quant.fp8 import FP8Linear  # noqa: E402

FIXTURE = ROOT / "tests/fixtures/tiny-s2"
PROMPTS = ROOT / "tests/fixtures/golden/prompts.safetensors"
SHAPES = [(6144, 2560), (2560, 4096), (9728, 2560), (2560, 9728), (4096, 2560)]  # (N, K)


def cuda_time(fn, repeats=50) -> float:
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return round(start.elapsed_time(end) * 1000 / repeats, 1)  # µs


@torch.inference_mode()
def kernels() -> list[dict]:
    rows = []
    for n, k in SHAPES:
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        for batch in (1, 8):
            x = torch.randn(batch, k, device="cuda", dtype=torch.bfloat16)
            row = {"N": n, "K": k, "batch": batch,
                   "bf16": cuda_time(lambda: F.linear(x, w))}
            ref = F.linear(x.float(), w.float())
            for path in ("dequant", "scaled_mm"):
                layer = FP8Linear.from_weight(w, path)
                try:
                    row[path] = cuda_time(lambda: layer(x))
                    y = layer(x).float()
                    row[path + "_rel_err"] = round(float((y - ref).norm() / ref.norm()), 4)
                    compiled = torch.compile(layer, fullgraph=True)
                    row[path + "_compiled"] = cuda_time(lambda: compiled(x))
                except Exception as e:  # noqa: BLE001 - report what failed, keep measuring
                    row[path] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


@torch.inference_mode()
def modes() -> dict:
    from safetensors.torch import load_file

    prompt = load_file(str(PROMPTS))["b_clone.batch0.prompt"]
    ref = load_model(FIXTURE, "cuda", torch.bfloat16)
    T = prompt.shape[1]
    pos = torch.arange(T, device="cuda")[None]
    tokens = prompt[None].cuda()
    ref_logits = ref.vocab_logits(ref.slow_forward(tokens, pos, None)).float()
    out = {}
    for mode, path in [("fp8", "dequant"), ("fp8", "scaled_mm"), ("fp8", "fastest"),
                       ("int8", None), ("int4", None), ("fp8-dynamic", None), ("nvfp4", None)]:
        label = f"{mode}:{path}" if path else mode
        try:
            model = load_model(FIXTURE, "cuda", torch.bfloat16, mode, fp8_path=path)
            logits = model.vocab_logits(model.slow_forward(tokens, pos, None)).float()
            run = Engine(model).generate(prompt, SamplingParams(max_new_tokens=8), seed=0)[0]
            out[label] = {"ok": True, "frames": run.columns.shape[1],
                          "slow_logits_rel_err": round(float((logits - ref_logits).norm()
                                                             / ref_logits.norm()), 4),
                          "weight_bytes": quant.weight_bytes(model)}
        except Exception as e:  # noqa: BLE001
            out[label] = {"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
        print(label, json.dumps(out[label]), flush=True)
    return out


def compiled_step() -> dict:
    from safetensors.torch import load_file

    prompt = load_file(str(PROMPTS))["b_clone.batch0.prompt"]
    model = load_model(FIXTURE, "cuda", torch.float32, "fp8", fp8_path="dequant")
    greedy = SamplingParams(temperature=0.7, top_p=0.7, top_k=1, max_new_tokens=16)
    eager = Engine(model).generate(prompt, greedy, seed=0, stop_on_eos=False)[0]
    engine = Engine(model, compile=True)
    compiled = engine.generate(prompt, greedy, seed=0, stop_on_eos=False)[0]
    result = {"compiled": engine.compiled,
              "same_codes": bool(torch.equal(eager.columns, compiled.columns))}
    print("compile", json.dumps(result), flush=True)
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("gpu_quant.py needs CUDA")
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "capability": torch.cuda.get_device_capability(), "kernels": kernels(),
              "modes": modes(), "compile": compiled_step()}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
