"""A stream's first codec chunk as a CUDA graph (``fish_core/codec/graph.py``), on the CPU: which
chunks would replay a graph, the eager path taken here, the packed state unpacking to exactly
the eager state, and the replay path itself with a CPU stand-in for the engine's FrameGraph."""

import pytest
import torch

from fish_core.codec import graph as codec_graph
from fish_core.codec.graph import FirstChunk, first_chunk_key
from fish_core.codec.layers import Snake
from fish_core.codec.model import Codec
from fish_core.engine import cuda_graph
from fish_core.params import FIRST_FRAMES
from test_runner import CpuFrameGraph


@pytest.fixture(scope="module")
def codec(ckpt_dir) -> Codec:
    return Codec.from_file(ckpt_dir)


def codes_for(codec: Codec, frames: int, batch: int = 1, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, codec.config.codebook_size, (batch, codec.num_codebooks, frames),
                          generator=g)
    codes[:, 0] = torch.randint(0, codec.config.semantic_codebook_size, (batch, frames),
                                generator=g)
    return codes


def stream(codec: Codec, codes: torch.Tensor, sizes, state=None):
    state, pieces, start = {} if state is None else state, [], 0
    for size in sizes:
        pieces.append(codec.decode_chunk(codes[..., start:start + size], state))
        start += size
    return torch.cat(pieces, dim=-1), state


def assert_same_state(got: dict, want: dict):
    assert list(got) == list(want)  # the same layers, in the same order
    for module, value in want.items():
        other = got[module]
        if isinstance(value, torch.Tensor):
            assert torch.equal(other, value)
        elif isinstance(value, tuple):
            assert len(other) == len(value) and all(map(torch.equal, other, value))
        else:
            assert other == value


def test_first_chunk_key_selects_a_cuda_streams_first_chunk():
    codes = torch.zeros(2, 10, FIRST_FRAMES, dtype=torch.long)
    cuda = torch.device("cuda")
    assert first_chunk_key(cuda, codes, {}, torch.float16) == (2, FIRST_FRAMES, torch.float16)
    assert first_chunk_key("cuda:0", codes, {}, torch.float32) == (2, FIRST_FRAMES,
                                                                   torch.float32)
    assert first_chunk_key("cpu", codes, {}, torch.float32) is None
    assert first_chunk_key(cuda, codes, {"started": 1}, torch.float32) is None
    assert first_chunk_key(cuda, codes[..., :-1], {}, torch.float32) is None
    assert first_chunk_key(cuda, codes[0], {}, torch.float32) is None


def test_cpu_takes_the_eager_path(codec):
    codes = codes_for(codec, FIRST_FRAMES)
    state = {}
    audio = codec.decode_chunk(codes, state)
    assert not codec.first_chunk_graphs.graphs and not codec.first_chunk_graphs.failures
    want_state = {}
    assert torch.equal(audio, codec.decode_state(codes, want_state))
    assert_same_state(state, want_state)


def test_packed_state_unpacks_to_the_eager_state(codec):
    """The graph's outputs (audio + one packed buffer) rebuild exactly the eager path's state,
    and the next chunks continue from it bit for bit."""
    codes = codes_for(codec, 4 * FIRST_FRAMES, seed=1)
    function = FirstChunk(codec)
    with torch.no_grad():
        audio, packed = function(codes[..., :FIRST_FRAMES])
    state = FirstChunk.unpack(function.layout, packed.clone())
    eager_first, eager_state = stream(codec, codes, [FIRST_FRAMES])
    assert torch.equal(audio, eager_first)
    assert_same_state(state, eager_state)
    assert packed.numel() == sum(
        sum(t.numel() for t in (v if isinstance(v, tuple) else (v,)))
        for v in eager_state.values() if not isinstance(v, int))
    rest = [FIRST_FRAMES, 2 * FIRST_FRAMES - 1, 1]
    got, _ = stream(codec, codes[..., FIRST_FRAMES:], rest, state)
    want, _ = stream(codec, codes[..., FIRST_FRAMES:], rest, eager_state)
    assert torch.equal(got, want)
    whole = codec.decode(codes, chunk_frames=None)  # streamed = whole, as test_codec states it
    assert (torch.cat([audio, got], -1) - whole).abs().max().item() <= 1e-5


class CpuGraph(CpuFrameGraph):
    """The engine tests' stand-in for FrameGraph on the CPU (static inputs copied in, outputs
    overwritten by every replay), whose capture may be made to fail."""

    captures = 0
    fail = False
    deterministic: list = []  # cudnn.deterministic while each capture ran

    def __init__(self, fn, args):
        CpuGraph.deterministic.append(torch.backends.cudnn.deterministic)
        if CpuGraph.fail:
            raise RuntimeError("CUDA graph replay differs from the captured function")
        super().__init__(fn, args)


@pytest.fixture
def graphed(ckpt_dir, codec, monkeypatch):
    """A fresh codec whose first chunks take the graph path on the CPU (``codec`` stays eager:
    the reference)."""
    monkeypatch.setattr(codec.first_chunk_graphs, "enabled", False)
    monkeypatch.setattr(cuda_graph, "FrameGraph", CpuGraph)
    monkeypatch.setattr(CpuGraph, "captures", 0)
    monkeypatch.setattr(CpuGraph, "deterministic", [])
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    monkeypatch.setattr(codec_graph, "first_chunk_key",
                        lambda device, codes, state, dtype: (
                            None if state or codes.shape[-1] != FIRST_FRAMES
                            else (codes.shape[0], codes.shape[-1], dtype)))
    return Codec.from_file(ckpt_dir)


def test_replayed_first_chunk_equals_eager(graphed, codec):
    """Replayed streams give the eager audio and state bit for bit, the graph captured once
    per key and its outputs copied out (a later replay leaves an earlier stream alone)."""
    one, two = codes_for(codec, 3 * FIRST_FRAMES, seed=2), codes_for(codec, 3 * FIRST_FRAMES,
                                                                      seed=3)
    sizes = [FIRST_FRAMES, 2 * FIRST_FRAMES]
    first, first_state = stream(graphed, one, sizes[:1])
    keep = (first.clone(), {m: (v.clone() if isinstance(v, torch.Tensor) else v)
                            for m, v in first_state.items()})
    second, _ = stream(graphed, two, sizes)
    assert CpuGraph.captures == 1 and len(graphed.first_chunk_graphs.graphs) == 1
    assert torch.equal(first, keep[0])  # not overwritten by the second stream's replay
    assert_same_state(first_state, keep[1])
    assert torch.equal(second, stream(codec, two, sizes)[0])
    rest, _ = stream(graphed, one[..., FIRST_FRAMES:], sizes[1:], first_state)
    assert torch.equal(torch.cat([first, rest], -1), stream(codec, one, sizes)[0])
    batch = codes_for(codec, FIRST_FRAMES, batch=2, seed=4)  # another batch: its own graph
    assert torch.equal(stream(graphed, batch, [FIRST_FRAMES])[0],
                       stream(codec, batch, [FIRST_FRAMES])[0])
    assert CpuGraph.captures == 2
    # captured with deterministic algorithms (the check must not fail by chance), flag restored
    assert CpuGraph.deterministic == [True, True] and not torch.backends.cudnn.deterministic
    graphed.set_precision(decode=torch.float32)  # weights cast: the graphs are dropped
    assert not graphed.first_chunk_graphs.graphs


def test_graphs_follow_weights_moved_without_the_codec(graphed, codec):
    """A weight moved module by module (as ComfyUI offloads: never through ``Codec.to``) or an
    ``alpha`` changed in place: the graphs that read the old ones are dropped before a replay,
    and the next first chunk is captured again on the weights as they are."""
    codes = codes_for(codec, FIRST_FRAMES, seed=6)
    want = stream(codec, codes, [FIRST_FRAMES])[0]
    assert torch.equal(stream(graphed, codes, [FIRST_FRAMES])[0], want)
    assert CpuGraph.captures == 1
    conv = next(m for m in graphed.decoder.modules() if isinstance(m, torch.nn.Conv1d))
    conv.double().float()  # a leaf moved and back: new storage, the same values
    assert torch.equal(stream(graphed, codes, [FIRST_FRAMES])[0], want)
    assert CpuGraph.captures == 2
    snake = next(m for m in graphed.decoder.modules() if isinstance(m, Snake))
    with torch.no_grad():
        snake.alpha.mul_(2)  # in place: same address, a new version
    changed = stream(graphed, codes, [FIRST_FRAMES])[0]
    assert CpuGraph.captures == 3 and not torch.equal(changed, want)
    graphed.first_chunk_graphs.enabled = False  # eager on the same weights: the same audio
    assert torch.equal(stream(graphed, codes, [FIRST_FRAMES])[0], changed)


def test_failed_capture_runs_eagerly_and_is_recorded(graphed, codec, monkeypatch):
    monkeypatch.setattr(CpuGraph, "fail", True)
    codes = codes_for(codec, 2 * FIRST_FRAMES, seed=5)
    sizes = [FIRST_FRAMES, FIRST_FRAMES]
    assert torch.equal(stream(graphed, codes, sizes)[0], stream(codec, codes, sizes)[0])
    failures = graphed.first_chunk_graphs.failures
    assert list(failures) == [(1, FIRST_FRAMES, graphed.decode_dtype)]
    assert "differs" in next(iter(failures.values()))
    monkeypatch.setattr(CpuGraph, "fail", False)  # not tried again for that key
    stream(graphed, codes, sizes)
    assert CpuGraph.captures == 0 and not graphed.first_chunk_graphs.graphs


def test_replayed_first_chunk_is_a_few_ops(fixtures, monkeypatch):
    """``bench/count_ops.py``'s first codec chunk: eager, every Snake one op and no pass of the
    old formula; replayed, the codes' check, the input copy, two copies out and the replay."""
    import importlib
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    monkeypatch.setenv("SAILFISH_FIXTURES", str(fixtures))
    count_ops = importlib.import_module("count_ops")
    counts = count_ops.codec_chunk_counts()
    snakes = sum(isinstance(m, Snake) for m in
                 Codec.from_file(fixtures / "tiny-s2").decoder.modules())
    assert counts["top"]["snake"] == snakes and "sin" not in counts["top"]
    graphed = counts["graphed"]
    assert graphed["top"]["graph_replay"] == 1 and graphed["top"]["clone"] == 2
    assert graphed["ops"] <= 12 < counts["ops"], graphed


def test_bench_first_chunk_check_dry_run_on_the_cpu(codec, monkeypatch):
    """``bench/bench_codec.py --first-chunk-check``, the next GPU run's check: on the CPU both
    ways run eagerly and agree, no graph, the flag as it was."""
    import importlib
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    report = importlib.import_module("bench_codec").first_chunk_check(codec, repeats=1)
    assert report["graphed_equals_eager"] and report["cudnn_benchmark_restored"]
    assert report["graphs"] == [] and report["failures"] == {}
    assert report["snake_error_vs_fp64"]["op"] <= 4 * 2.0 ** -24
    assert codec.first_chunk_graphs.enabled


def test_a_dropped_codec_is_freed_at_once(ckpt_dir):
    """The graphs hold their codec weakly: no reference cycle keeps a dropped codec's weights
    (and, on CUDA, its graphs' memory) until the garbage collector runs."""
    import gc
    import weakref

    codec = Codec.from_file(ckpt_dir)
    codec.decode_chunk(codes_for(codec, FIRST_FRAMES), {})
    ref = weakref.ref(codec)
    gc.disable()
    try:
        del codec
        assert ref() is None
    finally:
        gc.enable()


def test_a_deep_copied_codec_has_graphs_of_its_own(codec):
    import copy

    twin = copy.deepcopy(codec)
    assert twin.first_chunk_graphs is not codec.first_chunk_graphs
    assert twin.first_chunk_graphs.function.codec is twin
    codes = codes_for(codec, FIRST_FRAMES)
    assert torch.equal(twin.decode_chunk(codes, {}), codec.decode_chunk(codes, {}))
