"""The one decode loop (``RowBatch``) on the fp32 fixture model: rows join a running decode and
leave it at different frames, alone or several in one prefill, and every request's codes (and
audio) are exactly those it makes alone with the same seed; the served API keeps its results
with ``--batching continuous`` and ``static``."""

import threading

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fish_core.engine.rows import Draws, RowBatch, generate, rand_views, row_bucket
from fish_core.engine.runner import Engine
from fish_core.params import GenerationError, SamplingParams
from fish_core.local.driver import JobRows, SpeechJob

from conftest import tone

SAMPLED = SamplingParams(temperature=0.8, top_p=0.8, top_k=30, max_new_tokens=10)


@pytest.fixture(scope="module")
def voice(tiny_synth):
    sr = tiny_synth.sample_rate
    return tiny_synth.encode_voice(tone(sr), "A short reference.", name="v", sample_rate=sr)


def system(synth, voices):
    runtime = synth.runtime
    return runtime.system_turn(runtime.references(voices))


def prompts(synth, voice):
    texts = ["Hello there.", "A somewhat longer sentence to say now.", "Short.", "Fourth one."]
    return [synth.runtime.prompt(t, system(synth, [voice] if i % 2 == 0 else []), [], 10)
            for i, t in enumerate(texts)]


def alone(synth, prompt, params, seed, prefix=None):
    prefixes = None if prefix is None else [prefix]
    return generate(Engine(synth.runtime.model), prompt, params, seeds=[seed], prefixes=prefixes)[0]


@pytest.mark.parametrize("rows", [2, 3])
def test_rows_joining_and_leaving_match_single_runs(tiny_synth, voice, rows):
    ps = prompts(tiny_synth, voice)
    lengths = [10, 4, 7, 9]
    params = [SamplingParams(0.8, 0.8, 30, n) for n in lengths]
    seeds = [11, 12, 13, 14]
    want = [alone(tiny_synth, p, q, s) for p, q, s in zip(ps, params, seeds)]
    batch = RowBatch(Engine(tiny_synth.runtime.model), rows)
    joins = {0: [0], 2: [1], 3: [2, 3]}  # frame -> requests that arrive then
    waiting, got, row_of, frame = [], {}, {}, 0
    while len(got) < len(ps):
        waiting += joins.get(frame, [])
        while waiting and batch.free:
            i = waiting.pop(0)
            row_of[batch.join(ps[i], params[i], seeds[i])[0]] = i
        for r in list(row_of):
            if batch.ended(r):
                got[row_of.pop(r)] = batch.leave(r)
        if row_of:
            batch.step()
        frame += 1
    for i, gen in got.items():
        assert torch.equal(gen.columns, want[i].columns), f"request {i}"
        assert torch.equal(gen.codes, want[i].codes)


def test_prefix_reuse_inside_rows(tiny_synth, voice):
    ps = prompts(tiny_synth, voice)
    prefix = system(tiny_synth, [voice]).shape[1]
    engine = Engine(tiny_synth.runtime.model, prefix_cache_mb=16)
    batch = RowBatch(engine, 2)
    for _ in range(2):  # the second join reuses the voice prefix
        r, _ = batch.join(ps[0], SAMPLED, 5, prefix)
        while not batch.ended(r):
            batch.step()
        assert torch.equal(batch.leave(r).columns, alone(tiny_synth, ps[0], SAMPLED, 5).columns)
    assert engine.prefixes.hits == 1


def count_runs(engine, monkeypatch) -> dict:
    """Count the engine's prefill runs by kind (``whole``: no voice prefix; ``after``: the rest
    after a prefix; ``prefix``: a voice prefix run alone)."""
    runs = {"whole": 0, "after": 0, "prefix": 0}
    for kind, name in (("whole", "prefill_whole"), ("after", "prefill_after"),
                       ("prefix", "run_prefix")):
        original = getattr(engine, name)

        def counted(*args, kind=kind, original=original, **kwargs):
            runs[kind] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(engine, name, counted)
    return runs


def test_prompts_joining_together_are_prefilled_once_and_equal_single_runs(tiny_synth, voice,
                                                                          monkeypatch):
    """Four prompts of different lengths, two with the voice prefix and two without, join one
    running row in the same frame: one prefill of each kind (the shared prefix run once), and
    every row's codes are those of its one-prompt run."""
    ps = prompts(tiny_synth, voice)
    prefix = system(tiny_synth, [voice]).shape[1]
    plain = system(tiny_synth, []).shape[1]
    params = [SamplingParams(0.8, 0.8, 30, n) for n in (9, 5, 7, 10)]
    seeds = [31, 32, 33, 34]
    prefixes = [prefix if i % 2 == 0 else plain for i in range(4)]
    want = [alone(tiny_synth, p, q, s, n) for p, q, s, n in zip(ps, params, seeds, prefixes)]
    engine = Engine(tiny_synth.runtime.model, prefix_cache_mb=0)
    batch = RowBatch(engine, 5)
    early, _ = batch.join(ps[1], SAMPLED, 30)  # already decoding when the others join
    batch.step()
    runs = count_runs(engine, monkeypatch)
    rows, first = batch.join_many(ps, params, seeds, prefixes)
    assert rows == [1, 2, 3, 4] and first.shape == (4, 1 + tiny_synth.runtime.config.num_codebooks)
    assert runs == {"whole": 0, "after": 1, "prefix": 2}  # two voices' prefixes, one rest run
    while not all(batch.ended(r) for r in rows):
        batch.step()
    for i, r in enumerate(rows):
        assert torch.equal(batch.leave(r).columns, want[i].columns), f"request {i}"
    assert torch.equal(batch.leave(early).columns, alone(tiny_synth, ps[1], SAMPLED, 30).columns)
    # Prompts without a prefix run apart from those with one: one run of each kind.
    runs.update(whole=0, after=0, prefix=0)
    rows, _ = batch.join_many(ps, params, seeds, [prefix, 0, prefix, 0])
    assert runs == {"whole": 1, "after": 1, "prefix": 1}  # one voice: its prefix run once
    while not all(batch.ended(r) for r in rows):
        batch.step()
    for i, r in enumerate(rows):  # the prompts without a prefix ran whole, alone or not
        gen = batch.leave(r)
        expected = alone(tiny_synth, ps[i], params[i], seeds[i], None if i % 2 else prefix)
        assert torch.equal(gen.columns, expected.columns), f"request {i}"


def test_rows_joining_scattered_free_rows_are_exact(tiny_synth, voice):
    """Free rows that are not next to each other: the joining prompts are prefilled together
    into them (written and read by index), with or without their voice prefixes, and still
    make their single-run codes."""
    ps = prompts(tiny_synth, voice)
    prefixes = [system(tiny_synth, [voice] if i % 2 == 0 else []).shape[1] for i in range(4)]
    long = SamplingParams(0.8, 0.8, 30, 12)
    for with_prefix in (False, True):
        batch = RowBatch(Engine(tiny_synth.runtime.model), 4)
        rows, _ = batch.join_many(ps, [long] * 4, [40, 41, 42, 43])
        batch.step()
        batch.leave(rows[0])
        batch.leave(rows[2])
        joining = [prefixes[2], prefixes[3]] if with_prefix else None
        joined, _ = batch.join_many([ps[2], ps[3]], [SAMPLED, SAMPLED], [44, 45], joining)
        assert joined == [0, 2]
        while not all(batch.ended(r) for r in batch.active):
            batch.step()
        for row, i, seed in ((0, 2, 44), (2, 3, 45)):
            want = alone(tiny_synth, ps[i], SAMPLED, seed, prefixes[i] if with_prefix else None)
            assert torch.equal(batch.leave(row).columns, want.columns), (with_prefix, i)
        assert torch.equal(batch.leave(1).columns, alone(tiny_synth, ps[1], long, 41).columns)


def ending_early(model) -> Engine:
    """An engine that can draw only ``<|im_end|>`` and one semantic token (stop checked every 8
    frames, as on CUDA): with a flat enough sampler its rows end within a few frames."""
    engine = Engine(model, eos_check_every=8)
    c = model.config
    engine.allowed = [c.eos_token_id, c.semantic_start_token_id]
    engine._weights = None  # re-derive the head rows
    engine.follow_model()
    return engine


def test_frames_read_every_few_steps_give_the_same_rows(tiny_synth, voice):
    """``step(read=False)``: the frames reach the host every 8 frames, rows keep decoding past
    their ``<|im_end|>`` until then, and those frames are dropped: each row's result is its
    single run's."""
    ps = prompts(tiny_synth, voice)
    flat = [SamplingParams(1.5, 1.0, 2, n) for n in (30, 4, 30, 11)]
    batch = RowBatch(ending_early(tiny_synth.runtime.model), 4)
    rows, _ = batch.join_many(ps, flat, [50, 51, 52, 53])
    running = [batch.slots[r] for r in rows if not batch.ended(r)]
    assert batch.step(read=False) is None
    for row in running:
        assert row.made == 2 and len(row.columns) == 1  # made on the device, not read yet
    while not all(batch.ended(r) for r in rows):
        batch.step(read=False)
    got = [batch.leave(r) for r in rows]
    single = ending_early(tiny_synth.runtime.model)
    for i, gen in enumerate(got):
        want = generate(single, ps[i], flat[i], seeds=[50 + i])[0]
        assert torch.equal(gen.columns, want.columns), f"request {i}"
    assert sum(gen.stopped_on_eos for gen in got) >= 2  # rows 0 and 2 can only end so


def test_rows_on_the_graph_path_are_exact_and_capture_once_per_cache(tiny_synth, voice,
                                                                     monkeypatch):
    """The fixed-shape path (a CUDA graph, here its CPU stand-in: static inputs copied in,
    outputs in the graph's own buffers, overwritten by the next replay): every row decodes
    every frame, rows join (together and alone) and leave, and each still makes its single-run
    codes; one capture per cache, a new one when the cache grows."""
    import fish_core.engine.runner as runner
    from test_runner import CpuFrameGraph

    monkeypatch.setattr(runner, "FrameGraph", CpuFrameGraph)
    CpuFrameGraph.captures = CpuFrameGraph.released = 0
    ps = prompts(tiny_synth, voice)
    engine = Engine(tiny_synth.runtime.model, cuda_graph=True)
    batch = RowBatch(engine, 3)
    params = [SamplingParams(0.8, 0.8, 30, n) for n in (9, 4, 7)]
    rows, _ = batch.join_many(ps[:3], params, [60, 61, 62])
    got, late = {}, None
    while len(got) < 4:
        for r in list(batch.active):
            if batch.ended(r):
                got[r if r != late else "late"] = batch.leave(r)
        if late is None and batch.free:
            late, _ = batch.join(ps[3], SAMPLED, 63)  # joins a free row mid-decode
        if batch.active:
            batch.step()
    for i, r in enumerate(rows):
        assert torch.equal(got[r].columns, alone(tiny_synth, ps[i], params[i], 60 + i).columns)
    assert torch.equal(got["late"].columns, alone(tiny_synth, ps[3], SAMPLED, 63).columns)
    buckets = engine.graph_rows  # one capture per bucket of rows used (row_bucket)
    assert 3 in buckets and set(buckets) <= {1, 2, 3}
    assert CpuFrameGraph.captures == engine.graph_captures == len(buckets)
    batch.join(ps[0], SamplingParams(0.8, 0.8, 30, engine.caches.shape[1]), 64)  # grows
    batch.step()
    assert CpuFrameGraph.captures == len(buckets) + 1
    assert CpuFrameGraph.released == len(buckets) and engine.graph_rows == [1]


class Launches(TorchDispatchMode):
    """The ATen ops run while active, by name."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [1, 3])
def test_a_frame_draws_in_one_launch_the_reference_numbers(dtype, n):
    """A generator's frame is one ``torch.rand`` launch; its rows read the numbers the
    reference's 11 draws give, in the same order: ``[n, V]`` normal, ``[n, V]`` high, then
    ``[n, C]`` per fast codebook (one row, or rows sharing one generator)."""
    V, C, fast = 13, 5, 9
    want = torch.Generator().manual_seed(7)
    main, high = (torch.rand(n, V, generator=want, dtype=dtype) for _ in range(2))
    codebooks = torch.stack([torch.rand(n, C, generator=want, dtype=dtype) for _ in range(fast)])
    rand = torch.full((n + 2, 2 * V + fast * C), -1.0, dtype=dtype)  # rows 1 .. n of a batch
    draws = Draws(torch.Generator().manual_seed(7), slice(1, n + 1), slice(0, n))
    with Launches() as launches:
        draws(rand[draws.rows], V, C)
    assert sum(op in ("rand", "uniform_") for op in launches.ops) == 1, launches.ops
    got = rand_views(rand, V, C)
    assert torch.equal(got[0][1:n + 1], main) and torch.equal(got[1][1:n + 1], high)
    assert torch.equal(got[2][:, 1:n + 1], codebooks)
    assert (rand[0] == -1).all() and (rand[n + 1] == -1).all()  # other rows untouched


def test_row_buckets():
    assert [row_bucket(n, 8) for n in range(1, 9)] == [1, 2, 4, 4, 8, 8, 8, 8]
    assert row_bucket(5, 6) == 6 and row_bucket(1, 1) == 1


def test_graph_per_row_bucket_is_exact_and_joins_run_beside(tiny_synth, voice, monkeypatch):
    """An 8-row batch decodes only the bucket of rows in use (1, then 4 once three rows run):
    one graph per bucket, and every row still makes its single-run codes."""
    import fish_core.engine.runner as runner
    from test_runner import CpuFrameGraph

    monkeypatch.setattr(runner, "FrameGraph", CpuFrameGraph)
    CpuFrameGraph.captures = CpuFrameGraph.released = 0
    ps = prompts(tiny_synth, voice)
    engine = Engine(tiny_synth.runtime.model, cuda_graph=True)
    batch = RowBatch(engine, 8)
    params = SamplingParams(0.8, 0.8, 30, 8)
    first, _ = batch.join(ps[0], params, 70)
    for _ in range(3):
        batch.step()
    assert engine.graph_rows == [1]
    later, _ = batch.join_many(ps[1:3], [params, params], [71, 72])
    assert later == [1, 2]
    got = {}
    while batch.active:
        batch.step()
        for r in list(batch.active):
            if batch.ended(r):
                got[r] = batch.leave(r)
    assert engine.graph_rows == [1, 4]  # rows 1 and 2 run to the end together
    assert CpuFrameGraph.captures == engine.graph_captures == len(engine.graph_rows)
    for r, i in ((first, 0), (1, 1), (2, 2)):
        assert torch.equal(got[r].columns, alone(tiny_synth, ps[i], params, 70 + i).columns)


def test_a_newer_decode_or_a_release_stops_an_older_one(tiny_synth, voice):
    ps = prompts(tiny_synth, voice)
    engine = Engine(tiny_synth.runtime.model)
    old = RowBatch(engine, 2)
    old.join(ps[0], SAMPLED, 1)
    RowBatch(engine, 1).join(ps[1], SAMPLED, 2)  # another decode takes the cache over
    with pytest.raises(GenerationError, match="another decode"):
        old.step()
    again = RowBatch(engine, 1)
    again.join(ps[0], SAMPLED, 3)
    engine.release()
    with pytest.raises(GenerationError, match="released"):
        again.step()
    assert engine.caches is None


def test_jobs_in_rows_equal_tts(tiny_synth, voice):
    """Whole jobs (several text batches, live decoding) through JobRows: the audio equals
    ``tts`` for the same seed, with rows leaving and rejoining per text batch."""
    text = "The first sentence is here. A second one follows it. Then a third one comes."
    kw = dict(temperature=0.8, top_p=0.8, top_k=30, max_new_tokens=8)
    want = [tiny_synth.tts(text, voice, seed=s, max_bytes=30, **kw) for s in (1, 2, 3)]
    jobs = [SpeechJob(tiny_synth.runtime, text, [voice], params=SamplingParams(**kw), seed=s,
                      max_bytes=30, keep=True) for s in (1, 2, 3)]
    pool = JobRows(tiny_synth.runtime, 2)
    queue = list(jobs)
    while queue or len(pool):
        while queue and pool.free:
            pool.add([queue.pop(0)])
        for job in pool.step():
            if not job.done and job.error is None:
                queue.append(job)
    for job, speech in zip(jobs, want):
        assert job.error is None
        assert torch.equal(torch.cat([r.generated.codes for r in job.results], dim=1),
                           speech.codes)
        assert torch.equal(job.waveform, speech.waveform[:job.waveform.shape[0]])


def test_bad_rows(tiny_synth):
    for bad in (0, -1, True, "2"):
        with pytest.raises(ValueError, match="rows"):
            RowBatch(Engine(tiny_synth.runtime.model), bad)


def test_cache_growth_keeps_running_rows_exact(tiny_synth, voice):
    """A request needing a longer cache joins mid-decode: the cache grows (rows copied over)
    and the row already running still makes exactly its single-run codes."""
    ps = prompts(tiny_synth, voice)
    engine = Engine(tiny_synth.runtime.model)
    batch = RowBatch(engine, 2)
    r, _ = batch.join(ps[0], SAMPLED, 21)
    length = engine.caches.shape[1]  # sized to the first prompt
    batch.step()
    batch.step()
    long = SamplingParams(0.8, 0.8, 30, length + 8)
    other, _ = batch.join(ps[1], long, 22)
    assert engine.caches.shape[1] > length
    while not batch.ended(r):
        batch.step()
    assert torch.equal(batch.leave(r).columns, alone(tiny_synth, ps[0], SAMPLED, 21).columns)
    batch.leave(other)  # leaves early (as a cancelled request does)
    assert batch.free == 2


def test_cancelled_and_timed_out_jobs_leave_at_once(tiny_synth, voice):
    kw = dict(temperature=0.8, top_p=0.8, top_k=30, max_new_tokens=30)
    pool = JobRows(tiny_synth.runtime, 1)
    for stop in ("cancel", "deadline"):
        job = SpeechJob(tiny_synth.runtime, "A long request that will be stopped.", [voice],
                        params=SamplingParams(**kw), seed=1)
        pool.add([job])
        pool.step()
        if stop == "cancel":
            job.cancel()
        else:
            job.deadline = 0.0  # long past
        assert pool.step() == [job] and pool.free == 1 and not job.results
    after = SpeechJob(tiny_synth.runtime, "Next one.", [voice], params=SamplingParams(**kw),
                      seed=4, keep=True)
    pool.add([after])
    while len(pool):
        pool.step()
    assert torch.equal(after.results[0].generated.codes,
                       tiny_synth.tts("Next one.", voice, seed=4, **kw).codes)


def test_served_continuous_equals_static(tiny_synth, voices_dir):
    """Concurrent HTTP requests of different lengths and voices: the same bytes with
    continuous batching (rows joining and leaving) as with static rounds."""
    import json
    import urllib.request

    from fish_core.serve.background import BackgroundServer
    from fish_core.serve.service import Service

    bodies = [{"text": f"Request number {i} is here.", "format": "pcm", "seed": 30 + i,
               "max_new_tokens": 6 + 5 * i, **({"reference_id": "alice"} if i % 2 else {})}
              for i in range(4)]
    got = {}
    for batching in ("static", "continuous"):
        service = Service.standalone(lambda: tiny_synth, voices=[voices_dir], max_batch=3,
                                     batching=batching)
        results = [None] * len(bodies)
        with BackgroundServer(service) as running:
            def post(i):
                request = urllib.request.Request(
                    running.url + "/v1/tts", json.dumps(bodies[i]).encode(),
                    {"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=120) as response:
                    results[i] = (response.status, response.read())

            threads = [threading.Thread(target=post, args=(i,)) for i in range(len(bodies))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
        service.close()
        assert all(r is not None and r[0] == 200 for r in results)
        got[batching] = [r[1] for r in results]
        assert max(service.scheduler.batch_sizes) > 1  # requests did share the decode
    assert got["static"] == got["continuous"]
    with pytest.raises(ValueError, match="batching"):
        Service.standalone(lambda: tiny_synth, voices=[voices_dir], batching="dynamic")
