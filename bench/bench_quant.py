"""Quantization benchmark: weight bytes and decode frames/s per mode, and the error table that
decides which Linear layers stay bf16 and whether the embedding tables become FP8.

    python bench/bench_quant.py --config medium --modes bf16,fp8,fp8:dequant,int8,int4,nvfp4
    python bench/bench_quant.py --config real --frames 8 --modes bf16,fp8:dequant,int8
    python bench/bench_quant.py --errors          # error table (tiny + medium) and real-size bytes
    python bench/bench_quant.py --sizes           # S2-Pro weight bytes per mode (meta, no memory)
    python bench/bench_quant.py --model /path/to/s2-pro --modes bf16,fp8   # a real checkpoint

Modes: ``bf16`` (no quantization), ``fp8`` (the device's default FP8 path), ``fp8:PATH`` with PATH
in load / dequant / scaled_mm / fastest (see quant/fp8.py), and the torchao modes int8, int4,
fp8-dynamic, nvfp4; a ``+emb`` / ``-emb`` suffix turns the FP8 embedding tables on / off
(default: the mode's, ``quant.EMBEDDINGS_BY_MODE``), e.g. ``bf16+emb``, ``fp8:dequant-emb``.
A mode that cannot run here is reported as unavailable with the reason. Every variant shares the
norms (and the bf16 embedding tables) of one bf16 model, and the modes are timed interleaved
(median of --repeats), so machine noise hits them alike.

GPU table (one H200, well under 8 minutes; compile adds ~1-2 min per mode, so it is eager):

    python bench/bench_quant.py --device cuda --config real --frames 64 --repeats 3 \\
        --modes bf16,fp8:dequant,fp8:scaled_mm,fp8:fastest,int8,int4,fp8-dynamic,nvfp4 \\
        --json gpu_quant.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import quant  # noqa: E402
from bench_decode import make_config, measure, prompt_for, random_model  # noqa: E402
from fish_core.loading.checkpoint import assign, build_meta, load_model  # noqa: E402
from fish_core.engine.runner import Engine  # noqa: E402
from fish_core.engine.rows import generate  # noqa: E402
from fish_core.params import SamplingParams  # noqa: E402
from fish_core.engine.config import ModelConfig  # noqa: E402
from quant.convert import Converter, embedding_targets, linear_weights, skipped  # noqa: E402

FIXTURE = ROOT / "tests/fixtures/tiny-s2"
PROMPTS = ROOT / "tests/fixtures/golden/prompts.safetensors"
REAL_CONFIG = ROOT / "tests/fixtures/real-s2-config.json"


def parse_mode(label: str) -> tuple[str, str | None, bool | None]:
    """``"fp8:dequant+emb"`` → ("fp8", "dequant", True); ``"bf16"`` → ("none", None, None)."""
    embeddings = {"+emb": True, "-emb": False}.get(label[-4:])
    if embeddings is not None:
        label = label[:-4]
    name, _, path = label.partition(":")
    return ("none" if name == "bf16" else name), path or None, embeddings


def variant(base, label: str, skip=quant.DEFAULT_SKIP, dtype=None):
    """A model with ``base``'s norms (shared, not copied), its Linear weights quantized for the
    mode of ``label`` (see ``parse_mode``) and its embedding tables FP8 or shared as that mode
    says; ``dtype`` casts them first (e.g. a bf16 variant of an fp32 base)."""
    device, dtype = base.device, dtype or base.dtype
    mode, path, embeddings = parse_mode(label)
    model = build_meta(base.config, dtype)
    targets = [n for n in linear_weights(model) if not skipped(n, skip)]
    tables = embedding_targets(model, mode, embeddings, skip)
    converter = Converter(mode, device, dtype, targets, path, tables)
    for pname, tensor in base.named_parameters():
        assign(model, pname, converter(pname, tensor.detach().to(dtype)))
    model.reset_buffers(device)
    return converter.finish(model).eval()


# ---------------------------------------------------------------------------- errors
def greedy(n):
    return SamplingParams(temperature=0.7, top_p=0.7, top_k=1, max_new_tokens=n)


@torch.inference_mode()
def teacher_forced(model, tokens: torch.Tensor, prompt_len: int):
    """Slow logits (allowed rows) predicting each generated frame's main token, and fast logits
    for codebooks 1..K-1 of each frame, all under the same (reference) history.
    ``tokens [1 + K, T + n]``: prompt then n generated columns. Returns ``[n, A]``, ``[n, K-1,
    C]``."""
    c = model.config
    T = tokens.shape[1]
    hidden = model.slow_forward(tokens[None], torch.arange(T)[None], None)[0]  # [T, D]
    hidden = hidden[prompt_len - 1: T - 1]  # [n, D]: predicts frames 0..n-1
    allowed = sorted({c.eos_token_id, *range(c.semantic_start_token_id,
                                             c.semantic_end_token_id + 1)})
    slow = hidden @ model.head_rows(torch.tensor(allowed, device=hidden.device)).T
    codes = tokens[1:, prompt_len:].T  # [n, K]
    n, K = codes.shape
    caches = model.make_caches(n, 8, device=hidden.device)
    x = torch.cat([hidden[:, None], model.fast_embeddings(codes[:, : K - 1])], dim=1)  # [n, K, D]
    fast = model.fast_forward(x, 0, caches)[:, 1:]  # [n, K-1, C]
    return slow.float(), fast.float()


def compare(ref, out) -> dict:
    d = out - ref
    return {"rel": round(float(d.norm() / ref.norm()), 5),
            "max_abs": round(float(d.abs().max()), 5),
            "argmax_agree": round(float((out.argmax(-1) == ref.argmax(-1)).float().mean()), 4)}


def error_rows(ref_model, prompt, frames, variants):
    """Teacher-forced logit errors of each variant against ``ref_model``, plus the number of
    leading greedy frames identical to the reference's. ``variants``: (label, make) pairs, each
    model built by ``make()`` when its turn comes and dropped after (one in memory at a time)."""
    ref_run = generate(Engine(ref_model), prompt, greedy(frames), seed=0, stop_on_eos=False)[0]
    tokens = torch.cat([prompt, ref_run.columns], dim=1)
    ref_slow, ref_fast = teacher_forced(ref_model, tokens, prompt.shape[1])
    rows = []
    for label, make in variants:
        try:
            model = make()
        except quant.QuantizationError as e:
            print(f"{label} unavailable: {e}", file=sys.stderr)
            continue
        slow, fast = teacher_forced(model, tokens, prompt.shape[1])
        run = generate(Engine(model), prompt, greedy(frames), seed=0, stop_on_eos=False)[0]
        same = (run.columns == ref_run.columns).all(0).int()
        rows.append({"variant": label, "slow": compare(ref_slow, slow),
                     "fast": compare(ref_fast, fast),
                     "greedy_frames_identical": f"{int(same.cumprod(0).sum())}/{frames}",
                     "weight_MB": round(quant.weight_bytes(model) / 1e6, 3)})
        print(json.dumps(rows[-1]), flush=True)
        del model
    return rows


def skip_choices(config):
    last = config.text.n_layer - 1
    return {"all Linear": (), "skip fast_output": ("fast_output",),
            "skip fast AR": ("fast_layers.*", "fast_output"),
            "skip slow first+last": ("layers.0.*", f"layers.{last}.*")}


def error_variants(ref) -> list[tuple[str, str, tuple]]:
    """(label, mode label, skip) of each row of the error table. The Linear choices keep bf16
    embeddings (-emb), so they read as before; the embedding rows add FP8 tables to a mode."""
    bf16, fast_bf16 = "bf16 Linear", ("fast_embeddings",)
    rows = [("bf16 (floor)", "bf16", ()),
            (f"{bf16} + FP8 embeddings", "bf16+emb", ()),
            (f"{bf16} + FP8 embeddings, fast_embeddings bf16", "bf16+emb", fast_bf16)]
    rows += [(f"fp8 {label}", "fp8-emb", skip) for label, skip in skip_choices(ref.config).items()]
    rows += [("fp8 + FP8 embeddings", "fp8+emb", ()),
             ("fp8 W8A8 scaled_mm", "fp8:scaled_mm-emb", ())]
    for mode in ("int8", "nvfp4"):
        rows += [(mode, f"{mode}-emb", ()), (f"{mode} + FP8 embeddings", f"{mode}+emb", ())]
    return rows


def errors(frames: int) -> dict:
    """The decision table: tiny fixture (reference fp32) and the medium random model (reference
    fp32), variants in bf16."""
    from safetensors.torch import load_file

    out = {}
    tiny = load_model(FIXTURE, dtype=torch.float32)
    medium = random_model(make_config("medium"), "cpu", torch.float32)
    cases = [("tiny", tiny, load_file(str(PROMPTS))["b_clone.batch0.prompt"]),
             ("medium", medium, prompt_for(medium.config, 64))]
    for name, ref, prompt in cases:
        print(name, flush=True)
        variants = [(label, partial(variant, ref, mode, skip, torch.bfloat16))
                    for label, mode, skip in error_variants(ref)]
        out[name] = error_rows(ref, prompt, frames, variants)
    return out


def sizes() -> dict:
    """S2-Pro's weight bytes per mode, bf16 and FP8 embedding tables, from the real config's
    shapes (``quant.planned_bytes`` on a meta model; fp8 as stored on CUDA)."""
    meta = build_meta(ModelConfig.from_file(REAL_CONFIG))
    out = {}
    for mode in quant.MODES:
        out[mode] = {"default_fp8_embeddings": quant.EMBEDDINGS_BY_MODE[mode],
                     "GB_bf16_embeddings": round(quant.planned_bytes(meta, mode, (), False) / 1e9,
                                                 3),
                     "GB_fp8_embeddings": round(quant.planned_bytes(meta, mode, (), True) / 1e9, 3)}
        print("real", mode, json.dumps(out[mode]), flush=True)
    return out


# ---------------------------------------------------------------------------- speed
def speed(args) -> dict:
    device, dtype = torch.device(args.device), torch.bfloat16
    t0 = time.perf_counter()
    if args.model:
        base = load_model(args.model, device, dtype)
    else:
        base = random_model(make_config(args.config), device, dtype)
    load_s = time.perf_counter() - t0
    prompt = prompt_for(base.config, args.prompt_len)
    engines, report = {}, {}
    for mode in args.modes.split(","):
        try:
            model = base if mode == "bf16" else variant(base, mode)
        except (quant.QuantizationError, RuntimeError, ImportError) as e:
            report[mode] = {"available": False, "reason": str(e).splitlines()[0]}
            print(mode, report[mode], file=sys.stderr, flush=True)
            continue
        engine = Engine(model, compile=args.compile)
        generate(engine, prompt, SamplingParams(max_new_tokens=2), seed=0)  # warm up
        engines[mode] = engine
        paths = sorted({m.path for m in model.modules() if isinstance(m, quant.FP8Linear)})
        report[mode] = {"available": True, "weight_GB": round(quant.weight_bytes(model) / 1e9, 3),
                        "fp8_paths": paths, "runs": []}
    for _ in range(args.repeats):  # interleaved
        for mode, engine in engines.items():
            report[mode]["runs"].append(measure(engine, prompt, args, device)["decode_fps"])
    for mode in engines:
        runs = report[mode]["runs"]
        report[mode]["decode_frames_per_s"] = round(statistics.median(runs), 3)
        report[mode]["runs"] = [round(r, 3) for r in runs]
        print(mode, json.dumps(report[mode]), flush=True)
    info = {"machine": platform.processor() or platform.machine(), "device": str(device),
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "model": args.model or args.config, "frames": args.frames,
            "prompt_len": args.prompt_len, "repeats": args.repeats, "compile": args.compile,
            "load_s": round(load_s, 2)}
    return {"info": info, "modes": report}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--model", help="checkpoint folder (bf16) instead of random weights")
    src.add_argument("--config", choices=["tiny", "medium", "real"], default="medium")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--modes", default="bf16,fp8,fp8:dequant,int8,int4,nvfp4")
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--compile", action="store_true", help="torch.compile the decode step")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--errors", action="store_true",
                    help="print the error table (Linear skips, FP8 embeddings) and --sizes")
    ap.add_argument("--sizes", action="store_true", help="print S2-Pro's weight bytes per mode")
    ap.add_argument("--error-frames", type=int, default=32)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.errors:
        result = {"sizes": sizes(), "errors": errors(args.error_frames)}
    else:
        result = {"sizes": sizes()} if args.sizes else speed(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
