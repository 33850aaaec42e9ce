"""Decode benchmark: prefill tokens/s, decode frames/s, fast-AR share, recompiles, peak memory,
effective GB/s and the fraction of the memory-bandwidth bound — eager and compiled side by side.

    python bench/bench_decode.py --config tiny --frames 64 --repeats 5
    python bench/bench_decode.py --model /path/to/s2-pro --device cuda --dtype bfloat16
    python bench/bench_decode.py --config real --device cuda --bandwidth 4800 --json out.json

Random weights are used for --config (speed does not depend on their values); the stop token is
ignored (--ignore-eos, the default) so every run decodes exactly --frames frames.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fish_core.loading.checkpoint import load_model  # noqa: E402
from fish_core.engine.config import ModelConfig  # noqa: E402
from fish_core.engine.runner import Engine  # noqa: E402
from fish_core.engine.rows import generate  # noqa: E402
from fish_core.params import SamplingParams  # noqa: E402
from fish_core.engine.model import DualAR  # noqa: E402

REAL_CONFIG = Path(__file__).resolve().parents[1] / "tests/fixtures/real-s2-config.json"
SIZES = {
    # name: (dim, layers, heads, kv heads, head dim, ffn, fast layers, vocab, codebook)
    "tiny": (64, 2, 8, 2, 16, 128, 2, 704, 64),
    "medium": (1024, 8, 16, 4, 64, 3072, 4, 155776, 4096),
}


def make_config(name: str) -> ModelConfig:
    real = ModelConfig.from_file(REAL_CONFIG)
    if name == "real":
        return real
    dim, layers, heads, kv, hd, ffn, fast_layers, vocab, cb = SIZES[name]
    data = real.to_dict()
    data["text_config"].update(dim=dim, n_layer=layers, n_head=heads, n_local_heads=kv,
                               head_dim=hd, intermediate_size=ffn, vocab_size=vocab)
    data["audio_decoder_config"].update(dim=dim, text_dim=dim, n_layer=fast_layers, n_head=heads,
                                        n_local_heads=kv, head_dim=hd, intermediate_size=ffn,
                                        vocab_size=cb)
    data.update(eos_token_id=vocab - cb - 40, pad_token_id=vocab - cb - 20,
                audio_pad_token_id=vocab - cb - 3, semantic_start_token_id=vocab - cb - 2,
                semantic_end_token_id=vocab - 3)
    return ModelConfig.from_dict(data)


def random_model(config: ModelConfig, device, dtype) -> DualAR:
    with torch.device(device):
        model = DualAR(config)
    model = model.to(dtype)
    gen = torch.Generator(device).manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.02, generator=gen)
    model.reset_buffers(device)
    return model.eval().requires_grad_(False)


def frame_bytes(model: DualAR, engine: Engine, cache_len: int) -> int:
    """Bytes read from memory for one frame at batch 1: slow layers + sampled head rows, then the
    fast layers and head once per residual codebook, plus the KV cache."""
    from quant import tensor_bytes, weight_bytes

    slow = sum(weight_bytes(layer) for layer in model.layers) + tensor_bytes(engine.head)
    fast = sum(weight_bytes(layer) for layer in model.fast_layers) + weight_bytes(model.fast_output)
    t = model.config.text
    kv = cache_len * t.n_layer * 2 * t.n_local_heads * t.head_dim * engine.head.element_size()
    return slow + (model.config.num_codebooks - 1) * fast + kv


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device):
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t0, out


def prompt_for(config: ModelConfig, length: int) -> torch.Tensor:
    prompt = torch.zeros(1 + config.num_codebooks, length, dtype=torch.long)
    prompt[0] = torch.arange(length) % (config.semantic_start_token_id - 1)
    return prompt


def count_recompiles(engine, prompt, params, device) -> int:
    import torch._dynamo.utils as dutils

    before = dutils.counters["stats"]["unique_graphs"]
    generate(engine, prompt, params, seed=1, stop_on_eos=False)
    sync(device)
    return dutils.counters["stats"]["unique_graphs"] - before


def measure(engine: Engine, prompt, args, device) -> dict:
    params = SamplingParams(max_new_tokens=args.frames)
    one = SamplingParams(max_new_tokens=1)
    # prefill = a one-frame generation; decode = the rest, from the per-frame callback clock.
    prefill_s, _ = timed(lambda: generate(engine, prompt, one, seed=0), device)
    stamps = []

    def on_frame(i, n):
        sync(device)
        stamps.append(time.perf_counter())

    total_s, _ = timed(lambda: generate(engine, prompt, params, seed=0, on_frame=on_frame,
                                               stop_on_eos=False), device)
    decode_s = stamps[-1] - stamps[0]
    return {"prefill_s": prefill_s, "decode_fps": (len(stamps) - 1) / decode_s,
            "total_s": total_s}


def fast_ar_share(engine: Engine, mode: str, prompt, device, steps: int = 16) -> float:
    """Fraction of a decode frame spent outside the slow AR (fast AR + sampling), each part run
    the way ``mode`` runs it (eager, CUDA graph, or compiled + CUDA graph)."""
    c = engine.config
    with torch.inference_mode():
        generate(engine, prompt, SamplingParams(max_new_tokens=2), seed=0)
        column = torch.zeros(1, 1 + c.num_codebooks, dtype=torch.long, device=device)
        column[:, 0] = c.semantic_start_token_id
        pos = torch.tensor([prompt.shape[1]], device=device)
        B, V, C, K = 1, c.text.vocab_size, c.codebook_size, c.num_codebooks
        gen = torch.Generator(device).manual_seed(0)
        rands = (torch.rand(B, V, generator=gen, device=device, dtype=engine.dtype),
                 torch.rand(B, V, generator=gen, device=device, dtype=engine.dtype),
                 torch.rand(K - 1, B, C, generator=gen, device=device, dtype=engine.dtype))
        # Separate tensors, as generate passes them: one tensor given twice would recompile.
        temperature = torch.full((1, 1), 0.8, device=device, dtype=engine.dtype)
        top_p = torch.full((1, 1), 0.8, device=device, dtype=engine.dtype)
        top_k = torch.full((1, 1), 30, device=device)
        window = torch.zeros(1, 10, dtype=torch.long, device=device)

        slow = engine.slow_step
        if mode == "compiled" and engine.compiled:  # not packed bf16 weights on a CPU (eager)
            compiled = torch.compile(Engine.slow_step, fullgraph=True)
            slow = lambda col, p: compiled(engine, col, p)  # noqa: E731
        if engine.cuda_graph:
            from fish_core.engine.cuda_graph import FrameGraph

            slow_graph = FrameGraph(lambda col, p: [slow(col, p)], (column, pos))
            slow = slow_graph
        full = lambda: engine.step(column, pos, window, temperature, top_p, top_k,  # noqa: E731
                                   *rands)
        full()
        slow(column, pos)
        t_slow = statistics.median(timed(lambda: slow(column, pos),
                                         device)[0] for _ in range(steps))
        t_full = statistics.median(timed(full, device)[0] for _ in range(steps))
    return 1 - t_slow / t_full


def time_to_first_audio(engine: Engine, codec, prompt, frames: int, device, repeats: int) -> float:
    """Seconds from the request to the first ``frames`` frames of audio: prefill, ``frames``
    frames, and the codec decode of those frames as a stream's first chunk (``decode_chunk``
    from an empty state: a CUDA graph replay on CUDA) (a voice-clone prompt of the same
    length)."""
    params = SamplingParams(max_new_tokens=frames)

    def once():
        gen = generate(engine, prompt, params, seed=0, stop_on_eos=False)[0]
        return codec.decode_chunk(gen.codes[None].to(device), {})

    once()  # warm-up
    return statistics.median(timed(once, device)[0] for _ in range(repeats))


def load_codec(args, device):
    from fish_core.codec.model import CHECKPOINT_NAME, Codec, build_codec

    if args.model and (Path(args.model) / CHECKPOINT_NAME).is_file():
        return Codec.from_file(args.model, device=device)
    return build_codec(None, device)  # real-size architecture, random weights


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--model", help="checkpoint folder in the real layout")
    src.add_argument("--config", choices=["tiny", "medium", "real"], default="tiny")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--frames", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--modes", default="eager,compiled",
                    help="comma list of eager (no CUDA graph), graph (eager kernels replayed as "
                         "a CUDA graph), compiled (torch.compile; + CUDA graph on CUDA)")
    ap.add_argument("--ignore-eos", action="store_true", default=True,
                    help="decode exactly --frames frames (default; the stop token is ignored)")
    ap.add_argument("--bandwidth", type=float, default=None,
                    help="memory bandwidth in GB/s, for the fraction of the bound")
    ap.add_argument("--quantization", default="none",
                    help="none, fp8, int8, int4, fp8-dynamic, nvfp4 (quant.quantize_model)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--ttfa-frames", type=int, default=0,
                    help="also time the first N frames + their codec decode (0: skip)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    t0 = time.perf_counter()
    if args.model:
        model = load_model(args.model, device, dtype)
    else:
        model = random_model(make_config(args.config), device, dtype)
    if args.quantization != "none":
        import quant

        model = quant.quantize_model(model, args.quantization)
    load_s = time.perf_counter() - t0
    if device.type == "cuda":  # the peak counts the built model and decoding, not the build
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    config = model.config
    prompt = prompt_for(config, args.prompt_len)

    engines, results = {}, {}
    for mode in args.modes.split(","):
        engine = Engine(model, compile=(mode == "compiled"),
                        cuda_graph=(mode != "eager" and device.type == "cuda"))
        first, _ = timed(lambda: generate(engine, prompt,
                                          SamplingParams(max_new_tokens=args.frames),
                                                 seed=0, stop_on_eos=False), device)
        engines[mode] = engine
        results[mode] = {"first_call_s": first, "runs": []}
    for _ in range(args.repeats):  # interleaved, so machine noise hits every mode alike
        for mode, engine in engines.items():
            results[mode]["runs"].append(measure(engine, prompt, args, device))

    codec = load_codec(args, device) if args.ttfa_frames else None
    cache_len = engines[next(iter(engines))].caches.shape[1]
    bytes_per_frame = frame_bytes(model, engines[next(iter(engines))], cache_len)
    report = {
        "machine": platform.processor() or platform.machine(), "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "model": args.model or args.config, "dtype": args.dtype,
        "quantization": args.quantization, "frames": args.frames,
        "prompt_len": args.prompt_len, "repeats": args.repeats, "load_s": round(load_s, 2),
        "params": sum(p.numel() for p in model.parameters()),
        "bytes_per_frame": bytes_per_frame, "cache_len": cache_len, "modes": {},
    }
    for mode, r in results.items():
        runs = r["runs"]
        fps = statistics.median(x["decode_fps"] for x in runs)
        prefill = statistics.median(x["prefill_s"] for x in runs)
        steady = statistics.median(x["total_s"] for x in runs)
        entry = {
            "decode_frames_per_s": round(fps, 2),
            "decode_fps_all": [round(x["decode_fps"], 2) for x in runs],
            "prefill_tokens_per_s": round(args.prompt_len / prefill, 1),
            "realtime_factor": round(21.533 / fps, 3),
            "effective_GB_per_s": round(bytes_per_frame * fps / 1e9, 2),
            "first_call_s": round(r["first_call_s"], 2),
            "compile_s_cold": round(r["first_call_s"] - steady, 2) if mode == "compiled" else None,
            "fast_ar_share": round(fast_ar_share(engines[mode], mode, prompt, device), 3),
        }
        if args.ttfa_frames:
            entry["time_to_first_audio_s"] = round(time_to_first_audio(
                engines[mode], codec, prompt, args.ttfa_frames, device, args.repeats), 4)
        if mode != "eager":
            graphs = engines[mode].graph_captures
            recompiles = count_recompiles(engines[mode], prompt_for(config, args.prompt_len - 3),
                                          SamplingParams(max_new_tokens=args.frames), device)
            if mode == "compiled":
                entry["recompiles_over_frames"] = recompiles
            if engines[mode].cuda_graph:
                entry["graph_captures_over_frames"] = engines[mode].graph_captures - graphs
        engine = engines[mode]  # what really ran, after every fallback
        entry.update(compiled=engine.compiled, cuda_graph=engine.cuda_graph,
                     graph_captures=engine.graph_captures, fallbacks=engine.fallbacks)
        if args.bandwidth:
            bound = args.bandwidth * 1e9 / bytes_per_frame
            entry["bound_frames_per_s"] = round(bound, 1)
            entry["fraction_of_bound"] = round(fps / bound, 3)
        report["modes"][mode] = entry
    if "compiled" in engines:
        import torch._dynamo.utils as dutils

        report["compiled_graphs_total"] = dutils.counters["stats"]["unique_graphs"]
    if device.type == "cuda":
        report["peak_memory_GB"] = round(torch.cuda.max_memory_allocated(device) / 1e9, 3)
    else:
        report["peak_rss_GB"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 3)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return report


if __name__ == "__main__":
    main()
