"""Reference-prefix KV reuse on the fp32 fixture model: with and without reuse the codes are the
same (greedy and seeded; one request, long text over several batches, takes, two voices
alternating), a voice's KV is never handed to another voice, and the cache keeps to its budget."""

import pytest
import torch

from fish_core.engine.prefix_cache import PrefixCache, PrefixEntry, megabytes
from fish_core.local.synthesizer import Synthesizer

from conftest import tone

GREEDY = dict(temperature=0.7, top_p=0.7, top_k=1, max_new_tokens=12)
SAMPLED = dict(temperature=0.8, top_p=0.8, top_k=30, max_new_tokens=12)
LONG = ("The first sentence is here. A second one follows it. Then a third one comes. "
        "And the fourth sentence ends the text.")


def twin(synth, prefix_cache_mb):
    """A Synthesizer on the same model, tokenizer and codec with its own engine."""
    return Synthesizer(synth.runtime.model, synth.runtime.tokenizer, synth.runtime.codec,
                       prefix_cache_mb=prefix_cache_mb)


@pytest.fixture(scope="module")
def voices(tiny_synth):
    """Two voices with the same transcript (only their reference codes differ)."""
    sr = tiny_synth.sample_rate
    return [tiny_synth.encode_voice(tone(sr, hz=hz), "A short reference.", name=f"v{hz}",
                                    sample_rate=sr) for hz in (220.0, 330.0)]


def codes(result):
    return [s.codes for s in result] if isinstance(result, list) else [result.codes]


def same(a, b):
    assert len(codes(a)) == len(codes(b))
    for x, y in zip(codes(a), codes(b)):
        assert torch.equal(x, y)


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "seeded"])
def test_reuse_gives_the_same_codes(tiny_synth, voices, sampling):
    on, off = twin(tiny_synth, 64), twin(tiny_synth, 0)
    expected = off.tts("Hello there, how are you?", voices[0], seed=3, **sampling)
    first = on.tts("Hello there, how are you?", voices[0], seed=3, **sampling)  # keeps it
    again = on.tts("Hello there, how are you?", voices[0], seed=3, **sampling)  # reuses it
    same(first, expected)
    same(again, expected)
    assert on.runtime.engine.prefixes.hits >= 1 and len(on.runtime.engine.prefixes.entries) == 1
    assert not off.runtime.engine.prefixes.entries


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "seeded"])
def test_long_text_and_takes_reuse_across_batches(tiny_synth, voices, sampling):
    on, off = twin(tiny_synth, 64), twin(tiny_synth, 0)
    for kwargs in (dict(), dict(takes=3)):
        expected = off.tts(LONG, voices[0], seed=5, max_bytes=40, **kwargs, **sampling)
        got = on.tts(LONG, voices[0], seed=5, max_bytes=40, **kwargs, **sampling)
        assert len((got if kwargs else [got])[0].segments) > 1  # several text batches
        same(got, expected)
    assert on.runtime.engine.prefixes.hits >= 3  # every later text batch, every take


def test_two_voices_alternating_never_share(tiny_synth, voices):
    on, off = twin(tiny_synth, 64), twin(tiny_synth, 0)
    for voice in (voices[0], voices[1], voices[0], voices[1]):
        same(on.tts("Say it in this voice.", voice, seed=9, **SAMPLED),
             off.tts("Say it in this voice.", voice, seed=9, **SAMPLED))
    prefixes = on.runtime.engine.prefixes
    assert len(prefixes.entries) == 2 and prefixes.hits == 2 and prefixes.misses == 2


def test_dialogue_voices_and_no_voice_reuse_exactly(tiny_synth, voices):
    on, off = twin(tiny_synth, 64), twin(tiny_synth, 0)
    script = "A: Hello there.\nB: Hi, how are you?\nA: Fine, thanks."
    for _ in range(2):
        same(on.dialogue(script, {"A": voices[0], "B": voices[1]}, seed=2, **SAMPLED),
             off.dialogue(script, {"A": voices[0], "B": voices[1]}, seed=2, **SAMPLED))
        same(on.tts("No voice given.", seed=4, **SAMPLED),
             off.tts("No voice given.", seed=4, **SAMPLED))
    assert on.runtime.engine.prefixes.hits >= 2


def test_key_covers_every_codebook_and_the_model(sizes):
    ids = torch.zeros(sizes.prompt_rows, 6, dtype=torch.long)
    other = ids.clone()
    other[-1, 3] = 1  # the last codebook of one reference frame
    model = (1, "torch.float32", "cpu", "Linear", "Parameter")
    assert PrefixCache.key(model, ids) != PrefixCache.key(model, other)
    assert PrefixCache.key(model, ids) != PrefixCache.key((2, *model[1:]), ids)
    assert PrefixCache.key(model, ids) != PrefixCache.key((1, "torch.bfloat16", *model[2:]), ids)


def entry(ids, nbytes):
    return PrefixEntry(ids, [torch.zeros(nbytes // 8, dtype=torch.float32)],
                       [torch.zeros(nbytes // 8, dtype=torch.float32)])


def test_budget_evicts_least_recently_used(sizes):
    cache = PrefixCache(3000)
    keys = []
    for i in range(3):
        ids = torch.full((sizes.prompt_rows, 2), i)
        keys.append((PrefixCache.key(("m",), ids), ids))
        cache.put(keys[-1][0], entry(ids, 1000))
    assert cache.get(*keys[0]) is not None  # now the most recent
    cache.put(*(lambda ids: (PrefixCache.key(("m",), ids), entry(ids, 1000)))(
        torch.full((sizes.prompt_rows, 2), 9)))
    assert cache.get(*keys[1]) is None  # the least recently used went
    assert cache.get(*keys[0]) is not None and cache.get(*keys[2]) is not None
    assert cache.nbytes <= 3000
    big = torch.full((sizes.prompt_rows, 2), 7)
    cache.put(PrefixCache.key(("m",), big), entry(big, 8000))  # larger than the budget
    assert cache.get(PrefixCache.key(("m",), big), big) is None
    # A digest that matched other content (a collision) is still not a hit.
    assert cache.get(keys[0][0], keys[2][1]) is None


def test_off_release_and_bad_budget(tiny_synth, voices):
    off = twin(tiny_synth, 0)
    off.tts("Nothing kept.", voices[0], seed=1, **GREEDY)
    assert not off.runtime.engine.prefixes.entries and not off.runtime.engine.prefixes.enabled
    on = twin(tiny_synth, 64)
    on.tts("Kept.", voices[0], seed=1, **GREEDY)
    assert on.runtime.engine.prefixes.entries
    on.release_caches()
    assert not on.runtime.engine.prefixes.entries and on.runtime.engine.prefixes.nbytes == 0
    assert megabytes(None) > 0
    for bad in (-1, "big", True):
        with pytest.raises(ValueError, match="prefix_cache_mb"):
            twin(tiny_synth, bad)


def test_bf16_reuse_never_changes_a_result(ckpt_dir):
    """In bf16 too the same seed gives the same codes and samples whether the voice prefix was
    just computed, reused, or the cache is off: a prompt's rest always runs after its prefix
    the same way (``Engine.load_prefixes``), so a repeated workflow sounds the same."""
    synth = Synthesizer.from_pretrained(ckpt_dir, device="cpu", dtype="bf16")
    voice = synth.encode_voice(tone(synth.sample_rate), "A short reference.", name="v",
                               sample_rate=synth.sample_rate)
    on, off = twin(synth, 64), twin(synth, 0)
    text = "Hello there, how are you? " * 2
    for kwargs in (dict(), dict(takes=2)):
        expected = off.tts(text, voice, seed=3, max_bytes=30, **kwargs, **SAMPLED)
        for _ in range(2):  # computed and kept, then reused
            got = on.tts(text, voice, seed=3, max_bytes=30, **kwargs, **SAMPLED)
            same(got, expected)
            for a, b in zip(got if kwargs else [got], expected if kwargs else [expected]):
                assert torch.equal(a.waveform, b.waveform)
    assert on.runtime.engine.prefixes.hits >= 3


def test_a_new_row_count_keeps_the_prefixes(tiny_synth, voices):
    """Caches re-sized for another batch (takes, a continuous decode growing) keep the kept
    prefixes: their KV depends on neither the row count nor the cache length."""
    on = twin(tiny_synth, 64)
    for takes in (None, 2, None):
        on.tts("Hello there.", voices[0], seed=1, takes=takes, **GREEDY)
    prefixes = on.runtime.engine.prefixes
    assert prefixes.misses == 1 and prefixes.hits == 2  # one per later call


def test_takes_run_their_shared_prefix_once_and_nothing_is_kept_when_off(tiny_synth, voices,
                                                                          monkeypatch):
    """Takes join their rows together: per text batch one run of the voice prefix (the other
    takes copy it row to row) and one run of the rests; with the cache off no copy of the
    prefix KV is made to keep, and the codes are those of the cache on."""
    off, on = twin(tiny_synth, 0), twin(tiny_synth, 64)
    engine, runs = off.runtime.engine, {"run_prefix": 0, "prefill_after": 0, "kept_prefix": 0}
    for name in runs:
        original = getattr(engine, name)

        def counted(*args, name=name, original=original, **kwargs):
            runs[name] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(engine, name, counted)
    got = off.tts(LONG, voices[0], seed=5, max_bytes=40, takes=3, **SAMPLED)
    batches = len(got[0].segments)
    assert batches > 1 and runs == {"run_prefix": batches, "prefill_after": batches,
                                    "kept_prefix": 0}
    same(got, on.tts(LONG, voices[0], seed=5, max_bytes=40, takes=3, **SAMPLED))
