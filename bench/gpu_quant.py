"""GPU checks for quant/ (needs CUDA): per-shape FP8 kernel timings, every mode on the tiny
fixture against bf16, and the compiled FP8 decode step. Prints one JSON document.

    python bench/gpu_quant.py --json gpu_checks.json          # ~2-3 min on one H200

Then the speed table (real-size random weights):

    python bench/bench_quant.py --device cuda --config real --frames 64 --repeats 3 \\
        --modes bf16,fp8:dequant,fp8:scaled_mm,fp8:fastest,int8,int4,fp8-dynamic,nvfp4

1. S2-Pro's Linear shapes at batch 1 and 8: bf16 ``F.linear``, FP8 dequant, the FP8 GEMV and
   W8A8 ``_scaled_mm``, each eager (``path``) and compiled (``path_compiled``; one fresh compile
   each, ``torch._dynamo.reset()`` between) in µs per call (CUDA events): which path wins.
   Then, for the shapes with N <= ``fp8_gemv.SPLIT_MAX_N`` at batch 1, every configuration of
   the device's class run directly (``launch_with``, ``int8_launch``, ``int4_launch``):
   µs per call, error against fp32 and whether three calls give the same bits (split-K's
   fixed sum order), and ``int_gemv.tuned_choices()``: what the autotuner picked per shape.
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
from fish_core.loading.checkpoint import build_meta, load_model  # noqa: E402
from fish_core.engine.config import ModelConfig  # noqa: E402
from fish_core.engine.runner import Engine  # noqa: E402
from fish_core.engine.rows import generate  # noqa: E402
from fish_core.params import SamplingParams  # noqa: E402
from quant.fp8 import FP8Linear  # noqa: E402

FIXTURE = ROOT / "tests/fixtures/tiny-s2"
PROMPTS = ROOT / "tests/fixtures/golden/prompts.safetensors"
REAL_CONFIG = ROOT / "tests/fixtures/real-s2-config.json"


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


def failure(e: Exception) -> str:
    return f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def real_shapes() -> list[tuple[int, int]]:
    """(N, K) of every distinct Linear of the real model (from its config)."""
    meta = build_meta(ModelConfig.from_file(REAL_CONFIG), torch.bfloat16)
    return sorted(set(quant.convert.linear_weights(meta).values()))


def kernel_row(w: torch.Tensor, batch: int) -> dict:
    """µs per call of bf16 ``F.linear`` and of each FP8 path, eager and compiled under separate
    keys (a compile failure never hides the eager time), and each path's error against fp32."""
    n, k = w.shape
    x = torch.randn(batch, k, device="cuda", dtype=torch.bfloat16)
    row = {"N": n, "K": k, "batch": batch, "bf16": cuda_time(lambda: F.linear(x, w))}
    ref = F.linear(x.float(), w.float())
    for path in ("dequant", "gemv", "scaled_mm"):
        layer = FP8Linear.from_weight(w, path)
        try:
            row[path] = cuda_time(lambda: layer(x))
            y = layer(x).float()
            row[path + "_rel_err"] = round(float((y - ref).norm() / ref.norm()), 4)
        except Exception as e:  # noqa: BLE001 - report what failed, keep measuring
            row[path] = failure(e)
        # One fresh compile per (shape, batch, path): without the reset the same forward would
        # collect a cache entry per case and, past the recompile limit, raise under fullgraph.
        torch._dynamo.reset()
        try:
            compiled = torch.compile(layer, fullgraph=True, dynamic=False)
            row[path + "_compiled"] = cuda_time(lambda: compiled(x))
        except Exception as e:  # noqa: BLE001
            row[path + "_compiled"] = failure(e)
    return row


@torch.inference_mode()
def kernels() -> list[dict]:
    rows = []
    for n, k in real_shapes():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        for batch in (1, 8):
            rows.append(kernel_row(w, batch))
            print(json.dumps(rows[-1]), flush=True)
    torch._dynamo.reset()
    return rows


@torch.inference_mode()
def split_rows(only_split: bool = False) -> list[dict]:
    """Each GEMV configuration of this device's class on the small-N shapes at batch 1 (only
    the split-K ones with ``only_split``: what ``bench/gpu_first.py`` checks)."""
    from quant import fp8_gemv, int_gemv, int_linear

    cls = fp8_gemv.device_class(torch.device("cuda"))
    rows = []
    for n, k in real_shapes():
        if n > fp8_gemv.SPLIT_MAX_N:
            continue
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        fp8 = FP8Linear.from_weight(w, "gemv")
        int8 = int_linear.Int8Linear.from_weight(w)
        int4 = int_linear.Int4GemvLinear.from_weight(w)
        kinds = {"fp8": (lambda c: fp8_gemv.launch_with(x, fp8.weight, fp8.scale, c),
                         fp8.weight.float() * fp8.scale, fp8_gemv.CLASS_CONFIGS[cls]),
                 "int8": (lambda c: int_gemv.int8_launch(x, int8.weight, int8.scale, c),
                          int8.dequantized(torch.float32), fp8_gemv.CLASS_CONFIGS[cls]),
                 "int4": (lambda c: int_gemv.int4_launch(x, int4.weight, int4.scales_and_zeros, c),
                          int4.dequantized(torch.float32), int_gemv.INT4_CLASS_CONFIGS[cls])}
        for kind, (run, w_hat, configs) in kinds.items():
            ref = F.linear(x.float(), w_hat)
            for config in (c for c in configs if c[4] > 1 or not only_split):
                row = {"kernel": kind, "N": n, "K": k, "config": list(config)}
                try:
                    ys = [run(config) for _ in range(3)]
                    row["us"] = cuda_time(lambda: run(config))
                    row["rel_err"] = float((ys[0].float() - ref).norm() / ref.norm())
                    row["same_bits"] = all(torch.equal(ys[0], y) for y in ys[1:])
                except Exception as e:  # noqa: BLE001 - report what failed, keep measuring
                    row["error"] = failure(e)
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
    for mode, path in [("fp8", "dequant"), ("fp8", "gemv"), ("fp8", "scaled_mm"),
                       ("fp8", "fastest"),
                       ("int8", None), ("int4", None), ("fp8-dynamic", None), ("nvfp4", None)]:
        label = f"{mode}:{path}" if path else mode
        try:
            model = load_model(FIXTURE, "cuda", torch.bfloat16, mode, fp8_path=path)
            logits = model.vocab_logits(model.slow_forward(tokens, pos, None)).float()
            run = generate(Engine(model), prompt, SamplingParams(max_new_tokens=8), seed=0)[0]
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
    eager = generate(Engine(model), prompt, greedy, seed=0, stop_on_eos=False)[0]
    engine = Engine(model, compile=True)
    compiled = generate(engine, prompt, greedy, seed=0, stop_on_eos=False)[0]
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
              "capability": torch.cuda.get_device_capability(), "kernels": kernels()}
    result["split"] = split_rows()
    from quant import int_gemv

    result["tuned"] = int_gemv.tuned_choices()
    print("tuned", json.dumps(result["tuned"]), flush=True)
    # The compiled step before the torchao modes: their configs may change inductor settings
    # for the rest of the process.
    torch._dynamo.reset()
    result["compile"] = compiled_step()
    result["modes"] = modes()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
