"""Kernels a decode frame, counted on the CPU: the launch-bound part of a GPU frame, visible in CI.

    python bench/count_ops.py                       # bf16, S2-Pro's depth (36 + 4 layers)
    python bench/count_ops.py --dtype float32 --json counts.json

Every non-view ATen op that runs is counted under a ``TorchDispatchMode`` (each is about one
CUDA kernel in eager and CUDA-graph mode; views, ``empty`` and metadata ops launch nothing). The
model is the fixture checkpoint's config widened to S2-Pro's depth (36 slow layers, 4 fast),
with random weights: the count depends on the depth and the code path, not on the widths or
the values. Reported: ops a decode frame (``rows.generate`` with one frame more, minus one
frame less: the random draws and the state updates of a frame included) and the top ops; ops
of a join (prefill of ``--prompt-len`` tokens + its first frame) and of the prefill alone
(eager, and padded to its length bucket as CUDA runs it: ``bucketed_prefill``); ops of a
stream's first codec chunk (``params.FIRST_FRAMES`` frames, the fixture codec), eager and as
CUDA replays its graph.
``bench/gpu_first.py`` reports the same frame on CUDA with the profiler's kernel and launch
counts.

Host syncs a join (``join_syncs``): the points where the host would wait for the GPU, counted
on the CPU for a join into an empty batch and a join into a running one (frames pending, read
every 8 as on CUDA). On CUDA the host waits when it reads a value (``item``, ``bool``/``int`` of
a tensor: ``_local_scalar_dense``/``is_nonzero``; ``nonzero``, whose size it must know;
``equal``) and at every *blocking* copy between host and device, in either direction (PyTorch
synchronizes the stream after a copy without ``non_blocking``, so even a small host-to-device
copy waits for every kernel queued before it). On the CPU every tensor is on the host, so a
copy is seen where the code asks for one: ``.to(device)``/``.cpu()`` (an ``aten.to`` naming a
device, not ``non_blocking``) and ``torch.tensor(..., device=...)`` (data from Python made on
the device). This is an upper bound (a ``.to(device)`` of a tensor already there counts too),
and ``.tolist()``/``.numpy()`` are not seen (the engine calls them on host tensors only).
A copy from pinned memory with ``non_blocking=True`` (``engine.device.to_device``) is not a
sync and is not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fish_core.engine import fused  # noqa: E402
from fish_core.engine.config import ModelConfig  # noqa: E402
from fish_core.engine.model import DualAR  # noqa: E402

TOP = 15
# ops that launch no kernel: allocation and metadata
SILENT = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
          "lift_fresh", "detach", "alias", "_local_scalar_dense", "set_", "resize_",
          "is_same_size", "_has_compatible_shallow_copy_type", "_unsafe_view"}


class OpCounter(TorchDispatchMode):
    """Counts the non-view ATen ops dispatched while active, by op name."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if composite(func):  # seen whole under inference_mode: count what it runs
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        name = func.overloadpacket.__name__
        if not func.is_view and name not in SILENT:
            self.ops[name] += 1
        return func(*args, **kwargs)

    @property
    def total(self) -> int:
        return sum(self.ops.values())


class SyncCounter(TorchDispatchMode):
    """Counts, by name, the ops that make the host wait for the device on CUDA (see the module's
    docstring); ``tensor(device=)`` counts the ``torch.tensor`` calls that name a device."""

    READS = {"item", "_local_scalar_dense", "is_nonzero", "nonzero", "equal"}

    def __init__(self):
        super().__init__()
        self.syncs: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in self.READS or (name in ("to", "_to_copy") and blocking_copy(func, args,
                                                                              kwargs)):
            self.syncs[name] += 1
        return func(*args, **kwargs)


def blocking_copy(func, args, kwargs) -> bool:
    """Whether a ``to``/``_to_copy`` call names a device and is not ``non_blocking``."""
    names = [a.name for a in func._schema.arguments]
    bound = {**dict(zip(names, args)), **kwargs}
    return bound.get("device") is not None and not bound.get("non_blocking", False)


@contextmanager
def counting_syncs():
    """A ``SyncCounter`` active, and ``torch.tensor(..., device=...)`` counted into it."""
    real = torch.tensor

    def tensor(data, *args, **kwargs):
        if kwargs.get("device") is not None:
            counter.syncs["tensor(device=)"] += 1
        return real(data, *args, **kwargs)

    with SyncCounter() as counter:
        torch.tensor = tensor
        try:
            yield counter
        finally:
            torch.tensor = real


def join_syncs(model, prompt) -> dict:
    """Host syncs of a join (``RowBatch.join``: its prefill, first frame and first column read)
    into an empty batch, and into a running one (one row busy, frames held unread as on CUDA,
    ``check_every`` 8)."""
    from fish_core.engine.rows import RowBatch
    from fish_core.engine.runner import Engine
    from fish_core.params import SamplingParams

    params = SamplingParams(max_new_tokens=16)
    engine = Engine(model, cuda_graph=False, eos_check_every=8)
    batch = RowBatch(engine, 2)
    batch.join(prompt, params, 1)  # warm-up: the cache sized
    batch.leave(0)
    with counting_syncs() as first:
        batch.join(prompt, params, 1)
    for _ in range(3):
        batch.step(read=False)
    with counting_syncs() as running:
        batch.join(prompt, params, 2)
    return {"join": sum(first.syncs.values()), "join_ops": dict(first.syncs),
            "join_running": sum(running.syncs.values()), "join_running_ops": dict(running.syncs)}


def composite(func) -> bool:
    """An op with no kernel of its own (``CompositeImplicitAutograd``: ``rms_norm``,
    ``scaled_dot_product_attention``, ``linear`` …): it runs as the ops it decomposes into."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(),
                                                          "CompositeImplicitAutograd")


def count(fn) -> Counter:
    with OpCounter() as counter:
        fn()
    return counter.ops


def fixtures_dir() -> Path:
    return Path(os.environ.get("SAILFISH_FIXTURES", ROOT / "tests" / "fixtures"))


def s2_pro_depth() -> tuple[int, int]:
    """(slow layers, fast layers) of the real S2-Pro (``real-s2-config.json``)."""
    real = ModelConfig.from_file(fixtures_dir() / "real-s2-config.json")
    return real.text.n_layer, real.fast.n_layer


def widened_config(depth: tuple[int, int] | None = None) -> ModelConfig:
    """The fixture checkpoint's config with S2-Pro's layer counts (or ``depth``)."""
    depth = depth or s2_pro_depth()
    data = ModelConfig.from_file(fixtures_dir() / "tiny-s2").to_dict()
    data["text_config"]["n_layer"], data["audio_decoder_config"]["n_layer"] = depth
    return ModelConfig.from_dict(data)


def random_model(config: ModelConfig, dtype) -> DualAR:
    model = DualAR(config).to(dtype)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.02, generator=gen)
            else:
                p.fill_(1.0)
    model.reset_buffers()
    return model.eval().requires_grad_(False)


def prompt_for(config: ModelConfig, length: int) -> torch.Tensor:
    prompt = torch.zeros(1 + config.num_codebooks, length, dtype=torch.long)
    prompt[0] = torch.arange(length) % (config.semantic_start_token_id - 1)
    return prompt


def difference(more: Counter, less: Counter) -> Counter:
    out = Counter(more)
    out.subtract(less)
    return +out


def summary(ops: Counter, top: int = TOP) -> dict:
    return {"ops": sum(ops.values()), "top": dict(ops.most_common(top))}


def frame_counts(engine, prompt) -> dict:
    """Ops of one decode frame, of a join (prefill + first frame) and of the prefill alone."""
    from fish_core.engine.rows import generate
    from fish_core.params import SamplingParams

    def run(frames):
        return count(lambda: generate(engine, prompt, SamplingParams(max_new_tokens=frames),
                                      seed=0, stop_on_eos=False))

    with fused.everywhere():  # the pieces as CUDA runs them: one op each
        run(3)  # warm-up: cache sizing
        two, three, one = run(2), run(3), run(1)
        with torch.inference_mode():
            prefill = count(lambda: engine.prefill(prompt[None], [prompt.shape[1]]))
            bucketed = count(lambda: bucketed_prefill(engine, prompt))
    return {"decode_frame": summary(difference(three, two)),
            "join": summary(one), "prefill": summary(prefill),
            "prefill_bucketed": summary(bucketed)}


def bucketed_prefill(engine, prompt) -> None:
    """The prefill padded to its length bucket (``Engine.prefill_buckets``; on CUDA by default
    once a GPU run decides it: ``runner.PREFILL_BUCKETS_ON_CUDA``), eager: the ops a graph per
    bucket captures; replayed on CUDA it is one graph launch,
    the copies of its inputs (tokens, last positions) and of its output."""
    was, engine.prefill_buckets = engine.prefill_buckets, True
    try:
        engine.prefill(prompt[None], [prompt.shape[1]])
    finally:
        engine.prefill_buckets = was


def codec_chunk_counts(frames: int | None = None, device="cpu") -> dict:
    """Ops of a stream's first codec chunk (``FIRST_FRAMES`` frames), the fixture codec."""
    from fish_core.codec.model import Codec
    from fish_core.params import FIRST_FRAMES

    frames = frames or FIRST_FRAMES
    codec = Codec.from_file(fixtures_dir() / "tiny-s2", device=device)
    codebooks = 1 + codec.config.n_codebooks
    codes = torch.zeros(1, codebooks, frames, dtype=torch.long, device=device)
    with torch.inference_mode(), fused.everywhere():
        codec.decode_chunk(codes, {})
        ops = count(lambda: codec.decode_chunk(codes, {}))
        graphed = replayed_first_chunk(codec, codes)
    return {"frames": frames, **summary(ops), "graphed": summary(graphed)}


def replayed_first_chunk(codec, codes) -> Counter:
    """Ops of the first chunk as CUDA replays its graph (``codec.graph``): those outside the
    graph (the codes' check, the copy into the graph's input, the outputs copied out) and the
    replay, one ``graph_replay``. The graph's outputs are computed beforehand (the capture)."""
    from unittest import mock

    from fish_core.codec import graph

    class Replay:  # FrameGraph's replay: inputs copied in, one launch, the static outputs
        def __init__(self, fn, args):
            self.inputs = [a.clone() for a in args]
            self.outputs = list(fn(*self.inputs))

        def __call__(self, *args):
            for buffer, value in zip(self.inputs, args):
                buffer.copy_(value)
            return self.outputs

    key = (codes.shape[0], codes.shape[-1], codec.decode_dtype)
    graphs = codec.first_chunk_graphs
    graphs.graphs[key] = (Replay(graphs.function, [codes]), list(graphs.function.layout))
    graphs.weights = graph.weights_key(codec)  # captured on the weights as they are
    try:
        with mock.patch.object(graph, "first_chunk_key", lambda *_: key):
            ops = count(lambda: codec.decode_chunk(codes, {}))
    finally:
        graphs.graphs.pop(key)
    ops["graph_replay"] += 1
    return ops


def quantize_counts(mode: str = "int4") -> dict:
    """Ops to quantize S2-Pro's Linear weights for ``mode`` on a GPU with our kernels' layers
    (int4: the fast AR int8, ``quant.convert.MIXED``), counted on meta tensors of the real
    shapes (``tests/fixtures/real-s2-config.json``): the same ops as on CUDA, no memory."""
    import quant
    from quant import int_gemv, int_linear
    from quant.convert import layer_mode
    from fish_core.loading.checkpoint import build_meta

    config = ModelConfig.from_file(fixtures_dir() / "real-s2-config.json")
    weights = quant.linear_weights(build_meta(config))
    ops, layers = Counter(), Counter()
    for name, (n, k) in weights.items():
        kind = layer_mode(name, mode)
        if kind == "int4" and not int_linear.int4_gemv_fits((n, k)):
            kind = "int8"
        w = torch.empty(n, k, dtype=torch.bfloat16, device="meta")

        def quantize():
            if kind == "int4":
                codes, _ = int_linear.quantize_int4(w, torch.bfloat16)
                int_gemv.pack(codes)
            else:
                int_linear.quantize_int8(w, torch.bfloat16)

        ops.update(count(quantize))
        layers[kind] += 1
    return {"mode": mode, "layers": dict(layers), **summary(ops)}


def main(argv=None) -> dict:
    from fish_core.engine.runner import Engine
    from fish_core.loading.checkpoint import join_feed_forwards

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--depth", default=None, help="slow,fast layers (default S2-Pro's)")
    parser.add_argument("--no-codec", action="store_true")
    parser.add_argument("--separate-w13", action="store_true",
                        help="keep w1 and w3 apart (as on a CPU)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    depth = (tuple(int(n) for n in args.depth.split(",")) if args.depth
             else s2_pro_depth())
    config = widened_config(depth)
    model = random_model(config, getattr(torch, args.dtype))
    if not args.separate_w13:  # as the loader leaves a model on CUDA
        join_feed_forwards(model)
    engine = Engine(model, cuda_graph=False)
    prompt = prompt_for(config, min(args.prompt_len, engine.max_context // 2))
    report = {"dtype": args.dtype, "depth": list(depth), "prompt_len": prompt.shape[1],
              **frame_counts(engine, prompt), "host_syncs": join_syncs(model, prompt)}
    if not args.no_codec:
        report["first_codec_chunk"] = codec_chunk_counts()
    report["quantize"] = {mode: quantize_counts(mode) for mode in ("int4", "int8")}
    print(json.dumps(report, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
