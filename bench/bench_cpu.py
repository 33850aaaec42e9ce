"""CPU benchmark: decode frames/s per precision against this machine's GEMV bandwidth, the
kernels behind them, their accuracy, and the thread settings.

    python bench/bench_cpu.py --kernels --threads 1,2          # GEMV per precision, GB/s
    python bench/bench_cpu.py --decode --config medium --threads 2 --rounds 5
    python bench/bench_cpu.py --decode --model ../realsize/medium --text "Hello there."
    python bench/bench_cpu.py --errors                          # accuracy per precision
    python bench/bench_cpu.py --threads-study                   # default threads, compile threads
    python bench/bench_cpu.py --profile --model ../realsize/medium --precisions int8 --threads 1

Decode speed is ``(n - 1) / (t(frame n) - t(frame 1))``: the prompt's prefill and the first
frame are left out, the metric s2.cpp's comparison uses (docs/cpu.md). Precisions: ``bf16``
(packed for oneDNN, as loaded), ``bf16-plain`` (``nn.Linear``, as before packing), ``int8``
(our VNNI kernel where it runs), ``int8-torch`` (torch's ``_weight_int8pack_mm``),
``int4`` (the fast AR int8), ``int4-all`` (the fast AR int4 too: faster, not recommended), ``fp8``
(per-row FP8, on the CPU dequantized at load: bf16 speed), each loaded
through the real loader (``load_model``) when ``--model`` is given, else the random ``--config``
model quantized by the same ``quant.Converter``. Runs are alternated precision by precision,
``--rounds`` times, and reported as median / min / max with the machine's load average.
A ``+compile`` suffix (``int8+compile``) decodes the same model with the step compiled
(``Engine(compile=True)``), ``+auto`` with ``compile="auto"``; each row records whether it ran
compiled and any fallback.

Bytes per frame: what one frame reads at batch 1 (``frame_bytes``); the bound is the GEMV
bandwidth of ``--kernels`` (bytes a large bf16 GEMV reads per second at the same thread count),
so ``fraction_of_bound`` = bytes per frame x frames/s / that bandwidth.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import quant  # noqa: E402
from bench_decode import make_config, prompt_for, random_model  # noqa: E402
from fish_core.engine.runner import Engine  # noqa: E402
from fish_core.engine.rows import generate  # noqa: E402
from fish_core.loading.checkpoint import assign, build_meta, load_model  # noqa: E402
from fish_core.params import SamplingParams  # noqa: E402
from quant import int_linear  # noqa: E402
from quant.convert import Converter, embedding_targets, linear_weights  # noqa: E402

FAST_AR = ("fast_layers.*", "fast_output")
# precision → (quant mode, mixed override or None for the mode's default)
PRECISIONS = {"bf16": ("none", None), "bf16-plain": ("none", None), "int8": ("int8", None),
              "int8-torch": ("int8", None),
              "int4": ("int4", None), "int4-all": ("int4", ()), "fp8": ("fp8", None)}


# a decode-step suffix of a precision name (``--decode``): eager, compiled, or auto
COMPILE_SUFFIXES = {"": False, "compile": True, "auto": "auto"}


def machine() -> dict:
    return {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
            "logical_cpus": os.cpu_count(), "load_avg_1min": round(os.getloadavg()[0], 2)}


def summary(values) -> dict:
    """median / min / max of alternated runs."""
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "runs": [round(v, 3) for v in values]}


def set_threads(n: int) -> None:
    torch.set_num_threads(n)


# ---------------------------------------------------------------------------- kernels
SHAPES = {  # [N, K] of one transformer block's Linear layers
    "real": [(6144, 2560), (2560, 4096), (9728, 2560), (9728, 2560), (2560, 9728)],
    "medium": [(1536, 1024), (1024, 1024), (3072, 1024), (3072, 1024), (1024, 3072)],
}


def layer_set(precision: str, shapes, blocks: int, dtype=torch.bfloat16):
    """``blocks`` blocks of Linear layers of ``shapes`` in ``precision`` (more bytes than the L3
    cache holds, so every call reads from memory, as a decode frame does)."""
    gen = torch.Generator().manual_seed(0)
    layers = []
    for _ in range(blocks):
        for n, k in shapes:
            w = (torch.randn(n, k, generator=gen) * 0.02).to(dtype)
            if precision == "bf16":
                layers.append(quant.PackedLinear.from_weight(w))
            elif precision == "bf16-plain":
                layers.append(lambda x, w=w: F.linear(x, w))
            elif precision in ("int8", "int8-torch"):
                layers.append(torch_kernel(int_linear.Int8Linear.from_weight(w), precision))
            elif precision == "int4":
                layers.append(int_linear.Int4Linear.from_weight(w))
            elif precision == "torchao-int8":
                layers.append(torchao_int8(w))
    return layers


def torch_kernel(model, precision: str):
    """``model`` with its ``Int8Linear`` layers on torch's kernel for ``int8-torch`` (our
    ``quant.cpu_gemv`` otherwise, where it runs)."""
    for m in model.modules():
        if isinstance(m, int_linear.Int8Linear):
            m.torch_kernel = precision == "int8-torch"
    return model


def torchao_int8(w):
    from quant import torchao_modes

    q = torchao_modes.quantize_weight(w, torchao_modes.config_for("int8"))
    return lambda x: F.linear(x, q)


def layer_bytes(precision: str, shapes, blocks: int) -> int:
    per = {"bf16": lambda s: s[0] * s[1] * 2, "bf16-plain": lambda s: s[0] * s[1] * 2,
           "int8": int_linear.int8_bytes, "int8-torch": int_linear.int8_bytes,
           "int4": int_linear.int4_bytes, "torchao-int8": int_linear.int8_bytes}[precision]
    return blocks * sum(per(s) for s in shapes)


def time_pass(layers, xs, repeats: int) -> float:
    """Median seconds of one pass over every layer (one activation row, batch-1 decode)."""
    def once():
        for layer, x in zip(layers, xs):
            layer(x)
    once()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def read_bandwidth(nbytes: int = 1 << 30, repeats: int = 5) -> float:
    """GB/s of a plain read of ``nbytes`` (a sum over a buffer far larger than the caches)."""
    buf = torch.ones(nbytes // 4, dtype=torch.float32)
    buf.sum()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        buf.sum()
        times.append(time.perf_counter() - t0)
    return nbytes / statistics.median(times) / 1e9


@torch.inference_mode()
def kernels(threads: list[int], rounds: int, config: str, precisions: list[str]) -> dict:
    """GEMV time per precision for ``config``'s block shapes, alternated ``rounds`` times at each
    thread count; effective GB/s (bytes the precision reads) and speed-up over bf16."""
    shapes = SHAPES[config]
    blocks = 8 if config == "real" else 24  # ~0.8 GB bf16 (real), ~0.6 GB (medium): > L3
    sets = {p: layer_set(p, shapes, blocks) for p in precisions}
    xs = [torch.randn(1, k, dtype=torch.bfloat16) for _ in range(blocks) for _, k in shapes]
    out = {"machine": machine(), "config": config, "shapes": shapes, "blocks": blocks,
           "threads": {}}
    for n in threads:
        set_threads(n)
        times = {p: [] for p in precisions}
        reads = []
        for _ in range(rounds):
            for p in precisions:
                times[p].append(time_pass(sets[p], xs, 3))
            reads.append(read_bandwidth())
        row = {"read_GB_per_s": summary(reads)}
        bf16 = statistics.median(times["bf16"]) if "bf16" in times else None
        for p in precisions:
            t = statistics.median(times[p])
            row[p] = {"ms_per_pass": summary([x * 1e3 for x in times[p]]),
                      "GB_per_s": round(layer_bytes(p, shapes, blocks) / t / 1e9, 2),
                      "speedup_vs_bf16": round(bf16 / t, 2) if bf16 else None}
        # the bound: what memory delivers to a large read, or what the packed bf16 GEMV reads,
        # whichever is more
        row["gemv_bound_GB_per_s"] = max(row["bf16"]["GB_per_s"] if "bf16" in row else 0,
                                         row["read_GB_per_s"]["median"])
        out["threads"][n] = row
        print(n, json.dumps(row), flush=True)
    return out


# ---------------------------------------------------------------------------- models
def quantized_copy(base, precision: str):
    """``base`` (bf16, plain ``nn.Linear``) with its Linear layers in ``precision`` as the loader
    holds them (``bf16``: packed for oneDNN; ``bf16-plain``: ``base`` itself)."""
    mode, mixed = PRECISIONS[precision]
    if precision == "bf16-plain":
        return base
    if precision == "int8-torch":
        return torch_kernel(quantized_copy(base, "int8"), precision)
    model = build_meta(base.config, base.dtype)
    targets = list(linear_weights(model))
    tables = embedding_targets(model, mode, None, ())
    converter = Converter(mode, base.device, base.dtype, targets, None, tables, mixed=mixed)
    for name, tensor in base.named_parameters():
        assign(model, name, converter(name, tensor.detach()))
    model.reset_buffers(base.device)
    return converter.finish(model).eval()


def load_precision(folder, precision: str):
    """The real loader, as a user loads the model (int4-all: the loader's path, mixed off;
    bf16-plain: packing off, as ``SAILFISH_CPU_PACK=0``)."""
    mode, mixed = PRECISIONS[precision]
    if precision == "bf16-plain":
        os.environ[quant.packed.ENV] = "0"
        try:
            return load_model(folder, "cpu", torch.bfloat16, mode)
        finally:
            del os.environ[quant.packed.ENV]
    if mixed is None:
        return torch_kernel(load_model(folder, "cpu", torch.bfloat16, mode), precision)
    saved = dict(quant.convert.MIXED)
    quant.convert.MIXED.pop(mode, None)
    try:
        return load_model(folder, "cpu", torch.bfloat16, mode)
    finally:
        quant.convert.MIXED.update(saved)


def base_precision(precision: str) -> str:
    """``int8+compile`` → ``int8``: the precision without its decode-step suffix."""
    return precision.split("+")[0]


def compile_of(precision: str) -> bool | str:
    """The ``Engine`` compile mode a precision name asks for: ``+compile`` (on), ``+auto``
    (time both on the first frame, keep the faster), else eager."""
    suffix = precision.partition("+")[2]
    if suffix not in COMPILE_SUFFIXES:
        raise ValueError(f"precision {precision!r}: expected no suffix or one of "
                         f"{', '.join('+' + k for k in COMPILE_SUFFIXES if k)}")
    return COMPILE_SUFFIXES[suffix]


def frame_bytes(model, engine: Engine, cache_len: int) -> int:
    """Bytes one frame reads at batch 1: the slow layers and the sampled head rows once, the
    fast layers and head once per codebook after the first (K - 1 passes), the KV cache."""
    slow = (sum(quant.weight_bytes(layer) for layer in model.layers)
            + quant.tensor_bytes(engine.head))
    fast = (sum(quant.weight_bytes(layer) for layer in model.fast_layers)
            + quant.weight_bytes(model.fast_output))
    t = model.config.text
    kv = cache_len * t.n_layer * 2 * t.n_local_heads * t.head_dim * engine.dtype.itemsize
    return slow + (model.config.num_codebooks - 1) * fast + kv


def text_prompt(folder, text: str):
    """The prompt ``[1 + K, T]`` of ``text`` (no voice) as the Synthesizer builds it."""
    from fish_core.text.prompt import PromptEncoder, conversation
    from fish_core.text.tokenizer import FishTokenizer
    from fish_core.engine.config import ModelConfig

    config = ModelConfig.from_file(folder)
    encoder = PromptEncoder(FishTokenizer.from_dir(folder), config.num_codebooks,
                            config.codebook_size)
    return encoder.encode(conversation(text, [], []))


def frame_rate(engine: Engine, prompt, frames: int) -> tuple[float, float]:
    """(frames/s as (n - 1) / (t(frame n) - t(frame 1)), seconds to frame 1 incl. prefill)."""
    stamps = []
    t0 = time.perf_counter()
    generate(engine, prompt, SamplingParams(max_new_tokens=frames), seed=0,
                    on_frame=lambda i, n: stamps.append(time.perf_counter()), stop_on_eos=False)
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]), stamps[0] - t0


@torch.inference_mode()
def decode(args) -> dict:
    threads = [int(t) for t in args.threads.split(",")]
    precisions = args.precisions.split(",")
    loaded = {base_precision(p) for p in precisions}  # one model per precision, compiled or not
    if args.model:
        held = {p: load_precision(args.model, p) for p in loaded}
        prompt = text_prompt(args.model, args.text)
    else:
        base = random_model(make_config(args.config), "cpu", torch.bfloat16)
        held = {p: quantized_copy(base, p) for p in loaded}
        prompt = prompt_for(base.config, args.prompt_len)
    models = {p: held[base_precision(p)] for p in precisions}
    engines = {p: Engine(m, compile=compile_of(p)) for p, m in models.items()}
    warmup = {}
    for p, e in engines.items():  # warm-up (and the compile), and the cache at its size
        t0 = time.perf_counter()
        generate(e, prompt, SamplingParams(max_new_tokens=2), seed=0)
        warmup[p] = round(time.perf_counter() - t0, 1)
    out = {"machine": machine(), "model": args.model or args.config, "frames": args.frames,
           "prompt_tokens": prompt.shape[1], "rounds": args.rounds, "threads": {}}
    for n in threads:
        set_threads(n)
        fps = {p: [] for p in precisions}
        first = {p: [] for p in precisions}
        loads = []
        for r in range(args.rounds):  # alternated; the order turns each round
            order = precisions[r % len(precisions):] + precisions[: r % len(precisions)]
            for p in order:
                rate, to_first = frame_rate(engines[p], prompt, args.frames)
                fps[p].append(rate)
                first[p].append(to_first)
            loads.append(os.getloadavg()[0])
        row = {"load_avg": summary(loads)}
        bf16 = statistics.median(fps["bf16"]) if "bf16" in fps else None
        for p in precisions:
            e = engines[p]
            nbytes = frame_bytes(models[p], e, e.caches.shape[1])
            med = statistics.median(fps[p])
            row[p] = {"frames_per_s": summary(fps[p]),
                      "prefill_and_first_frame_s": summary(first[p]),
                      "bytes_per_frame_GB": round(nbytes / 1e9, 4),
                      "effective_GB_per_s": round(nbytes * med / 1e9, 2),
                      "speedup_vs_bf16": round(med / bf16, 2) if bf16 else None,
                      "weight_GB": round(quant.weight_bytes(models[p]) / 1e9, 3),
                      "warmup_s": warmup[p], "compiled": e.compiled,
                      "compile_choice": e.compile_choice, "fallbacks": list(e.fallbacks)}
            if args.bandwidth:
                row[p]["fraction_of_bound"] = round(nbytes * med / 1e9 / args.bandwidth, 3)
        out["threads"][n] = row
        print(n, json.dumps(row), flush=True)
    return out


@torch.inference_mode()
def profile(args) -> dict:
    """Where a decode frame's time goes (``torch.profiler`` over frames 2 .. ``--frames`` of
    the first of ``--precisions``, eager or ``+compile``, after a warm-up): the ops by their own
    time, how many top-level calls a frame makes, and the part of the frame no op accounts for
    (Python, dispatch; and, eager, our int8 kernel, which an eager step calls directly, not as
    the op ``sailfish::int8_gemv`` a compiled step calls)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    set_threads(int(args.threads.split(",")[0]))
    precision = args.precisions.split(",")[0]
    if args.model:
        model = load_precision(args.model, base_precision(precision))
        prompt = text_prompt(args.model, args.text)
    else:
        model = quantized_copy(random_model(make_config(args.config), "cpu", torch.bfloat16),
                               base_precision(precision))
        prompt = prompt_for(model.config, args.prompt_len)
    engine = Engine(model, compile=compile_of(precision))
    frames = args.frames
    generate(engine, prompt, SamplingParams(max_new_tokens=frames), seed=0, stop_on_eos=False)
    plain_fps = frame_rate(engine, prompt, frames)[0]
    prof = torch_profile(activities=[ProfilerActivity.CPU])
    stamps = []

    def on_frame(i, n):  # the profile spans frames 2 .. n: no prefill, no first frame
        stamps.append(time.perf_counter())
        if len(stamps) == 1:
            prof.start()
        elif len(stamps) == frames:
            prof.stop()
    generate(engine, prompt, SamplingParams(max_new_tokens=frames), seed=0, stop_on_eos=False,
                    on_frame=on_frame)
    n = len(stamps) - 1  # frames profiled
    events = prof.key_averages()
    top_level = [e for e in prof.events() if e.cpu_parent is None and e.device_type.name == "CPU"]
    wall_us = (stamps[-1] - stamps[0]) * 1e6 / n  # one frame, profiled
    ops_us = sum(e.cpu_time_total for e in top_level) / n
    calls = len(top_level) / n
    rows = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:args.top]
    out = {"machine": machine(), "precision": precision, "frames": frames,
           "frames_per_s_unprofiled": round(plain_fps, 2),
           "frame_ms_profiled": round(wall_us / 1e3, 2),
           "top_level_ops_per_frame": round(calls, 1),
           "top_level_op_ms_per_frame": round(ops_us / 1e3, 2),
           "outside_ops_ms_per_frame": round((wall_us - ops_us) / 1e3, 2),
           "ops": [{"name": e.key, "calls_per_frame": round(e.count / n, 1),
                    "self_ms_per_frame": round(e.self_cpu_time_total / n / 1e3, 3)}
                   for e in rows]}
    print(json.dumps({k: v for k, v in out.items() if k != "ops"}), flush=True)
    for op in out["ops"]:
        print(f"{op['self_ms_per_frame']:8.3f} ms {op['calls_per_frame']:7.1f} calls  {op['name']}")
    return out


# ---------------------------------------------------------------------------- errors
@torch.inference_mode()
def errors(args) -> dict:
    """Teacher-forced logits of each precision against the fp32 model (tiny fixture, medium
    random): relative error, greedy (argmax) code agreement, and the end-of-speech margin."""
    from safetensors.torch import load_file

    from bench_quant import FIXTURE, PROMPTS, compare, greedy, teacher_forced

    cases = [("tiny", load_model(FIXTURE, dtype=torch.float32),
              load_file(str(PROMPTS))["a_plain.batch0.prompt"]),
             ("medium", random_model(make_config("medium"), "cpu", torch.float32), None)]
    out = {}
    for name, ref, prompt in cases:
        prompt = prompt if prompt is not None else prompt_for(ref.config, 64)
        run = generate(Engine(ref), prompt, greedy(args.error_frames), seed=0,
                                   stop_on_eos=False)[0]
        tokens = torch.cat([prompt, run.columns], dim=1)
        ref_slow, ref_fast = teacher_forced(ref, tokens, prompt.shape[1])
        c = ref.config
        allowed = sorted({c.eos_token_id, *range(c.semantic_start_token_id,
                                                 c.semantic_end_token_id + 1)})
        eos = allowed.index(c.eos_token_id)
        margin = lambda s: s[:, eos] - torch.cat([s[:, :eos], s[:, eos + 1:]], 1).max(1).values  # noqa: E731
        bf16 = cast(ref, torch.bfloat16)
        rows = []
        for p in ("bf16", "int8", "int4", "int4-all"):
            model = quantized_copy(bf16, p)
            slow, fast = teacher_forced(model, tokens, prompt.shape[1])
            rows.append({"precision": p, "slow": compare(ref_slow, slow),
                         "fast": compare(ref_fast, fast),
                         "eos_margin_max_abs_err": round(float(
                             (margin(slow) - margin(ref_slow)).abs().max()), 4),
                         "eos_decisions_equal": bool(torch.equal(margin(slow) > 0,
                                                                 margin(ref_slow) > 0))})
            print(name, json.dumps(rows[-1]), flush=True)
        out[name] = rows
    return out


def cast(model, dtype):
    """A ``dtype`` copy of ``model`` (the fp32 reference stays as it is)."""
    copy = build_meta(model.config, dtype)
    for name, tensor in model.named_parameters():
        assign(copy, name, tensor.detach().to(dtype))
    copy.reset_buffers(model.device)
    return copy.eval()


# ---------------------------------------------------------------------------- threads
@torch.inference_mode()
def threads_study(args) -> dict:
    """Decode frames/s (tiny and medium, bf16) with 1 thread, 2 threads and the default of
    ``fish_core.engine.threads``, alternated; then compiled decoding with inductor's own thread
    count (``cpp.threads``) at 1 and at -1 (all threads) against eager, at 2 torch threads:
    whether the fused kernels' OpenMP regions are what costs compiled decoding on a CPU."""
    from fish_core.engine import threads as policy

    out = {"machine": machine(), "default": policy.choose()}
    for config in ("tiny", "medium"):
        model = random_model(make_config(config), "cpu", torch.bfloat16)
        prompt = prompt_for(model.config, 64)
        engine = Engine(quantized_copy(model, "bf16"))
        generate(engine, prompt, SamplingParams(max_new_tokens=2), seed=0)
        counts = {"1": 1, "2": 2, "default": policy.choose()[0]}
        fps = {k: [] for k in counts}
        for _ in range(args.rounds):
            for k, n in counts.items():
                set_threads(n)
                fps[k].append(frame_rate(engine, prompt, args.frames)[0])
        out[config] = {k: summary(v) for k, v in fps.items()}
        print(config, json.dumps(out[config]), flush=True)

    out["omp_wait_policy"] = omp_wait_study(args)

    from torch import _dynamo
    import torch._inductor.config as inductor

    out["compile_threads"] = {}
    for config in args.compile_config.split(","):
        model = random_model(make_config(config), "cpu", torch.bfloat16)
        prompt = prompt_for(model.config, 64)
        set_threads(2)
        engines = {"eager": Engine(model), "eager, packed": Engine(quantized_copy(model, "bf16"))}
        for threads in (-1, 1):
            _dynamo.reset()
            inductor.cpp.threads = threads
            e = Engine(model, compile=True)
            generate(e, prompt, SamplingParams(max_new_tokens=2), seed=0)  # compiles now
            engines[f"compiled, cpp.threads={threads}"] = e
        inductor.cpp.threads = -1
        fps = {k: [] for k in engines}
        for _ in range(args.rounds):
            for k, e in engines.items():
                fps[k].append(frame_rate(e, prompt, args.frames)[0])
        out["compile_threads"][config] = {
            "torch_threads": 2, **{k: summary(v) for k, v in fps.items()},
            "compiled": {k: e.compiled for k, e in engines.items()}}
        print("compile", config, json.dumps(out["compile_threads"][config]), flush=True)
    return out


def omp_wait_study(args) -> dict:
    """bf16 decode at 2 threads in fresh processes, OpenMP's wait policy as torch leaves it
    (spinning) against ``OMP_WAIT_POLICY=PASSIVE`` (a waiting thread sleeps), alternated: what
    a busy machine costs each (the variable must be set before the process starts)."""
    import subprocess

    out = {}
    for config in ("tiny", "medium"):
        fps = {"default": [], "PASSIVE": []}
        for _ in range(args.rounds):
            for policy in fps:
                env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
                if policy == "PASSIVE":
                    env["OMP_WAIT_POLICY"] = "PASSIVE"
                cmd = [sys.executable, __file__, "--decode", "--config", config, "--precisions",
                       "bf16", "--threads", "2", "--rounds", "1", "--frames", str(args.frames)]
                done = subprocess.run(cmd, capture_output=True, text=True, env=env)
                line = [ln for ln in done.stdout.splitlines() if ln.startswith("2 {")][-1]
                fps[policy].append(json.loads(line[2:])["bf16"]["frames_per_s"]["median"])
        out[config] = {k: summary(v) for k, v in fps.items()}
        print("omp", config, json.dumps(out[config]), flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--kernels", action="store_true")
    what.add_argument("--decode", action="store_true")
    what.add_argument("--errors", action="store_true")
    what.add_argument("--threads-study", action="store_true")
    what.add_argument("--profile", action="store_true",
                      help="where one decode frame's time goes (first of --precisions)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--model", help="a checkpoint folder (e.g. bench/make_standin.py's)")
    src.add_argument("--config", choices=["tiny", "medium", "real"], default="medium")
    ap.add_argument("--precisions", default="bf16,int8,int4")
    ap.add_argument("--threads", default="1,2", help="comma list of thread counts")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--frames", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=64, help="random prompt (--config)")
    ap.add_argument("--text", default="Hello there. This is a benchmark of the decode speed.",
                    help="the text of the prompt (--model)")
    ap.add_argument("--bandwidth", type=float, default=None,
                    help="GEMV bandwidth GB/s (from --kernels) for the fraction of the bound")
    ap.add_argument("--error-frames", type=int, default=32)
    ap.add_argument("--compile-config", default="tiny,medium",
                    help="configs of the compile-threads study (comma list)")
    ap.add_argument("--top", type=int, default=25, help="ops listed by --profile")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if args.kernels:
        result = kernels([int(t) for t in args.threads.split(",")], args.rounds,
                         "real" if args.config == "real" else "medium",
                         args.precisions.split(","))
    elif args.decode:
        result = decode(args)
    elif args.errors:
        result = errors(args)
    elif args.profile:
        result = profile(args)
    else:
        result = threads_study(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
