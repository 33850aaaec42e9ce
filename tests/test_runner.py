"""Generation parity: greedy codes for every scenario, the seeded sampled run, batching, compile."""

import shutil

import pytest
import torch

from fish_core.loading.checkpoint import load_model
from fish_core.engine.runner import PREFILL_BUCKET, Engine, cache_length, prefill_bucket
from fish_core.engine.rows import generate
from fish_core.engine.sampling import draw
from fish_core.params import (MAX_SEED, Cancelled, GenerationError, SamplingParams, check_seed,
                              random_seed)


@pytest.fixture(scope="module")
def model(ckpt_dir):
    return load_model(ckpt_dir, dtype=torch.float32)


@pytest.fixture(scope="module")
def engine(model):
    return Engine(model)


def greedy_cases(golden):
    """(prompt key, raw_new_columns key, max_new_tokens) for every recorded greedy batch."""
    meta = golden.json("prompts")
    cases = []
    for name, value in meta.items():
        if not isinstance(value, dict) or "batches" not in value:
            continue
        for i in range(len(value["batches"])):
            cases.append((f"{name}.batch{i}.prompt", f"{name}.batch{i}.raw_new_columns",
                          value["generate_long_kwargs"]["max_new_tokens"]))
    return cases


def greedy(max_new_tokens):
    return SamplingParams(temperature=0.7, top_p=0.7, top_k=1, max_new_tokens=max_new_tokens)


def test_greedy_codes_match_the_reference(engine, golden):
    prompts, gen = golden.tensors("prompts"), golden.tensors("generation")
    cases = greedy_cases(golden)
    assert cases
    for prompt_key, raw_key, max_new in cases:
        result = generate(engine, prompts[prompt_key], greedy(max_new))[0]
        raw = gen[raw_key]
        assert torch.equal(result.columns, raw), prompt_key
        # codes: the im_end column is dropped, and when the length limit stops generation the
        # last frame is kept (the reference drops it: its `codes` are one frame shorter).
        codes_key = raw_key.replace("raw_new_columns", "codes")
        if result.stopped_on_eos:
            assert torch.equal(result.codes, gen[codes_key])
        else:
            assert result.columns.shape[1] == max_new
            assert torch.equal(result.codes, raw[1:])
            assert torch.equal(result.codes[:, :-1], gen[codes_key])


def test_checking_for_the_stop_token_every_8_frames_changes_nothing(model, golden):
    """On CUDA the loop reads the finished flags every 8 frames (no host sync per frame): frames
    generated after <|im_end|> are dropped, so the results are the per-frame ones."""
    prompts, gen = golden.tensors("prompts"), golden.tensors("generation")
    engine = Engine(model, eos_check_every=8)
    stopped = 0
    for prompt_key, raw_key, max_new in greedy_cases(golden):
        result = generate(engine, prompts[prompt_key], greedy(max_new))[0]
        assert torch.equal(result.columns, gen[raw_key]), prompt_key
        stopped += result.stopped_on_eos
    assert stopped, "no case stops on <|im_end|>"


def test_seeded_sampling_replays_the_reference(engine, golden):
    meta = golden.json("generation")["sampled_b_seed42"]
    params = SamplingParams(meta["temperature"], meta["top_p"], meta["top_k"],
                            meta["max_new_tokens"])
    prompt = golden.tensors("prompts")["b_clone.batch0.prompt"]
    result = generate(engine, prompt, params, seed=meta["seed"])[0]
    raw = golden.tensors("generation")["sampled_b_seed42.raw_new_columns"]
    assert torch.equal(result.columns, raw)
    assert result.stopped_on_eos == meta["stopped_on_im_end"]
    # the reference drops the last frame of a run that ends at the length limit; we keep it
    assert result.codes.shape[1] == meta["n_frames"] + (not result.stopped_on_eos)
    again = generate(engine, prompt, params, seed=meta["seed"])[0]
    assert torch.equal(again.columns, raw)
    other = generate(engine, prompt, params, seed=meta["seed"] + 1)[0]
    assert not torch.equal(other.columns, raw)


def sampled(golden):
    meta = golden.json("generation")["sampled_b_seed42"]
    return SamplingParams(meta["temperature"], meta["top_p"], meta["top_k"],
                          meta["max_new_tokens"])


def test_per_row_seeds_replay_single_runs(engine, golden):
    """Take k of a batch with ``seeds`` is exactly the one-prompt run with ``seed=seeds[k]``."""
    prompt = golden.tensors("prompts")["b_clone.batch0.prompt"]
    params, base = sampled(golden), golden.json("generation")["sampled_b_seed42"]["seed"]
    seeds = [base, base + 1, base + 2]
    batch = generate(engine, [prompt] * 3, params, seeds=seeds)
    singles = [generate(engine, prompt, params, seed=s)[0] for s in seeds]
    for row, single, s in zip(batch, singles, seeds):
        assert torch.equal(row.columns, single.columns)
        assert row.stopped_on_eos == single.stopped_on_eos
        assert row.seed == single.seed == s
    assert not torch.equal(singles[0].columns, singles[1].columns)  # the seeds differ


def test_seed_arguments_are_checked(engine, golden):
    prompt = golden.tensors("prompts")["b_clone.batch0.prompt"]
    with pytest.raises(GenerationError, match="one seed per prompt"):
        generate(engine, [prompt] * 2, greedy(2), seeds=[1])
    with pytest.raises(GenerationError, match="not both"):
        generate(engine, prompt, greedy(2), seed=1, seeds=[1])
    with pytest.raises(GenerationError, match=r"seeds\[1\]"):
        generate(engine, [prompt] * 2, greedy(2), seeds=[1, -1])
    with pytest.raises(GenerationError, match="seed must be an integer in 0 .. "):
        generate(engine, prompt, greedy(2), seed=2.0)


@pytest.mark.parametrize("bad", [True, 1.5, 3.0, "7", -1, MAX_SEED + 1, None])
def test_check_seed_rejects_and_names_the_field(bad):
    with pytest.raises(GenerationError, match=f"my_seed must be an integer in 0 .. {MAX_SEED}"):
        check_seed(bad, "my_seed")


def test_check_seed_accepts_int_likes():
    np = pytest.importorskip("numpy")
    assert check_seed(np.int64(5)) == 5 and type(check_seed(np.int64(5))) is int
    assert check_seed(0) == 0 and check_seed(MAX_SEED) == MAX_SEED
    assert all(0 <= random_seed() <= MAX_SEED for _ in range(100))


def test_on_column_streams_exactly_the_final_columns(engine, golden):
    prompts = golden.tensors("prompts")
    keys = ["b_clone.batch0.prompt", "c_two_speakers.batch0.prompt"]
    seen = []
    results = generate(engine, [prompts[k] for k in keys], [greedy(21), greedy(9)],
                              on_column=seen.append)
    assert all(c.device.type == "cpu" and c.shape == (2, 1 + engine.config.num_codebooks)
               for c in seen)
    streamed = torch.stack(seen, dim=-1)  # [B, 1 + K, n]
    for b, result in enumerate(results):
        n = result.columns.shape[1]
        assert torch.equal(streamed[b, :, :n], result.columns)


def test_batched_rows_equal_single_runs(engine, golden):
    """Prompts of different lengths and limits decoded together; each stops on its own."""
    prompts, gen = golden.tensors("prompts"), golden.tensors("generation")
    cases = greedy_cases(golden)
    results = generate(engine, [prompts[p] for p, _, _ in cases], [greedy(n) for _, _, n in cases])
    for (prompt_key, raw_key, _), result in zip(cases, results):
        assert torch.equal(result.columns, gen[raw_key]), prompt_key
        assert result.prompt_length == prompts[prompt_key].shape[1]


def test_progress_and_cancel_leave_the_engine_usable(engine, clone_prompt):
    prompt = clone_prompt
    seen = []
    result = generate(engine, prompt, greedy(21), on_frame=lambda i, n: seen.append((i, n)))[0]
    assert seen == [(i + 1, 21) for i in range(result.columns.shape[1])]
    first = len(seen)
    with pytest.raises(Cancelled):
        generate(engine, prompt, greedy(21), cancel=lambda: len(seen) >= first + 3,
                        on_frame=lambda i, n: seen.append(i), stop_on_eos=False)
    assert len(seen) == first + 3  # stopped within the frame that asked
    again = generate(engine, prompt, greedy(21))[0]
    assert torch.equal(again.columns, result.columns)


def test_length_limit_is_clamped_to_the_context(engine, model):
    limit = model.config.text.max_seq_len
    prompt = torch.zeros(1 + model.config.num_codebooks, limit - 5, dtype=torch.long)
    prompt[0] = 7
    result = generate(engine, prompt, greedy(50), stop_on_eos=False)[0]
    assert result.columns.shape[1] == 5
    with pytest.raises(GenerationError, match="prompt is too long"):
        generate(engine, torch.zeros(1 + model.config.num_codebooks, limit, dtype=torch.long),
                        greedy(5))


@pytest.mark.parametrize("params, field", [
    (SamplingParams(temperature=0), "temperature"),
    (SamplingParams(temperature=2.5), "temperature"),
    (SamplingParams(top_p=0), "top_p"),
    (SamplingParams(top_k=0), "top_k"),
    (SamplingParams(max_new_tokens=0), "max_new_tokens"),
])
def test_bad_parameters_are_named(engine, clone_prompt, params, field):
    with pytest.raises(GenerationError, match=field):
        generate(engine, clone_prompt, params)


def test_bad_prompt_shape(engine):
    rows = 1 + engine.config.num_codebooks
    with pytest.raises(GenerationError, match=rf"prompt 0 must be a \[{rows}, T\]"):
        generate(engine, torch.zeros(3, 5, dtype=torch.long))


def test_cache_buckets_are_few():
    lengths = {cache_length(n, 32768) for n in range(1, 32768, 7)}
    assert len(lengths) <= 9
    assert all(cache_length(n, 32768) >= n for n in (1, 255, 256, 257, 5000, 32767))


def test_bf16_generation_runs(ckpt_dir, clone_prompt):
    engine = Engine(load_model(ckpt_dir, dtype=torch.bfloat16))
    prompt = clone_prompt
    result = generate(engine, prompt, SamplingParams(max_new_tokens=16), seed=1)[0]
    config = engine.config
    assert result.columns.shape[0] == 1 + config.num_codebooks
    main = result.columns[0]
    assert ((main >= config.semantic_start_token_id) & (main <= config.semantic_end_token_id)
            | (main == config.eos_token_id)).all()
    assert (result.codes >= 0).all() and (result.codes < config.codebook_size).all()
    again = generate(engine, prompt, SamplingParams(max_new_tokens=16), seed=1)[0]
    assert torch.equal(again.columns, result.columns)


def _compiler_available():
    return shutil.which("g++") is not None or shutil.which("c++") is not None


@pytest.mark.slow  # torch.compile: minutes on a CPU; the quick subset leaves it out
@pytest.mark.skipif(not _compiler_available(), reason="torch.compile on CPU needs a C++ compiler")
def test_compiled_decode_is_identical_and_does_not_recompile(model, golden, tmp_path):
    """One compile serves every request of a cache bucket, even with another (eager) engine
    decoding on the same model in between; the compile cache folder does not leak into
    os.environ (inside ComfyUI other packs keep theirs)."""
    import os

    import torch._dynamo
    from torch._dynamo.utils import counters

    def environ():  # inductor's own private bookkeeping (_TORCHINDUCTOR_…) is not ours
        return {k: v for k, v in os.environ.items() if not k.startswith("_TORCHINDUCTOR")}

    prompts, gen = golden.tensors("prompts"), golden.tensors("generation")
    before = environ()
    torch._dynamo.reset()  # a step compiled by an earlier test would be reused, not counted
    compiled = Engine(model, compile=True, compile_cache=tmp_path / "inductor")
    eager = Engine(model)
    frames_before = counters["stats"]["unique_graphs"]
    result = generate(compiled, prompts["b_clone.batch0.prompt"], greedy(21))[0]
    assert torch.equal(result.columns, gen["b_clone.batch0.raw_new_columns"])
    assert counters["stats"]["unique_graphs"] - frames_before == 1
    assert environ() == before
    # Another prompt length in the same cache bucket, sampled, 64 frames, default parameters
    # (temperature == top_p), an eager engine in between: no recompilation.
    meta = golden.json("generation")["sampled_b_seed42"]
    params = SamplingParams(meta["temperature"], meta["top_p"], meta["top_k"],
                            meta["max_new_tokens"])
    with torch._dynamo.config.patch(error_on_recompile=True):
        generate(eager, prompts["a_plain.batch0.prompt"], greedy(300), stop_on_eos=False)
        sampled = generate(compiled, prompts["b_clone.batch0.prompt"], params, seed=meta["seed"])[0]
        generate(eager, prompts["a_plain.batch0.prompt"], greedy(8))
        long = generate(compiled, prompts["a_plain.batch0.prompt"], greedy(64), stop_on_eos=False)
        generate(compiled, prompts["a_plain.batch0.prompt"], SamplingParams(max_new_tokens=8))
    assert torch.equal(sampled.columns, gen["sampled_b_seed42.raw_new_columns"])
    assert long[0].columns.shape[1] == 64
    assert compiled.compiled and not compiled.fallbacks
    assert environ() == before


@pytest.mark.slow
@pytest.mark.skipif(not _compiler_available(), reason="torch.compile on CPU needs a C++ compiler")
def test_compiled_rows_per_bucket_match_the_goldens(model, golden, monkeypatch):
    """Serving compiled: the compiled step under the graph stand-in, one graph per bucket of
    rows (a request alone in a 2-row batch, then a second joining it): each row's greedy
    columns are the goldens."""
    import fish_core.engine.runner as runner
    from fish_core.engine.rows import RowBatch

    monkeypatch.setattr(runner, "FrameGraph", CpuFrameGraph)
    torch._dynamo.reset()
    prompts, gen = golden.tensors("prompts"), golden.tensors("generation")
    engine = Engine(model, compile=True, cuda_graph=True)
    batch = RowBatch(engine, 2)
    first, _ = batch.join(prompts["b_clone.batch0.prompt"], greedy(21), 0)
    for _ in range(3):
        batch.step()
    assert engine.graph_rows == [1]
    second, _ = batch.join(prompts["c_two_speakers.batch0.prompt"], greedy(9), 0)
    got = {}
    while batch.active:
        batch.step()
        for r in list(batch.active):
            if batch.ended(r):
                got[r] = batch.leave(r)
    assert engine.graph_rows == [1, 2] and engine.compiled and not engine.fallbacks
    assert torch.equal(got[first].columns, gen["b_clone.batch0.raw_new_columns"])
    assert torch.equal(got[second].columns, gen["c_two_speakers.batch0.raw_new_columns"])


def test_the_compile_cache_folder_is_set_only_inside_our_calls(tmp_path, monkeypatch):
    import os

    from fish_core.engine.runner import inductor_cache_dir

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    with inductor_cache_dir(tmp_path / "a"):
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "a")
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/other/pack")
    with pytest.raises(RuntimeError):
        with inductor_cache_dir(tmp_path / "b"):
            raise RuntimeError("compile failed")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/other/pack"
    with inductor_cache_dir(None):
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/other/pack"


def test_engines_on_one_model_keep_their_own_caches(model, golden):
    prompts, gen = golden.tensors("prompts"), golden.tensors("generation")
    a, b = Engine(model), Engine(model)
    want = gen["b_clone.batch0.raw_new_columns"]
    assert torch.equal(generate(a, prompts["b_clone.batch0.prompt"], greedy(21))[0].columns, want)
    generate(b, prompts["a_plain.batch0.prompt"], greedy(400), stop_on_eos=False)  # other size
    assert a.caches is not b.caches and a.caches.shape != b.caches.shape
    assert torch.equal(generate(a, prompts["b_clone.batch0.prompt"], greedy(21))[0].columns, want)
    b.release()
    assert b.caches is None and a.caches is not None


def test_a_failing_compiler_falls_back_to_eager(model, golden):
    """Users without a working toolchain (e.g. no Triton on Windows) still get audio."""
    engine = Engine(model)

    def broken_compiled_step(engine, *args):
        raise RuntimeError("inductor: no C++ compiler found")

    engine._step = broken_compiled_step
    prompt = golden.tensors("prompts")["b_clone.batch0.prompt"]
    with pytest.warns(UserWarning, match="decoding without compile"):
        result = generate(engine, prompt, greedy(21))[0]
    assert torch.equal(result.columns,
                       golden.tensors("generation")["b_clone.batch0.raw_new_columns"])
    assert not engine.compiled
    assert len(engine.fallbacks) == 1 and "no C++ compiler found" in engine.fallbacks[0]


def test_a_dropped_engine_frees_its_model(ckpt_dir):
    import gc
    import weakref

    model = load_model(ckpt_dir, dtype=torch.float32)
    engine = Engine(model)
    ref = weakref.ref(model)
    gc.disable()
    try:
        del model, engine
        assert ref() is None  # freed by reference counting alone, no cycle
    finally:
        gc.enable()


class CpuFrameGraph:
    """Stand-in for the CUDA FrameGraph: static input buffers copied in, outputs returned from
    the graph's own buffers (overwritten by the next replay), as on the GPU."""

    captures = released = 0

    def __init__(self, fn, args, pool=None):
        type(self).captures += 1
        self.fn, self.inputs = fn, [a.clone() for a in args]
        self.outputs = [t.clone() for t in fn(*self.inputs)]

    def __call__(self, *args):
        for buffer, value in zip(self.inputs, args):
            buffer.copy_(value)
        for buffer, value in zip(self.outputs, self.fn(*self.inputs)):
            buffer.copy_(value)
        return self.outputs

    def release(self):
        type(self).released += 1
        self.inputs, self.outputs = [], []


def test_graph_replay_path_is_exact_and_captures_once_per_cache(model, golden, monkeypatch):
    import fish_core.engine.runner as runner

    monkeypatch.setattr(runner, "FrameGraph", CpuFrameGraph)
    CpuFrameGraph.captures = CpuFrameGraph.released = 0
    engine = Engine(model, cuda_graph=True)
    prompts, gen = golden.tensors("prompts"), golden.tensors("generation")
    result = generate(engine, prompts["b_clone.batch0.prompt"], greedy(21))[0]
    assert torch.equal(result.columns, gen["b_clone.batch0.raw_new_columns"])
    generate(engine, prompts["c_two_speakers.batch0.prompt"], greedy(9))  # same cache bucket
    assert CpuFrameGraph.captures == 1
    generate(engine, prompts["b_clone.batch0.prompt"], greedy(400), stop_on_eos=False)
    assert CpuFrameGraph.captures == 2  # a bigger cache: a new graph
    assert CpuFrameGraph.released == 1  # the old one is freed with its cache


def test_prefill_first_frame_graph_is_exact_and_captured_once_per_row(model, golden,
                                                                      monkeypatch):
    """A one-prompt join's first frame replays a graph captured per cache row: the golden
    columns still come out, a second request in the same row reuses the graph, and a new cache
    frees it."""
    import fish_core.engine.runner as runner

    monkeypatch.setattr(runner, "FrameGraph", CpuFrameGraph)
    CpuFrameGraph.captures = CpuFrameGraph.released = 0
    engine = Engine(model)  # the CPU: no graph unless asked, as on a GPU with cuda_graph=False
    assert not engine.prefill_graph
    engine.prefill_graph = True
    prompts, gen = golden.tensors("prompts"), golden.tensors("generation")
    for _ in range(2):
        result = generate(engine, prompts["b_clone.batch0.prompt"], greedy(21))[0]
        assert torch.equal(result.columns, gen["b_clone.batch0.raw_new_columns"])
    result = generate(engine, prompts["c_two_speakers.batch0.prompt"], greedy(9))[0]
    assert torch.equal(result.columns, gen["c_two_speakers.batch0.raw_new_columns"])
    assert engine.first_captures == 1 and CpuFrameGraph.captures == 1
    generate(engine, prompts["b_clone.batch0.prompt"], greedy(400), stop_on_eos=False)
    assert engine.first_captures == 2 and CpuFrameGraph.released == 1
    assert not engine.fallbacks


def test_prefill_first_frame_samples_only_what_it_uses(model, golden, monkeypatch):
    """A prefill's first frame has no RAS window: it draws the main token once (not also the
    high-temperature draw RAS would need) and each fast codebook once; the golden still holds."""
    import fish_core.engine.runner as runner

    calls = []

    def counting(*args):
        calls.append(args[0].shape)
        return draw(*args)

    monkeypatch.setattr(runner, "draw", counting)
    prompt = golden.tensors("prompts")["b_clone.batch0.prompt"]
    result = generate(Engine(model), prompt, greedy(1))[0]
    assert len(calls) == model.config.num_codebooks  # 1 main + (K - 1) fast codebooks
    want = golden.tensors("generation")["b_clone.batch0.raw_new_columns"][:, :1]
    assert torch.equal(result.columns, want)


@pytest.mark.parametrize("graph, message", [("prefill_graph", "first frames without a graph"),
                                            ("bucket_graphs", "prefilling without graphs")])
def test_prefill_graph_failure_falls_back(model, golden, monkeypatch, graph, message):
    """A first frame's or a bucketed prefill's capture that fails: eager from then on,
    recorded, the golden unchanged."""
    import fish_core.engine.runner as runner

    def broken(fn, args, pool=None):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(runner, "FrameGraph", broken)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: "one pool")
    engine = Engine(model, prefill_buckets=graph == "bucket_graphs")
    setattr(engine, graph, True)
    prompt = golden.tensors("prompts")["b_clone.batch0.prompt"]
    with pytest.warns(UserWarning, match=message):
        result = generate(engine, prompt, greedy(21))[0]
    want = golden.tensors("generation")["b_clone.batch0.raw_new_columns"]
    assert torch.equal(result.columns, want)
    assert not getattr(engine, graph) and engine.first_captures == engine.prefill_captures == 0


def test_graph_is_dropped_when_a_weight_moves_and_released_with_the_engine(ckpt_dir, golden,
                                                                          monkeypatch):
    import fish_core.engine.runner as runner

    monkeypatch.setattr(runner, "FrameGraph", CpuFrameGraph)
    CpuFrameGraph.captures = CpuFrameGraph.released = 0
    model = load_model(ckpt_dir, dtype=torch.float32)
    engine = Engine(model, cuda_graph=True)
    prompts, gen = golden.tensors("prompts"), golden.tensors("generation")
    generate(engine, prompts["b_clone.batch0.prompt"], greedy(21))
    layer = model.fast_layers[-1].feed_forward.w2
    layer.weight.data = layer.weight.data.clone()  # same values, another address
    result = generate(engine, prompts["b_clone.batch0.prompt"], greedy(21))[0]
    assert torch.equal(result.columns, gen["b_clone.batch0.raw_new_columns"])
    assert (CpuFrameGraph.captures, CpuFrameGraph.released) == (2, 1)
    engine.release()
    assert CpuFrameGraph.released == 2 and engine.caches is None
    assert engine.graph_captures == 2


def test_graph_capture_failure_falls_back(model, golden, monkeypatch):
    import fish_core.engine.runner as runner

    def broken(fn, args):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(runner, "FrameGraph", broken)
    engine = Engine(model, cuda_graph=True)
    prompt = golden.tensors("prompts")["b_clone.batch0.prompt"]
    with pytest.warns(UserWarning, match="without CUDA graphs"):
        result = generate(engine, prompt, greedy(21))[0]
    assert torch.equal(result.columns,
                       golden.tensors("generation")["b_clone.batch0.raw_new_columns"])
    assert not engine.cuda_graph and engine.graph_captures == 0
    assert engine.fallbacks == ["CUDA graph capture failed (RuntimeError: operation not permitted "
                                "when stream is capturing); decoding without CUDA graphs"]


def test_a_join_with_a_voice_prefix_attends_over_the_filled_slots_only(model, clone_prompt,
                                                                        monkeypatch):
    """The rest of a prompt after its voice prefix attends to the slots filled so far (up to the
    longest prompt's end), not to the whole static cache; its last hidden state is the one of
    the prompt run whole."""
    import fish_core.engine.model as model_module

    engine = Engine(model)
    T = clone_prompt.shape[-1]
    P = T - 5
    engine.ensure_cache(1, engine.max_context)  # as in a running decode: longer than the join
    assert engine.caches.shape[1] > 2 * T
    whole = engine.prefill(clone_prompt[None], [T])
    widths = []
    real = model_module.grouped_attention

    def recording(q, k, v, bias):
        widths.append((k.shape[2], bias.shape[-1]))
        return real(q, k, v, bias)

    monkeypatch.setattr(model_module, "grouped_attention", recording)
    joined = engine.prefill(clone_prompt[None], [T], prefixes=[P])
    assert len(widths) == model.config.text.n_layer and set(widths) == {(T, T)}  # not the cache's
    torch.testing.assert_close(joined, whole, rtol=1e-5, atol=1e-5)


# A bucketed prefill's logits against the unbucketed ones (fp32, the CPU): the matrix products
# give each row the same bits whatever the row count, but the CPU's flash attention reduces a
# query's softmax over one block as long as the keys (below 512), so the padded (masked) keys
# change the summation order: a few ulps (measured <= 3e-6 on logits of magnitude ~5).
BUCKET_LOGITS_ATOL = 1e-5


def prefill_logits(engine, prompt, prefix=None):
    T = prompt.shape[1]
    engine.ensure_cache(1, cache_length(T + 64, engine.max_context))
    with torch.inference_mode():
        hidden = engine.prefill(prompt[None], [T], None if prefix is None else [prefix])
        return torch.nn.functional.linear(hidden, engine.head)


def test_prefill_buckets():
    assert prefill_bucket(1, 4096) == PREFILL_BUCKET and prefill_bucket(65, 4096) == 128
    assert prefill_bucket(128, 4096) == 128 and prefill_bucket(300, 384) == 384


@pytest.mark.parametrize("with_prefix", [False, True])
def test_a_bucketed_prefill_gives_the_unbucketed_logits(model, golden, with_prefix):
    """Every golden prompt, padded to its bucket (and, after a voice prefix, attending over a
    bucket of slots): the same logits within BUCKET_LOGITS_ATOL, the same greedy token."""
    plain = Engine(model, prefix_cache_mb=0)
    bucketed = Engine(model, prefix_cache_mb=0, prefill_buckets=True)
    assert not plain.prefill_buckets  # the CPU default: no padding to pay for
    for key, prompt in golden.tensors("prompts").items():
        if key.endswith(".prompt"):
            prefix = prompt.shape[1] // 2 if with_prefix else None
            want, got = prefill_logits(plain, prompt, prefix), prefill_logits(bucketed, prompt,
                                                                              prefix)
            assert torch.allclose(got, want, rtol=0, atol=BUCKET_LOGITS_ATOL), key
            assert torch.equal(got.argmax(-1), want.argmax(-1)), key


def test_bucketed_prefill_keeps_the_greedy_and_seeded_goldens(model, golden):
    engine = Engine(model, prefill_buckets=True)
    prompts, gen = golden.tensors("prompts"), golden.tensors("generation")
    for prompt_key, raw_key, max_new in greedy_cases(golden):
        result = generate(engine, prompts[prompt_key], greedy(max_new))[0]
        assert torch.equal(result.columns, gen[raw_key]), prompt_key
    params, meta = sampled(golden), golden.json("generation")["sampled_b_seed42"]
    result = generate(engine, prompts["b_clone.batch0.prompt"], params, seed=meta["seed"])[0]
    assert torch.equal(result.columns, gen["sampled_b_seed42.raw_new_columns"])


def test_bucketed_prefill_graph_is_captured_once_per_row_and_bucket(model, golden,
                                                                    monkeypatch):
    """With graphs (the CPU stand-in), a one-row bucketed prefill replays a graph per (row,
    bucket) in one shared pool: the goldens hold, a prompt of the same bucket reuses it, a
    new cache frees it."""
    import fish_core.engine.runner as runner

    monkeypatch.setattr(runner, "FrameGraph", CpuFrameGraph)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: "one pool")
    CpuFrameGraph.captures = CpuFrameGraph.released = 0
    engine = Engine(model, prefill_buckets=True)
    engine.bucket_graphs = True
    prompts, gen = golden.tensors("prompts"), golden.tensors("generation")
    cases = {k: (r, n) for k, r, n in greedy_cases(golden)}
    buckets = set()
    for key in ("b_clone.batch0.prompt", "d_multi_batch.batch0.prompt", "a_plain.batch0.prompt"):
        raw, max_new = cases[key]
        assert torch.equal(generate(engine, prompts[key], greedy(max_new))[0].columns, gen[raw])
        buckets.add(prefill_bucket(prompts[key].shape[1], engine.caches.shape[1]))
    assert engine.prefill_captures == CpuFrameGraph.captures == len(buckets)
    generate(engine, prompts["b_clone.batch0.prompt"], greedy(400), stop_on_eos=False)
    assert CpuFrameGraph.released == len(buckets) and not engine.fallbacks

