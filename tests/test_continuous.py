"""The one decode loop (``RowBatch``) on the fp32 fixture model: rows join a running decode and
leave it at different frames, alone or several in one prefill, and every request's codes (and
audio) are exactly those it makes alone with the same seed; the served API keeps its results
with ``--batching continuous`` and ``static``."""

import threading

import pytest
import torch

from fish_core.engine.continuous import RowBatch
from fish_core.engine.generate import Engine
from fish_core.params import SamplingParams
from fish_core.synthesis.driver import JobRows, SpeechJob

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


def alone(synth, prompt, params, seed):
    return Engine(synth.model).generate(prompt, params, seeds=[seed])[0]


@pytest.mark.parametrize("rows", [2, 3])
def test_rows_joining_and_leaving_match_single_runs(tiny_synth, voice, rows):
    ps = prompts(tiny_synth, voice)
    lengths = [10, 4, 7, 9]
    params = [SamplingParams(0.8, 0.8, 30, n) for n in lengths]
    seeds = [11, 12, 13, 14]
    want = [alone(tiny_synth, p, q, s) for p, q, s in zip(ps, params, seeds)]
    batch = RowBatch(Engine(tiny_synth.model), rows)
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
    engine = Engine(tiny_synth.model, prefix_cache_mb=16)
    batch = RowBatch(engine, 2)
    for _ in range(2):  # the second join reuses the voice prefix
        r, _ = batch.join(ps[0], SAMPLED, 5, prefix)
        while not batch.ended(r):
            batch.step()
        assert torch.equal(batch.leave(r).columns, alone(tiny_synth, ps[0], SAMPLED, 5).columns)
    assert engine.prefixes.hits == 1


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
            RowBatch(Engine(tiny_synth.model), bad)


def test_cache_growth_keeps_running_rows_exact(tiny_synth, voice):
    """A request needing a longer cache joins mid-decode: the cache grows (rows copied over)
    and the row already running still makes exactly its single-run codes."""
    ps = prompts(tiny_synth, voice)
    engine = Engine(tiny_synth.model)
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
