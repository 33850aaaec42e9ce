"""The first minutes on a lent GPU: one command, a budget (default 9 min, model builds included),
a JSON table written after every stage.

    python bench/gpu_first.py                          # writes $OUT/gpu_first.json (else ./)
    python bench/gpu_first.py --device cpu --config tiny --json gpu_first.json        # dry run

Real-size S2-Pro with random weights, built on the meta device and initialised on the GPU (no
fp32 copy; speed does not depend on the values; the stop token is ignored). Each stage runs in its
own subprocess with its own timeout, so a crash, a hang or a torchao setting cannot take the
others with it; a stage that does not fit in what is left of the budget is skipped, and says so:

    preflight      versions, capability, which optional packages import, copy bandwidth
    parity         the goldens of the official implementation on this device: the fixture's
                   tiny model in fp32 (TF32 off), eager and through the CUDA graph, greedy
                   columns of every golden batch and the seeded run; the codec's encode codes
                   and decode error (``all_equal``)
    bf16-graph     eager kernels replayed as one CUDA graph per frame; time to first audio as a
                   stream makes it (``params.FIRST_FRAMES`` frames, codec decode in fp16 on CUDA)
    fp8-gemv       FP8 weight-only on its fast path (fp8 path "auto": the Triton GEMV)
    int8-gemv, int4-gemv   our Triton weight-only GEMVs (SAILFISH_INT_KERNEL=triton)
    ttfa           time to first audio (bf16, CUDA graph): prefill + first frame at several
                   prompt lengths (no recompile, one first-frame graph), then prefill + the
                   first chunk's frames + its codec decode (default precisions) for first
                   chunks of 1-8 frames, split into its parts; ops and host syncs of a join
    codec          codec encode / decode speed (× real time); a stream's first chunk eager
                   against its CUDA graph (equal?, ms each) and the fused Snake's error
    serving        continuous batching (engine rows joining a running decode): frames/s with
                   1 and 8 rows, time to first audio frames at 1 and 8 rows, a voice prefix's
                   join with and without KV reuse
    kernels        ops a decode frame, a join and a prefill (bench/count_ops.py: S2-Pro's
                   depth, tiny widths, eager), one frame's kernels and launch calls under the
                   profiler, the first codec chunk's ops
    split-k        every split-K configuration of our GEMVs on the small-N shapes: error, the
                   same bits over three calls, µs (CUDA only)
    int8, int4     torchao weight-only, only if torchao imports (what our GEMVs must beat to
                   become the CUDA default)
    bf16-compiled  torch.compile + CUDA graph
    bf16-compiled-warm     a second process on the compile cache the first left (one cache for
                   all stages): seconds from its start to its first frame
    fp8-compiled, int8-compiled, int4-compiled (ours), int8-torchao-compiled,
    int4-torchao-compiled
    bf16-compiled-tuned    compiled with the scoped Inductor options (SAILFISH_COMPILE_TUNING=on)
    fp8-gemv-bits  the FP8 GEMV decoding e4m3 with bit operations (what compute capability 8.0-8.6
                   runs), forced (SAILFISH_FP8_DECODE=bits)
    bf16-eager     a short eager run (Python launches every kernel)
    fp8-dequant    FP8 weight-only, dequantized per call (the old default)
    codec-fast     codec per precision (fp32, fp16, bf16; fp16 + compiled Snake on CUDA):
                   encode / decode × real time, decode SNR against fp32, encode codes equal

    realsize-load  (only when named in --stages: it needs ~150-280 s, more than the default
                   budget leaves) a stand-in checkpoint in the real file layout written to a
                   temporary folder (bench/make_standin.py, LLM only), then loaded by a fresh
                   process per precision (bf16, int8, int4): load seconds, host peak RSS added
                   by the load over the weights' bytes, VRAM (bench/bench_realsize.py
                   --load-only)

The default budget (540 s) fits a 9-minute device call; stages run in the order of ``STAGES``:
parity, bf16 graph, our FP8/int8/int4 GEMVs in graph mode, TTFA, codec, serving, then the
diagnosis, torchao and compiled stages; those that no longer fit are skipped (``--stages`` picks
others for a second call).

Every decode row also carries a diagnosis: one frame under ``torch.profiler`` (kernels and
launch calls per frame, the top 15 kernels by time with their share, the time of GEMV/GEMM
kernels against everything else) and, per distinct Linear (class, weight type, shape, FP8
path), the kernels one eager call really launches: a dequantize-then-matmul shows up there.
On the CPU dry run the same is reported for aten ops.

Decode rows: frames/s (median of the repeats), bytes read per frame, effective GB/s and its
fraction of the copy bandwidth measured in preflight (bytes per frame / frame time against
bytes read + written per second of a device-to-device copy), VRAM after the build and peak while
decoding, and what really ran: compiled?, CUDA graph?, graph captures, FP8 kernel per layer,
fallbacks and warnings.

Last, the defaults this run decides (issue 46, item 5; ``decisions`` in the JSON, a table
printed): for int8 and int4 on CUDA, our Triton GEMV (``int8-gemv``/``int4-gemv``) against
torchao (``int8``/``int4``), both in graph mode — ours becomes ``quant/convert.py``'s
``AUTO_INT_KERNEL`` where it is faster; compile on by default only if ``bf16-compiled-warm``
reaches its first frame within ``WARM_START_LIMIT_S`` (15 s) and ``bf16-compiled`` is faster
than ``bf16-graph``; bucketed (graphed) prefills on CUDA (``PREFILL_BUCKETS_ON_CUDA``) only if
the goldens hold with them (parity ``graph-buckets``) and ``ttfa``'s prefills are quicker with
them. A default whose stages did not run stays undecided, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

OPTIONAL = ("triton", "torchao", "soundfile", "soxr", "numpy", "safetensors", "tokenizers")
H200_COPY_GB_S = 4300.0  # measured here (KINDS.md); used when preflight could not measure


@dataclass(frozen=True)
class Stage:
    name: str
    timeout_s: float  # the most this stage may take
    min_s: float  # skipped if less than this is left of the budget
    quantization: str | None = None  # decode stages: "none", "fp8", "int8", "int4"
    fp8_path: str | None = None
    mode: str = "graph"  # "eager", "graph" or "compiled" (+ CUDA graph on CUDA)
    frames: int = 64
    repeats: int = 2
    needs: str | None = None  # an optional package the stage needs (from preflight)
    default: bool = True  # run when --stages is not given
    env: tuple[tuple[str, str], ...] = ()  # environment the stage's process runs with


TRITON_INT = (("SAILFISH_INT_KERNEL", "triton"),)  # int8/int4 through our Triton GEMV
TORCHAO_INT = (("SAILFISH_INT_KERNEL", "torchao"),)  # int8/int4 through torchao's tensors
FP8_BITS = (("SAILFISH_FP8_DECODE", "bits"),)  # the GEMV decoding e4m3 with bit operations
STAGES = [  # in the order the issue asks a short budget to measure (the rest is skipped)
    Stage("preflight", 60, 10),
    Stage("parity", 90, 20),
    Stage("bf16-graph", 100, 30, "none"),
    Stage("fp8-gemv", 100, 30, "fp8", "auto"),
    Stage("int8-gemv", 80, 30, "int8", env=TRITON_INT),
    Stage("int4-gemv", 80, 30, "int4", env=TRITON_INT),
    Stage("ttfa", 120, 30, "none"),
    Stage("codec", 60, 15),
    Stage("serving", 150, 45, "none", frames=32),
    Stage("kernels", 90, 20),
    Stage("split-k", 150, 40),
    Stage("int8", 80, 30, "int8", needs="torchao", env=TORCHAO_INT),
    Stage("int4", 80, 30, "int4", needs="torchao", env=TORCHAO_INT),
    Stage("bf16-compiled", 240, 120, "none", mode="compiled"),
    # a second process on the compile cache bf16-compiled left: seconds to its first frame
    Stage("bf16-compiled-warm", 120, 30, "none", mode="compiled", repeats=1),
    Stage("fp8-compiled", 240, 120, "fp8", "auto", mode="compiled"),
    Stage("int8-compiled", 240, 120, "int8", mode="compiled", env=TRITON_INT),
    Stage("int4-compiled", 240, 120, "int4", mode="compiled", env=TRITON_INT),
    Stage("int8-torchao-compiled", 240, 120, "int8", mode="compiled", needs="torchao",
          env=TORCHAO_INT),
    Stage("int4-torchao-compiled", 240, 120, "int4", mode="compiled", needs="torchao",
          env=TORCHAO_INT),
    Stage("bf16-compiled-tuned", 240, 120, "none", mode="compiled",
          env=(("SAILFISH_COMPILE_TUNING", "on"),)),
    Stage("fp8-gemv-bits", 100, 30, "fp8", "auto", env=FP8_BITS),
    Stage("bf16-eager", 60, 20, "none", mode="eager", frames=16, repeats=1),
    Stage("fp8-dequant", 80, 30, "fp8", "dequant"),
    Stage("codec-fast", 180, 30),
    Stage("realsize-load", 280, 150, default=False),
]
BY_NAME = {s.name: s for s in STAGES}


# ---------------------------------------------------------------------------- stage bodies
def sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def copy_bandwidth(device, nbytes: int) -> float:
    """GB/s of a device-to-device copy, counting bytes read plus bytes written (median of 10)."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    times = []
    for i in range(13):
        sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        sync(device)
        if i >= 3:  # warm-up
            times.append(time.perf_counter() - t0)
    return round(2 * nbytes / statistics.median(times) / 1e9, 1)


def preflight(args) -> dict:
    import torch

    device = torch.device(args.device)
    packages = {}
    for name in OPTIONAL:
        try:
            packages[name] = getattr(import_module(name), "__version__", "?")
        except Exception as e:  # noqa: BLE001 - record why it does not import
            packages[name] = None
            packages[name + "_error"] = f"{type(e).__name__}: {e}"[:200]
    from quant import fp8_gemv

    out = {"python": platform.python_version(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "packages": packages,
           "fp8_gemv_unavailable": fp8_gemv.unavailable(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out.update(gpu=props.name, capability=list(torch.cuda.get_device_capability(device)),
                   multiprocessors=props.multi_processor_count,
                   memory_GB=round(props.total_memory / 1e9, 1))
    nbytes = 2 << 30 if device.type == "cuda" else 64 << 20
    out["copy_GB_per_s"] = copy_bandwidth(device, nbytes)
    return out


def model_config(args):
    """The model's sizes: ``--config``'s, but the fixture's for ``tiny`` (its codebooks are those
    of the fixture's codec, which ``make_codec`` loads, whatever fixture set)."""
    import bench_decode
    from fish_core.engine.config import ModelConfig

    if args.config == "tiny":
        fixtures = Path(os.environ.get("SAILFISH_FIXTURES", ROOT / "tests/fixtures"))
        return ModelConfig.from_file(fixtures / "tiny-s2")
    return bench_decode.make_config(args.config)


def random_model(config, device, dtype):
    """The model built on the meta device, allocated on ``device`` in ``dtype`` and filled with
    N(0, 0.02) matrices and unit norms: no fp32 copy at any time."""
    import torch

    from fish_core.loading.checkpoint import build_meta

    model = build_meta(config, dtype).to_empty(device=device)
    gen = torch.Generator(device).manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.02, generator=gen)
            else:
                p.fill_(1.0)
    model.reset_buffers(device)
    return model.eval().requires_grad_(False)


def what_ran(engine, model) -> dict:
    """Read back what the engine and the layers really did (attributes other branches may add
    are read with defaults)."""
    import quant
    from quant import fp8 as fp8mod

    paths = Counter(m.path for m in model.modules() if isinstance(m, quant.FP8Linear))
    return {"compiled": bool(getattr(engine, "compiled", False)),
            "cuda_graph": bool(getattr(engine, "cuda_graph", False)),
            "graph_captures": getattr(engine, "graph_captures", None),
            "fallbacks": list(getattr(engine, "fallbacks", [])) + list(fp8mod.FALLBACKS),
            "fp8_layer_paths": dict(paths) or None}


def decode(args, stage: Stage) -> dict:
    import torch

    import bench_decode
    from fish_core.engine.runner import Engine
    from fish_core.engine.rows import generate
    from fish_core.params import SamplingParams

    device, dtype = torch.device(args.device), torch.bfloat16
    t0 = time.perf_counter()
    model = random_model(model_config(args), device, dtype)
    if stage.quantization != "none":
        import quant

        model = quant.quantize_model(model, stage.quantization, fp8_path=stage.fp8_path)
    sync(device)
    out = {"build_s": round(time.perf_counter() - t0, 2)}
    if stage.quantization == "fp8":
        from quant.fp8 import resolve_path

        out["fp8_path"] = resolve_path(stage.fp8_path, device)
    if stage.quantization in ("int8", "int4"):
        from quant.convert import int_kernel

        out["int_kernel"] = int_kernel(device)
    if device.type == "cuda":
        out["vram_model_GB"] = round(torch.cuda.memory_allocated(device) / 1e9, 2)
        torch.cuda.reset_peak_memory_stats(device)

    engine = Engine(model, compile=stage.mode == "compiled",
                    cuda_graph=stage.mode != "eager" and device.type == "cuda")
    prompt = bench_decode.prompt_for(model.config, args.prompt_len)
    params = SamplingParams(max_new_tokens=stage.frames)
    first_frame = FirstFrame(device)
    first_s, _ = bench_decode.timed(
        lambda: generate(engine, prompt, params, seed=0, stop_on_eos=False, on_frame=first_frame),
        device)
    out["process_to_first_frame_s"] = first_frame.seconds
    out["process_to_first_decode_step_s"] = first_frame.step_seconds
    runs = [bench_decode.measure(engine, prompt, SimpleNamespace(frames=stage.frames), device)
            for _ in range(stage.repeats)]
    fps = statistics.median(r["decode_fps"] for r in runs)
    frame_bytes = bench_decode.frame_bytes(model, engine, engine.caches.shape[1])
    out.update(frames=stage.frames, repeats=stage.repeats, first_call_s=round(first_s, 2),
               frames_per_s=round(fps, 2), fps_all=[round(r["decode_fps"], 2) for r in runs],
               prefill_tokens_per_s=round(args.prompt_len / statistics.median(
                   r["prefill_s"] for r in runs), 1),
               bytes_per_frame=frame_bytes, effective_GB_per_s=round(frame_bytes * fps / 1e9, 3))
    if args.bandwidth:
        out["fraction_of_bound"] = round(frame_bytes * fps / 1e9 / args.bandwidth, 3)
    if device.type == "cuda":  # decoding only: before the codec is built
        out["vram_peak_GB"] = round(torch.cuda.max_memory_allocated(device) / 1e9, 2)
    if stage.name == "bf16-graph":
        try:  # the codec's imports or build must not cost the decode row
            out.update(time_to_first_audio(args, engine, prompt, device))
        except Exception as e:  # noqa: BLE001 - recorded in the row
            out["time_to_first_audio_error"] = f"{type(e).__name__}: {e}"[:300]
    out.update(what_ran(engine, model))
    out["diagnosis"] = diagnosis(engine, model, prompt, device, dtype)
    if stage.quantization != "none":  # which GEMV configuration won per shape (split-K?)
        from quant import int_gemv

        out["tuned"] = int_gemv.tuned_choices()
    return out


def split_k(args) -> dict:
    """Every split-K configuration of our GEMVs (FP8, int8, int4) on the shapes with small N at
    batch 1: error against the fp32 matmul on the dequantized weights and the same bits over
    three calls (the last program of a block sums the partials in a fixed order: its memory
    ordering is only proven on a GPU), µs per call (``gpu_quant.split_rows``)."""
    import torch

    if torch.device(args.device).type != "cuda":
        return {"skipped": "CUDA only (the interpreter runs one program at a time)"}
    import gpu_quant

    with torch.inference_mode():
        rows = gpu_quant.split_rows(only_split=True)
    ok = [r for r in rows if "error" not in r]
    return {"configs": len(rows), "failed": [r for r in rows if "error" in r],
            "all_same_bits": all(r["same_bits"] for r in ok),
            "max_rel_err": max((r["rel_err"] for r in ok), default=None), "rows": rows}


# ---------------------------------------------------------------------------- diagnosis
PROCESS_START = time.perf_counter()  # the stage's process (a child) imported this module
DIAGNOSIS_TOP = 15
# Kernels (CUDA) or ops (the CPU dry run) that are a Linear's product: GEMV/GEMM of any origin
# (cuBLAS, CUTLASS, tinygemm, our Triton GEMVs, Inductor's decomposed mm reductions are not
# recognisable by name and count as "other").
GEMV_NAMES = re.compile(r"gemv|gemm|xmma|cutlass|cublas|tinygemm|int4pack|int8pack|splitk|"
                        r"_int[48]_kernel|"
                        r"sm\d+_.*(?:h|b)mma|_mm\b|_mm_|aten::(?:mm|addmm|bmm|linear|_weight)",
                        re.IGNORECASE)
LAUNCH_NAMES = re.compile(r"^cu(?:da)?(?:Graph)?Launch", re.IGNORECASE)


class FirstFrame:
    """``on_frame`` callback noting the seconds from the process start to the first frame (made
    by the prefill) and to the second (the first decode step: its compile and CUDA graph
    capture included)."""

    def __init__(self, device):
        self.device, self.seconds, self.step_seconds = device, None, None

    def __call__(self, done: int, total: int) -> None:
        if self.seconds is None or (done == 2 and self.step_seconds is None):
            sync(self.device)
            now = round(time.perf_counter() - PROCESS_START, 2)
            if self.seconds is None:
                self.seconds = now
            else:
                self.step_seconds = now


def device_events(prof, device) -> list[tuple[str, float]]:
    """(name, microseconds) of what ran on the device: CUDA kernels (memcpy/memset included),
    or, on the CPU dry run, every aten op's self time."""
    from torch.autograd import DeviceType

    if device.type == "cuda":
        return [(e.name, e.time_range.elapsed_us()) for e in prof.events()
                if e.device_type == DeviceType.CUDA]
    return [(e.name, e.self_cpu_time_total) for e in prof.events()
            if e.name.startswith("aten::")]


def launch_calls(prof) -> int:
    """Host calls that launch device work (a CUDA graph's replay is one)."""
    return sum(1 for e in prof.events() if LAUNCH_NAMES.match(e.name))


def summarize(events: list[tuple[str, float]], launches: int) -> dict:
    """Kernels per frame, launches, the top ``DIAGNOSIS_TOP`` kernels by time with their share,
    and the Linear products' (GEMV/GEMM) time against everything else."""
    total = sum(us for _, us in events) or 1e-9
    time_by, calls_by = Counter(), Counter()
    for name, us in events:
        time_by[name] += us
        calls_by[name] += 1
    gemv_us = sum(us for name, us in events if GEMV_NAMES.search(name))
    return {"kernels_per_frame": len(events), "launch_calls_per_frame": launches,
            "device_us_per_frame": round(total, 1), "gemv_us": round(gemv_us, 1),
            "other_us": round(total - gemv_us, 1), "gemv_share": round(gemv_us / total, 3),
            "top": [{"kernel": name[:160], "calls": calls_by[name], "us": round(us, 1),
                     "share": round(us / total, 3)}
                    for name, us in time_by.most_common(DIAGNOSIS_TOP)]}


def profiler(device):
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    return profile(activities=activities)


def profile_frame(engine, prompt, device, at: int = 2) -> dict:
    """One decode frame (the step between the ``at``-th and the next frame of a generation, run
    as the stage runs it: eager, CUDA graph or compiled) under ``torch.profiler``."""
    from fish_core.engine.rows import generate
    from fish_core.params import SamplingParams

    prof = profiler(device)
    seen = {}

    def on_frame(done: int, total: int) -> None:
        sync(device)
        if done == at:
            prof.start()
            seen["t0"] = time.perf_counter()
        elif done == at + 1:
            prof.stop()
            seen["wall_us"] = round((time.perf_counter() - seen["t0"]) * 1e6, 1)

    generate(engine, prompt, SamplingParams(max_new_tokens=at + 2), seed=0, stop_on_eos=False,
                    on_frame=on_frame)
    if "wall_us" not in seen:
        raise RuntimeError(f"the generation ended before frame {at + 1}")
    return {"wall_us_per_frame": seen["wall_us"],
            **summarize(device_events(prof, device), launch_calls(prof))}


def linear_kernels(model, device, dtype) -> list[dict]:
    """Per distinct Linear (class, weight type, shape, FP8 path): the kernels one eager call on a
    ``[1, 1, K]`` activation really launches (a dequantize-then-matmul shows up here), with how
    many layers of the model are alike."""
    import torch

    found: dict[tuple, dict] = {}
    for name, m in model.named_modules():
        weight = getattr(m, "weight", None)
        if not (hasattr(m, "in_features") and hasattr(m, "out_features")
                and isinstance(weight, torch.Tensor)):
            continue
        key = (type(m).__name__, type(weight).__name__, m.out_features, m.in_features,
               getattr(m, "path", None))
        if key in found:
            found[key]["layers"] += 1
            continue
        x = torch.randn(1, 1, m.in_features, device=device).to(dtype)
        with torch.inference_mode():
            m(x)  # warm-up: autotuning, lazy builds
            sync(device)
            prof = profiler(device)
            with prof:
                m(x)
                sync(device)
        events = device_events(prof, device)
        found[key] = {"layer": name, "class": key[0], "weight": key[1], "shape": [key[2], key[3]],
                      "path": key[4], "layers": 1,
                      "kernels": list(dict.fromkeys(n[:120] for n, _ in events)),
                      "us": round(sum(us for _, us in events), 1)}
    return list(found.values())


def diagnosis(engine, model, prompt, device, dtype) -> dict:
    """``profile_frame`` and ``linear_kernels``; a failure is recorded, never fatal."""
    out = {}
    for key, run in (("frame", lambda: profile_frame(engine, prompt, device)),
                     ("linears", lambda: linear_kernels(model, device, dtype))):
        try:
            out[key] = run()
        except Exception as e:  # noqa: BLE001 - recorded in the row
            out[key + "_error"] = f"{type(e).__name__}: {e}"[:300]
    return out


def kernel_counts(args) -> dict:
    """``bench/count_ops.py`` on the device: the fixture's config widened to S2-Pro's depth,
    bf16, eager (every op a launch; a CUDA graph replays the same kernels): ops a decode frame,
    a join and a prefill (dispatch counts, the top ops), and one frame under the profiler
    (kernels and launch calls a frame, the top kernels by time)."""
    import torch

    import count_ops
    from fish_core.engine.runner import Engine
    from fish_core.loading.checkpoint import join_feed_forwards

    device = torch.device(args.device)
    config = count_ops.widened_config()
    model = count_ops.random_model(config, torch.bfloat16).to(device)
    if device.type == "cuda":  # as the loader leaves a model on CUDA
        join_feed_forwards(model)
    engine = Engine(model, cuda_graph=False)
    prompt = count_ops.prompt_for(config, min(args.prompt_len, 256))
    out = {"depth": list(count_ops.s2_pro_depth()), "prompt_len": prompt.shape[1],
           **count_ops.frame_counts(engine, prompt)}
    out["profiled_frame"] = profile_frame(engine, prompt, device)
    out["first_codec_chunk"] = count_ops.codec_chunk_counts(device=device)
    return out


def make_codec(args, device):
    from fish_core.codec.model import Codec

    if args.config == "real":
        from bench_codec import random_real_codec

        return random_real_codec(device=device)
    fixtures = Path(os.environ.get("SAILFISH_FIXTURES", ROOT / "tests/fixtures"))
    return Codec.from_file(fixtures / "tiny-s2", device=device)


def golden_cases(golden: Path) -> list[tuple[str, str, int]]:
    """(prompt key, raw_new_columns key, max_new_tokens) of every greedy golden batch."""
    meta = json.loads((golden / "prompts.json").read_text())
    return [(f"{name}.batch{i}.prompt", f"{name}.batch{i}.raw_new_columns",
             value["generate_long_kwargs"]["max_new_tokens"])
            for name, value in meta.items() if isinstance(value, dict) and "batches" in value
            for i in range(len(value["batches"]))]


def llm_parity(engine, golden: Path) -> dict:
    """Columns equal to the reference's: every greedy golden batch, then the seeded run."""
    from safetensors.torch import load_file

    from fish_core.engine.rows import generate
    from fish_core.params import SamplingParams

    prompts = load_file(str(golden / "prompts.safetensors"))
    gen = load_file(str(golden / "generation.safetensors"))
    out = {}
    for prompt_key, raw_key, max_new in golden_cases(golden):
        params = SamplingParams(temperature=0.7, top_p=0.7, top_k=1, max_new_tokens=max_new)
        columns = generate(engine, prompts[prompt_key], params)[0].columns.cpu()
        out[prompt_key.removesuffix(".prompt")] = bool(columns.equal(gen[raw_key]))
    meta = json.loads((golden / "generation.json").read_text())["sampled_b_seed42"]
    params = SamplingParams(meta["temperature"], meta["top_p"], meta["top_k"],
                            meta["max_new_tokens"])
    columns = generate(engine, prompts["b_clone.batch0.prompt"], params,
                       seed=meta["seed"])[0].columns.cpu()
    out["sampled_b_seed42"] = bool(columns.equal(gen["sampled_b_seed42.raw_new_columns"]))
    return out


def codec_parity(device, fixtures: Path) -> dict:
    """The fixture's codec in fp32: encode codes equal to the reference's, decode's largest
    error."""
    import torch
    from safetensors.torch import load_file

    from fish_core.codec.model import Codec

    gold = load_file(str(fixtures / "golden/codec.safetensors"))
    codec = Codec.from_file(fixtures / "tiny-s2", device=device)
    codec.set_precision(encode=torch.float32, decode=torch.float32)
    codes = codec.encode(gold["wave"].to(device))[0].cpu()
    wave = codec.decode(gold["codes"].to(device))[0, 0].cpu()
    return {"encode_codes_equal": bool(codes.equal(gold["codes"])),
            "decode_max_abs_err": float((wave - gold["decode"]).abs().max())}


def parity(args) -> dict:
    """The goldens of the official implementation on this device, first (a fast number is worth
    nothing if it is wrong): the fixture's tiny model in fp32 with TF32 off, eager and, on CUDA,
    through the CUDA graph, each with and without bucketed prefills — greedy columns of
    every golden batch and the seeded run (the same draws as the reference) — and the codec's
    encode codes and decode error (tolerance 1e-4, as the tests)."""
    import torch

    from fish_core.engine.runner import Engine
    from fish_core.loading.checkpoint import load_model

    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    fixtures = Path(os.environ.get("SAILFISH_FIXTURES", ROOT / "tests/fixtures"))
    golden = fixtures / "golden"
    if not golden.is_dir():
        return {"skipped": "the fixture set has no goldens"}
    model = load_model(fixtures / "tiny-s2", device=device, dtype=torch.float32)
    out = {"eager": llm_parity(Engine(model, cuda_graph=False), golden),
           "eager-buckets": llm_parity(Engine(model, cuda_graph=False, prefill_buckets=True),
                                       golden)}
    if device.type == "cuda":
        out["graph"] = llm_parity(Engine(model, cuda_graph=True, prefill_buckets=False), golden)
        # prefills padded to their length bucket and replayed from a graph per bucket
        out["graph-buckets"] = llm_parity(Engine(model, cuda_graph=True, prefill_buckets=True),
                                          golden)
    out["codec"] = codec_parity(device, fixtures)
    modes = ("eager", "eager-buckets", "graph", "graph-buckets")
    out["unequal"] = [f"{mode}:{case}" for mode in modes
                      for case, equal in out.get(mode, {}).items() if not equal]
    out["unequal"] += [] if out["codec"]["encode_codes_equal"] else ["codec:encode"]
    out["unequal"] += [] if out["codec"]["decode_max_abs_err"] <= 1e-4 else ["codec:decode"]
    out["all_equal"] = not out["unequal"]
    return out


def time_to_first_audio(args, engine, prompt, device) -> dict:
    """Seconds from the request to a stream's first audio as the product makes it: prefill,
    ``params.FIRST_FRAMES`` frames, and their codec decode in the device's default precisions
    (fp16 decode on CUDA; median of 3 after a warm-up)."""
    import bench_decode
    from fish_core.engine.device import codec_dtypes_for
    from fish_core.params import FIRST_FRAMES

    codec = make_codec(args, device)
    encode_dtype, decode_dtype = codec_dtypes_for(device)
    codec.set_precision(encode=encode_dtype, decode=decode_dtype)
    seconds = bench_decode.time_to_first_audio(engine, codec, prompt, FIRST_FRAMES, device, 3)
    return {"time_to_first_audio_s": round(seconds, 4), "ttfa_frames": FIRST_FRAMES,
            "ttfa_codec_dtype": str(decode_dtype).removeprefix("torch.")}


def codec_speed(args, seconds: float = 10.0) -> dict:
    """Encode and decode of ``seconds`` of audio: × real time (audio seconds per wall second)."""
    import torch

    import bench_decode

    device = torch.device(args.device)
    codec = make_codec(args, device)
    frames = round(seconds * codec.sample_rate / codec.frame_length)
    gen = torch.Generator().manual_seed(0)
    audio = 0.1 * torch.randn(frames * codec.frame_length, generator=gen)
    codes = codec.encode(audio)[0]  # [1 + K, frames], also the warm-up
    codec.decode(codes)
    out = {"audio_s": round(frames * codec.frame_length / codec.sample_rate, 2)}
    for op, run in (("encode", lambda: codec.encode(audio)), ("decode",
                                                              lambda: codec.decode(codes))):
        median = statistics.median(bench_decode.timed(run, device)[0] for _ in range(3))
        out[f"{op}_x_realtime"] = round(out["audio_s"] / median, 1)
    out["first_chunk"] = first_chunk(codec, device)
    return out


def first_chunk(codec, device) -> dict:
    """A stream's first chunk in the device's default decode precision: eager against its CUDA
    graph's replay, the fused Snake against the eager formula, cudnn.benchmark left as it was
    (``bench_codec.first_chunk_check``; on a CPU the eager path both ways)."""
    import bench_codec
    from fish_core.engine.device import codec_dtypes_for

    try:  # a failure here must not cost the speed figures
        codec.set_precision(decode=codec_dtypes_for(device)[1])
        return bench_codec.first_chunk_check(codec, repeats=10)
    except Exception as e:  # noqa: BLE001 - recorded in the row
        return {"error": f"{type(e).__name__}: {e}"[:300]}


REALSIZE_PRECISIONS = ("bf16", "int8", "int4")


def realsize_load(args) -> dict:
    """Write the stand-in of ``args.config`` (weights drawn on the device, LLM shards only) and
    load it once per precision, each in a fresh process (``bench_realsize.py --load-only``)."""
    import torch

    import make_standin

    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as folder:
        t0 = time.perf_counter()
        info = make_standin.make_standin(Path(folder), args.config, codec=False, device=device)
        out = {"write_s": round(time.perf_counter() - t0, 1),
               "checkpoint_GB": round(info["llm_bytes"] / 1e9, 3), "loads": {}}
        for precision in REALSIZE_PRECISIONS:
            cmd = [sys.executable, str(ROOT / "bench/bench_realsize.py"), "--one", precision,
                   "--model", folder, "--device", args.device, "--threads", "1", "--load-only"]
            done = subprocess.run(cmd, capture_output=True, text=True)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            out["loads"][precision] = (json.loads(lines[-1]) if lines and not done.returncode
                                       else {"error": last_error(done.stderr or done.stdout)})
    return out


SERVING_ROWS = 8


def serving(args, stage: Stage) -> dict:
    """Continuous batching on the engine (``RowBatch``, the rows the HTTP scheduler uses):
    ``stage.frames`` frames per request; one request alone, then ``SERVING_ROWS`` requests
    joining together; time to the first ``FIRST_FRAMES`` frames (prefill included, codec not);
    and a prompt's join (prefill + first frame) with its voice prefix (all but its last 16
    tokens) computed vs reused from the prefix cache."""
    import torch

    import bench_decode
    from fish_core.engine.rows import RowBatch
    from fish_core.engine.runner import Engine
    from fish_core.params import FIRST_FRAMES, SamplingParams

    device = torch.device(args.device)
    model = random_model(bench_decode.make_config(args.config), device, torch.bfloat16)
    engine = Engine(model, cuda_graph=device.type == "cuda")
    engine.allowed = [t for t in engine.allowed if t != model.config.eos_token_id]
    engine._weights = None  # never sample the stop token: every request makes every frame
    engine.follow_model()
    prompt = bench_decode.prompt_for(model.config, args.prompt_len)
    params = SamplingParams(max_new_tokens=stage.frames)

    def run(rows: int, joining: int) -> dict:
        batch = RowBatch(engine, rows)
        sync(device)
        t0 = time.perf_counter()
        for i in range(joining):
            batch.join(prompt, params, i)
        first, frames = None, 1
        while not all(batch.ended(r) for r in batch.active):
            batch.step()
            frames += 1
            if frames == FIRST_FRAMES:
                first = time.perf_counter() - t0  # the step returned its columns on the host
        sync(device)
        wall = time.perf_counter() - t0
        for r in batch.active:
            batch.leave(r)
        return {"ttfa_frames_s": round(first or wall, 4),
                "frames_per_s": round(joining * stage.frames / wall, 2)}

    run(1, 1)  # warm-up (and the graph of one row)
    alone = run(1, 1)
    run(SERVING_ROWS, SERVING_ROWS)  # warm-up of the wider graph
    together = run(SERVING_ROWS, SERVING_ROWS)
    # The ratios first: the table shows the start of this row.
    out = {"throughput_ratio": round(together["frames_per_s"] / alone["frames_per_s"], 2),
           "ttfa_ratio": round(together["ttfa_frames_s"] / alone["ttfa_frames_s"], 2)}
    prefix = max(1, args.prompt_len - 16)
    batch = RowBatch(engine, 1)
    for label in ("join_prefix_computed_s", "join_prefix_reused_s"):
        sync(device)
        t0 = time.perf_counter()
        row, _ = batch.join(prompt, params, 0, prefix)
        sync(device)
        out[label] = round(time.perf_counter() - t0, 4)
        batch.leave(row)
    out.update(prefix_hits=engine.prefixes.hits, frames=stage.frames, rows=SERVING_ROWS,
               alone=alone, together=together)
    out.update(what_ran(engine, model))
    return out


# ------------------------------------------------- time to first audio, the codec's precisions
TTFA_PROMPT_LENGTHS = (64, 128, 256, 512)
TTFA_FIRST_FRAMES = (1, 2, 4, 8)


def join_profile(engine, prompt, device) -> dict:
    """What one prompt's join (prefill + first frame) runs: the ATen ops called from Python,
    the host syncs among them and, on CUDA, the kernels launched."""
    from torch.profiler import ProfilerActivity, profile

    from fish_core.engine.rows import generate
    from fish_core.params import SamplingParams

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda"
                                           else [])
    with profile(activities=activities) as prof:
        generate(engine, prompt, SamplingParams(max_new_tokens=1), seed=0)
        sync(device)
    events = prof.events()
    top = [e for e in events if e.name.startswith("aten::") and e.cpu_parent is None]
    out = {"aten_ops": len(top),  # values read on the host (.item(), .tolist())
           "scalar_reads": sum(e.name == "aten::_local_scalar_dense" for e in events)}
    if device.type == "cuda":
        out["stream_syncs"] = sum(e.name in ("cudaStreamSynchronize", "cudaDeviceSynchronize")
                                  for e in events)
        out["kernel_launches"] = sum(e.name in ("cudaLaunchKernel", "cudaLaunchKernelExC",
                                                "cuLaunchKernel", "cudaGraphLaunch")
                                     for e in events)
    return out


def ttfa_stage(args) -> dict:
    """Time to first audio at batch 1 (bf16, CUDA graph on CUDA), median of 3 after a warm-up:
    prefill + first frame per prompt length (as by default, then with bucketed prefills, graphed
    per bucket on CUDA: their captures in the warm-up), then per first-chunk size
    (``first_frames``, the setting streams use: ``params.FIRST_FRAMES``) the whole and its
    parts: prefill + frames, and the codec decode of those frames in the default precisions
    (``codec_dtypes_for``)."""
    import torch

    import bench_decode
    from fish_core.engine.device import codec_dtypes_for
    from fish_core.engine.runner import Engine
    from fish_core.engine.rows import generate
    from fish_core.params import FIRST_FRAMES, SamplingParams

    device = torch.device(args.device)
    model = random_model(model_config(args), device, torch.bfloat16)
    engine = Engine(model, cuda_graph=device.type == "cuda")

    def median_s(fn) -> float:
        fn()  # warm-up (a first-frame graph is captured here, once per row)
        return round(statistics.median(bench_decode.timed(fn, device)[0] for _ in range(3)), 4)

    one = SamplingParams(max_new_tokens=1)
    lengths = [n for n in TTFA_PROMPT_LENGTHS if n < engine.max_context - 16]
    prefill, bucketed = {}, {}
    for n in lengths:  # as the engine runs by default, then with bucketed (graphed) prefills
        prompt = bench_decode.prompt_for(model.config, n)
        prefill[n] = median_s(lambda: generate(engine, prompt, one, seed=0))
    default_buckets, engine.prefill_buckets = engine.prefill_buckets, True
    for n in lengths:
        prompt = bench_decode.prompt_for(model.config, n)
        bucketed[n] = median_s(lambda: generate(engine, prompt, one, seed=0))
    engine.prefill_buckets = default_buckets
    out = {"prefill_first_frame_s": prefill,
           "prefill_tokens_per_s": {n: round(n / t, 1) for n, t in prefill.items()},
           "prefill_buckets_default": default_buckets,
           "prefill_first_frame_bucketed_s": bucketed,
           "prefill_captures": engine.prefill_captures,
           "first_frame_graphs": engine.first_captures}
    prompt = bench_decode.prompt_for(model.config, args.prompt_len)
    out["join_profile"] = join_profile(engine, prompt, device)

    codec = make_codec(args, device)
    encode_dtype, decode_dtype = codec_dtypes_for(device)
    codec.set_precision(encode=encode_dtype, decode=decode_dtype)
    out["codec_decode_dtype"] = str(decode_dtype).removeprefix("torch.")
    rows = {}
    for frames in TTFA_FIRST_FRAMES:
        params = SamplingParams(max_new_tokens=frames)
        codes = generate(engine, prompt, params, seed=0, stop_on_eos=False)[0].codes.to(device)
        generate_s = median_s(lambda: generate(engine, prompt, params, seed=0, stop_on_eos=False))
        decode_s = median_s(lambda: codec.decode_chunk(codes[None], {}))
        total = round(bench_decode.time_to_first_audio(engine, codec, prompt, frames, device, 3),
                      4)
        rows[frames] = {"ttfa_s": total, "prefill_and_frames_s": generate_s,
                        "codec_decode_s": decode_s}
    graphs = codec.first_chunk_graphs  # a stream's first chunk: one CUDA graph per shape
    out.update(codec_first_chunk_graphs=len(graphs.graphs),
               codec_first_chunk_failures={str(k): v for k, v in graphs.failures.items()})
    out.update(first_frames_setting=FIRST_FRAMES, by_first_frames=rows,
               ttfa_s=rows.get(FIRST_FRAMES, {}).get("ttfa_s"),
               graph_captures=engine.graph_captures, fallbacks=list(engine.fallbacks))
    return out


CODEC_PRECISIONS = ("fp32", "fp16", "bf16")


def codec_precisions(args) -> dict:
    """The codec in each precision (both paths), chunked as by default on the device: encode
    and decode × real time (median of 3), the decode's SNR against fp32's and the fraction of
    encode codes equal to fp32's; on CUDA also fp16 with ``compile_activations`` (its compile
    seconds apart)."""
    import math

    import torch

    import bench_decode
    from fish_core.engine.device import DTYPES

    device = torch.device(args.device)
    codec = make_codec(args, device)
    seconds = 10.0 if device.type == "cuda" else 1.0  # the CPU dry run: fp16 convs are slow
    frames = round(seconds * codec.sample_rate / codec.frame_length)
    gen = torch.Generator().manual_seed(0)
    audio = 0.1 * torch.randn(frames * codec.frame_length, generator=gen)
    audio_s = frames * codec.frame_length / codec.sample_rate
    out = {"audio_s": round(audio_s, 2), "precisions": {}}
    reference = None
    runs = [(p, False) for p in CODEC_PRECISIONS] + [("fp16", True)] * (device.type == "cuda")
    for precision, compiled in runs:
        dtype = DTYPES[precision]
        codec.set_precision(encode=dtype, decode=dtype)
        row = {}
        if compiled:
            codec.compile_activations()
        t0 = time.perf_counter()
        codes = codec.encode(audio)[0]  # also the warm-up (and the compile)
        wave = codec.decode(reference[0] if reference else codes)
        sync(device)
        if compiled:
            row["compile_s"] = round(time.perf_counter() - t0, 1)
        if reference is None:
            reference = (codes, wave)
        else:
            noise = (wave.double() - reference[1].double()).pow(2).sum().item()
            power = reference[1].double().pow(2).sum().item()
            row["decode_snr_db"] = round(10 * math.log10(power / max(noise, 1e-300)), 1)
            row["encode_codes_equal"] = round((codes == reference[0]).float().mean().item(), 4)
        for op, run in (("encode", lambda: codec.encode(audio)),
                        ("decode", lambda: codec.decode(reference[0]))):
            median = statistics.median(bench_decode.timed(run, device)[0] for _ in range(3))
            row[f"{op}_x_realtime"] = round(audio_s / median, 1)
        out["precisions"][precision + ("-compiled" if compiled else "")] = row
    return out


def run_stage(args) -> dict:
    """The body of one stage, in this (child) process; warnings are recorded, not printed."""
    import torch

    stage = BY_NAME[args.stage]
    os.environ.update(dict(stage.env))
    if args.device == "cpu":  # a dry run of the GPU command, not a CPU benchmark: one thread
        torch.set_num_threads(1)
    if args.fail_stage == stage.name:
        raise RuntimeError(f"forced failure of stage {stage.name} (--fail-stage)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if stage.name == "preflight":
            out = preflight(args)
        elif stage.name == "parity":
            out = parity(args)
        elif stage.name == "kernels":
            out = kernel_counts(args)
        elif stage.name == "split-k":
            out = split_k(args)
        elif stage.name == "codec":
            out = codec_speed(args)
        elif stage.name == "serving":
            out = serving(args, stage)
        elif stage.name == "realsize-load":
            out = realsize_load(args)
        elif stage.name == "ttfa":
            out = ttfa_stage(args)
        elif stage.name == "codec-fast":
            out = codec_precisions(args)
        else:
            out = decode(args, stage)
    messages = list(dict.fromkeys(str(w.message).splitlines()[0][:300] for w in caught))
    out["warnings"] = [m for m in messages if "deprecated" not in m][:20]
    return out


# ---------------------------------------------------------------------------- the driver
def child_command(args, stage: Stage, result_path: str, bandwidth: float | None) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--stage", stage.name, "--result",
           result_path, "--device", args.device, "--config", args.config,
           "--prompt-len", str(args.prompt_len)]
    if bandwidth:
        cmd += ["--bandwidth", str(bandwidth)]
    if args.fail_stage:
        cmd += ["--fail-stage", args.fail_stage]
    return cmd


def spawn(cmd: list[str], timeout: float) -> tuple[int | None, str]:
    """Run ``cmd`` in its own process group; kill the whole group (compile workers too) past
    ``timeout``. Returns (exit code or None on timeout, the tail of its output)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
        return proc.returncode, output[-3000:]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return None, (output or "")[-3000:]


def skip_reason(stage: Stage, left: float, preflight: dict | None) -> str | None:
    if left < stage.min_s:
        return f"budget: {left:.0f} s left, the stage needs at least {stage.min_s:.0f} s"
    if stage.needs and preflight is not None and not preflight["packages"].get(stage.needs):
        return f"{stage.needs} does not import here"
    return None


def drive(args) -> dict:
    names = args.stages.split(",") if args.stages else [s.name for s in STAGES if s.default]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        sys.exit(f"--stages: unknown stage(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    out_path = Path(args.json or Path(os.environ.get("OUT", ".")) / "gpu_first.json")
    report = {"command": sys.argv, "device": args.device, "config": args.config,
              "budget_s": args.budget, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
              "stages": {}}
    start, preflight_result, bandwidth = time.perf_counter(), None, args.bandwidth
    with tempfile.TemporaryDirectory() as tmp:
        # one compile cache for every stage: the warm stage starts on what a cold one left
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(tmp) / "inductor"))
        for stage in (BY_NAME[n] for n in names):
            left = args.budget - (time.perf_counter() - start)
            reason = skip_reason(stage, left, preflight_result)
            if reason:
                report["stages"][stage.name] = {"status": "skipped", "reason": reason}
            else:
                entry = run_one(args, stage, min(stage.timeout_s, left), tmp, bandwidth)
                report["stages"][stage.name] = entry
                if stage.name == "preflight" and entry["status"] == "ok":
                    preflight_result = entry["result"]
                    bandwidth = bandwidth or preflight_result.get("copy_GB_per_s")
            if stage.name == "preflight" and not bandwidth and args.device != "cpu":
                bandwidth = H200_COPY_GB_S
            report["bandwidth_GB_per_s"] = bandwidth
            report["elapsed_s"] = round(time.perf_counter() - start, 1)
            write(out_path, report)
            print(f"[{report['elapsed_s']:6.1f} s] {stage.name}: "
                  f"{report['stages'][stage.name]['status']}", flush=True)
    report["decisions"] = decisions(report)
    write(out_path, report)
    print_table(report)
    print_diagnosis(report)
    print_decisions(report)
    print(f"JSON: {out_path}")
    return report


def run_one(args, stage: Stage, timeout: float, tmp: str, bandwidth: float | None) -> dict:
    result_path = str(Path(tmp) / f"{stage.name}.json")
    t0 = time.perf_counter()
    code, tail = spawn(child_command(args, stage, result_path, bandwidth), timeout)
    entry = {"seconds": round(time.perf_counter() - t0, 1)}
    if code is None:
        entry.update(status="timeout", error=f"killed after {timeout:.0f} s", output_tail=tail)
    elif code != 0 or not Path(result_path).is_file():
        entry.update(status="error", exit_code=code, error=last_error(tail), output_tail=tail)
    else:
        entry.update(status="ok", result=json.loads(Path(result_path).read_text()))
    return entry


def last_error(tail: str) -> str:
    lines = [line for line in tail.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else "no output"


def write(path: Path, report: dict) -> None:
    """Write ``report`` atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2))
    tmp.replace(path)


# Issue 46, items 4-5: the defaults this run decides (the code holds them: quant/convert.py
# AUTO_INT_KERNEL for int8/int4 on CUDA; the nodes' and CLI's compile default, off today;
# engine/runner.py PREFILL_BUCKETS_ON_CUDA).
WARM_START_LIMIT_S = 15.0  # compile on by default only if a warm second start is this quick
INT_RACES = (("int8", "int8-gemv", "int8"), ("int4", "int4-gemv", "int4"))


def fps(report: dict, stage: str) -> float | None:
    entry = report["stages"].get(stage, {})
    return entry.get("result", {}).get("frames_per_s") if entry.get("status") == "ok" else None


def int_decision(report: dict, mode: str, ours: str, torchao: str) -> dict:
    """Our Triton GEMV becomes the CUDA default for ``mode`` when it beats torchao in the same
    (graph) mode; undecided when either did not run."""
    from quant.convert import AUTO_INT_KERNEL

    a, b = fps(report, ours), fps(report, torchao)
    out = {"ours_frames_per_s": a, "torchao_frames_per_s": b, "current": AUTO_INT_KERNEL}
    if a is None or b is None:
        out.update(decided=None, reason=f"{ours if a is None else torchao} did not run")
    else:
        out.update(decided="triton" if a > b else "torchao", speedup=round(a / b, 3))
    return out


def compile_decision(report: dict) -> dict:
    """Compile on by default only if a warm second start reaches its first frame within
    ``WARM_START_LIMIT_S`` and the compiled frame is faster than the graphed one."""
    warm = report["stages"].get("bf16-compiled-warm", {}).get("result", {})
    first = warm.get("process_to_first_frame_s")
    graph, compiled = fps(report, "bf16-graph"), fps(report, "bf16-compiled")
    out = {"warm_first_frame_s": first, "limit_s": WARM_START_LIMIT_S,
           "graph_frames_per_s": graph, "compiled_frames_per_s": compiled, "current": "off"}
    if None in (first, graph, compiled):
        out.update(decided=None, reason="bf16-graph, bf16-compiled or its warm start did not run")
    else:
        quick, faster = first <= WARM_START_LIMIT_S, compiled > graph
        out.update(decided="on" if quick and faster else "off", warm_start_ok=quick,
                   compiled_faster=faster)
    return out


def buckets_decision(report: dict) -> dict:
    """Bucketed (graphed) prefills on by default on CUDA (``runner.PREFILL_BUCKETS_ON_CUDA``)
    only if the goldens hold with them and the prefill + first frame is quicker in total over
    the prompt lengths measured."""
    parity = report["stages"].get("parity", {}).get("result", {})
    ttfa = report["stages"].get("ttfa", {}).get("result", {})
    plain, bucketed = ttfa.get("prefill_first_frame_s"), ttfa.get("prefill_first_frame_bucketed_s")
    from fish_core.engine.runner import PREFILL_BUCKETS_ON_CUDA

    out = {"current": "on" if PREFILL_BUCKETS_ON_CUDA else "off", "graph_buckets_equal": None}
    if "graph-buckets" in parity:
        out["graph_buckets_equal"] = all(parity["graph-buckets"].values())
    if not plain or not bucketed or out["graph_buckets_equal"] is None:
        out.update(decided=None, reason="parity on CUDA or ttfa did not run")
        return out
    plain_s, bucketed_s = sum(plain.values()), sum(bucketed.values())
    out.update(plain_s=round(plain_s, 4), bucketed_s=round(bucketed_s, 4),
               decided="on" if out["graph_buckets_equal"] and bucketed_s < plain_s else "off")
    return out


def decisions(report: dict) -> dict:
    out = {mode: int_decision(report, mode, ours, torchao) for mode, ours, torchao in INT_RACES}
    out["compile"] = compile_decision(report)
    out["prefill_buckets"] = buckets_decision(report)
    return out


def print_decisions(report: dict) -> None:
    print("| default | current | decided by this run | inputs |")
    print("|---|---|---|---|")
    for name, d in report["decisions"].items():
        inputs = {k: v for k, v in d.items() if k not in ("current", "decided")}
        print(f"| {name} | {d['current']} | {d['decided'] or 'undecided'} | "
              f"{json.dumps(inputs)[:200]} |")


def print_table(report: dict) -> None:
    print("| stage | status | frames/s | GB/s | of bound | TTFA s | VRAM peak GB | compiled | "
          "graph (captures) | FP8 kernels | fallbacks |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, entry in report["stages"].items():
        r = entry.get("result", {})
        if entry["status"] != "ok" or "frames_per_s" not in r:
            shown = ({"all_equal": r["all_equal"], "unequal": r["unequal"]} if "all_equal" in r
                     else {k: v for k, v in r.items() if k not in ("warnings", "rows")})
            note = entry.get("reason") or entry.get("error") or json.dumps(shown)[:200]
            print(f"| {name} | {entry['status']} | {note} |")
            continue
        print(f"| {name} | ok | {r['frames_per_s']} | {r['effective_GB_per_s']} | "
              f"{r.get('fraction_of_bound')} | {r.get('time_to_first_audio_s', '')} | "
              f"{r.get('vram_peak_GB', '')} | {r['compiled']} | {r['cuda_graph']} "
              f"({r['graph_captures']}) | {r['fp8_layer_paths'] or ''} | "
              f"{'; '.join(r['fallbacks'])[:120]} |")


def print_diagnosis(report: dict) -> None:
    """Per decode stage: kernels and launches per frame, the GEMV share, the top 3 kernels, and
    the kernels of each distinct quantized Linear."""
    print("| stage | kernels/frame | launches/frame | device us/frame | GEMV share | top kernels |")
    print("|---|---|---|---|---|---|")
    for name, entry in report["stages"].items():
        d = entry.get("result", {}).get("diagnosis")
        if not d:
            continue
        f = d.get("frame")
        if not f:
            print(f"| {name} | {d.get('frame_error', '')[:150]} |")
            continue
        top = "; ".join(f"{t['kernel'][:50]} {t['share']:.0%}" for t in f["top"][:3])
        print(f"| {name} | {f['kernels_per_frame']} | {f['launch_calls_per_frame']} | "
              f"{f['device_us_per_frame']} | {f['gemv_share']} | {top} |")
    for name, entry in report["stages"].items():
        for layer in entry.get("result", {}).get("diagnosis", {}).get("linears", []):
            if layer["class"] != "Linear" or layer["weight"] not in ("Parameter", "Tensor"):
                print(f"  {name}: {layer['class']}/{layer['weight']} {layer['shape']} "
                      f"x{layer['layers']}: {', '.join(layer['kernels'])[:200]}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--config", default="real", choices=["tiny", "medium", "real"])
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for all stages")
    ap.add_argument("--bandwidth", type=float, default=None,
                    help="GB/s for the fraction of the bound (default: measured in preflight)")
    defaults = ",".join(s.name for s in STAGES if s.default)
    ap.add_argument("--stages", help=f"comma list, in order (default all but realsize-load: "
                    f"{defaults})")
    ap.add_argument("--json",
                    help="output file (default $OUT/gpu_first.json, else ./gpu_first.json)")
    ap.add_argument("--fail-stage", help="make this stage raise (to test that the others report)")
    ap.add_argument("--stage", help=argparse.SUPPRESS)  # child: run one stage
    ap.add_argument("--result", help=argparse.SUPPRESS)  # child: write its result here
    args = ap.parse_args(argv)
    if args.stage:
        Path(args.result).write_text(json.dumps(run_stage(args)))
        return None
    return drive(args)


if __name__ == "__main__":
    main()
