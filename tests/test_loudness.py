"""Loudness (``audio/loudness.py``, ``speech/finishing.py``): measured integrated loudness
(BS.1770-4, pyloudnorm) within 1 LU of the target, the peak ceiling held, per mix, speaker
track and line with the tracks summing to the mix, and the streaming rule (a gain fixed from
the first text batch)."""

import math

import pytest
import torch

from fish_core.audio import loudness as lufs
from fish_core.audio.loudness import Loudness, LoudnessError, measure, peak_db

pytest.importorskip("pyloudnorm")

SR = 44100
FAST = dict(max_new_tokens=10, temperature=0.8, top_p=0.8, top_k=30)


def speechlike(seconds=3.0, level=0.05, seed=0):
    """Noise shaped by a 3 Hz envelope: a loudness with speech's crest factor."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(int(seconds * SR)) / SR
    envelope = 0.5 + 0.5 * torch.sin(2 * math.pi * 3 * t).abs()
    return level * envelope * torch.randn(t.shape[0], generator=g)


@pytest.mark.parametrize("target", [-16.0, -23.0, -30.0])
def test_normalised_loudness_is_within_one_lu(target):
    wave = speechlike()
    out, gain = lufs.normalize(wave, SR, Loudness(target, ceiling=0.0))
    assert not gain.held
    assert abs(measure(out, SR) - target) < 1.0


def test_the_peak_ceiling_holds_true_and_sample_peak():
    loud = speechlike(level=0.3)
    for true_peak in (True, False):
        setting = Loudness(-9.0, ceiling=-1.0, true_peak=true_peak)
        out, gain = lufs.normalize(loud, SR, setting)
        assert gain.held
        assert peak_db(out, SR, true_peak) <= -1.0 + 1e-6
        assert measure(out, SR) < -9.0
    # True peak is at least the sample peak (it sees between the samples).
    assert peak_db(loud, SR, True) >= peak_db(loud, SR, False)


def test_silence_and_short_audio_are_left_alone():
    assert measure(torch.zeros(SR), SR) is None
    assert measure(speechlike(0.2), SR) is None
    out, gain = lufs.normalize(torch.zeros(SR), SR, Loudness(-16))
    assert gain.db == 0.0 and not out.any()


@pytest.mark.parametrize("value, words", [(-80, "from -70 to -5"), (3, "from -70 to -5"),
                                          (float("nan"), "from -70"), ("loud", "from -70")])
def test_bad_targets_are_named(value, words):
    with pytest.raises(LoudnessError, match=words):
        lufs.as_loudness(value)
    with pytest.raises(LoudnessError, match="ceiling"):
        Loudness(-16, ceiling=3)
    with pytest.raises(LoudnessError, match="per"):
        Loudness(-16, per="speaker")


def test_tts_reaches_its_loudness(tiny_synth):
    target = -30.0
    speech = tiny_synth.tts("Hello there. How are you today?", seed=2, loudness=target, **FAST)
    info = speech.finishing["loudness"]
    assert info["measured"] == pytest.approx(measure(speech.waveform, speech.sample_rate),
                                             abs=0.01)
    if info["held_by_ceiling"]:
        assert info["peak"] == pytest.approx(-1.0, abs=0.05)
    else:
        assert abs(info["measured"] - target) < 1.0
    assert peak_db(speech.waveform, speech.sample_rate) <= -1.0 + 1e-3
    assert speech.timeline()["finishing"]["loudness"]["target"] == target


@pytest.mark.parametrize("per", ["track", "line", "mix"])
def test_dialogue_loudness_per_track_and_line_keeps_the_tracks_summing(tiny_synth, per):
    script = "A: One two three four five.\nB: Six seven eight nine ten.\nA: Eleven twelve."
    speech = tiny_synth.dialogue(script, pause=0.1, seed=5,
                                 loudness=Loudness(-28.0, ceiling=0.0, per=per), **FAST)
    tracks = speech.tracks(2)
    assert torch.equal(tracks.sum(0), speech.waveform)
    sr = speech.sample_rate
    if per == "track":
        for track in tracks:
            got = measure(track, sr)
            assert got is None or abs(got - (-28.0)) < 1.0
    elif per == "line":
        for s in speech.segments:
            got = measure(speech.waveform[s.start_sample:s.end_sample], sr)
            assert got is None or abs(got - (-28.0)) < 1.0
    else:
        assert abs(measure(speech.waveform, sr) - (-28.0)) < 1.0


def test_a_stream_keeps_one_gain_from_its_first_batch(tiny_synth):
    """Streams cannot know the whole: the gain is measured on the first text batch and fixed;
    every later sample is the raw one times that gain (clamped at the ceiling)."""
    text = "A first sentence to measure. A second one follows here. And a third."
    setting = Loudness(-30.0, ceiling=-1.0)
    with tiny_synth.stream(text, seed=8, max_bytes=32, **FAST) as plain:
        raw = torch.cat(list(plain))
    with tiny_synth.stream(text, seed=8, max_bytes=32, loudness=setting, **FAST) as stream:
        got = torch.cat(list(stream))
    assert got.shape == raw.shape
    limit = 10 ** (setting.ceiling / 20)
    mask = raw.abs() > 1e-4
    factors = (got[mask] / raw[mask])
    unclamped = got[mask].abs() < limit - 1e-6
    assert torch.allclose(factors[unclamped], factors[unclamped][0].expand_as(
        factors[unclamped]), rtol=1e-4)
    assert got.abs().max() <= limit + 1e-6


# ---------------------------------------------------------------- costs what the speech costs
def whole_pyloudnorm(wave, sr):
    """What loudness and true peak were before: pyloudnorm and a 4× resample on the whole
    waveform, in float64."""
    import numpy as np
    import pyloudnorm
    from scipy.signal import resample_poly

    data = wave.double().numpy()
    peak = float(np.max(np.abs(resample_poly(data, 4, 1))))
    return float(pyloudnorm.Meter(sr).integrated_loudness(data)), 20 * math.log10(peak)


def with_pauses(sr, layout):
    def s(seconds, level=0.05, seed=0):
        return speechlike(seconds, level, seed)[:int(seconds * sr)]

    def z(seconds):
        return torch.zeros(int(seconds * sr))

    return {"speech": s(4.0),
            "pauses": torch.cat([s(2.0), z(7.0), s(3.0, 0.2, 1), z(2.3), s(1.0, 0.01, 2), z(3)]),
            "lead": torch.cat([z(5.0), s(2.0)]),
            "short gaps": torch.cat([s(1.0), z(0.7), s(1.0, seed=3), z(1.1), s(0.5, seed=4)]),
            }[layout]


@pytest.mark.parametrize("sr", [44100, 24000])
@pytest.mark.parametrize("layout", ["speech", "pauses", "lead", "short gaps"])
def test_measured_on_the_speech_as_pyloudnorm_on_the_whole(sr, layout):
    """Loudness and true peak are the values pyloudnorm and a 4× resample give on the whole
    waveform (to 1e-9 LU and dB; in practice bit for bit), silence or not."""
    wave = with_pauses(sr, layout)
    loudness, peak = whole_pyloudnorm(wave, sr)
    assert measure(wave, sr) == pytest.approx(loudness, abs=1e-9)
    assert peak_db(wave, sr) == pytest.approx(peak, abs=1e-9)
    gain = lufs.gain_for(wave, sr, Loudness(-16.0))
    assert gain.measured == pytest.approx(loudness, abs=1e-9)
    assert gain.peak == pytest.approx(peak, abs=1e-9)


def test_a_track_is_measured_as_its_own_file_without_building_it():
    mix = with_pauses(SR, "pauses")
    parts = [(0, mix[:2 * SR]), (12 * SR, mix[12 * SR:13 * SR])]
    dense = torch.zeros_like(mix)
    for offset, part in parts:
        dense[offset:offset + part.shape[0]] = part
    sparse = lufs.Sparse(mix.shape[0], parts)
    assert measure(sparse, SR) == pytest.approx(whole_pyloudnorm(dense, SR)[0], abs=1e-9)
    assert peak_db(sparse, SR) == pytest.approx(whole_pyloudnorm(dense, SR)[1], abs=1e-9)


def test_ten_minutes_of_pauses_cost_what_the_speech_costs():
    """600 s of silence around 4 s of speech: no float64 copy of the whole (26 M samples,
    212 MB each, and a 4× one for the true peak); numpy's peak stays near the speech's size."""
    import tracemalloc

    wave = torch.cat([speechlike(3.0)] + [torch.zeros(60 * SR)] * 10 + [speechlike(1.0, seed=1)])
    tracemalloc.start()
    try:
        gain = lufs.gain_for(wave, SR, Loudness(-16.0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert gain.measured is not None and not gain.held
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB traced for 4 s of speech"


def test_a_finished_mix_is_measured_once(tiny_synth, monkeypatch):
    """The report of one gain (``per="mix"``) follows from what was measured before the gain:
    nothing is measured again (and it is what measuring the result gives, to 0.01 LU)."""
    calls = []
    integrated = lufs.Kept.integrated
    monkeypatch.setattr(lufs.Kept, "integrated", lambda kept: calls.append(1) or integrated(kept))
    speech = tiny_synth.tts("Hello there. [pause:2s] How are you today?", seed=2,
                            loudness=-30.0, **FAST)
    assert len(calls) == 1
    info = speech.finishing["loudness"]
    assert info["measured"] == pytest.approx(measure(speech.waveform, speech.sample_rate),
                                             abs=0.011)
    assert info["peak"] == pytest.approx(peak_db(speech.waveform, speech.sample_rate), abs=0.011)


def test_a_served_answer_is_normalised_off_the_model_worker(tiny_synth, voices_dir, monkeypatch):
    """Beside a request of 600 s of pauses with a loudness, another client's small request is
    not held up: it is answered while the big answer's loudness is still being measured (the
    measurement waits for it, up to 20 s), so it finishes first. Measured as an ordering."""
    import threading

    import numpy as np

    pytest.importorskip("aiohttp")
    try:  # the HTTP client the openai SDK depends on (httpx2 in newer releases)
        import httpx2 as httpx
    except ImportError:
        httpx = pytest.importorskip("httpx")
    from conftest import served

    sr = tiny_synth.sample_rate
    measuring, small_done, seen = threading.Event(), threading.Event(), []
    gain_for = lufs.gain_for

    def gated(wave, rate, loudness):
        if wave.shape[-1] > 60 * rate:  # the big answer: measured once the small one is done
            measuring.set()
            seen.append(small_done.wait(20))
        return gain_for(wave, rate, loudness)

    monkeypatch.setattr(lufs, "gain_for", gated)
    order, answers = [], {}
    big = {"text": "[pause:60s]" * 10 + " Ok.", "loudness": -16, "format": "pcm", "seed": 1,
           "max_new_tokens": 8}
    small = {"text": "Ok.", "format": "pcm", "seed": 2, "max_new_tokens": 8}
    with served(tiny_synth, voices_dir) as server:
        def post(name, body):
            answers[name] = httpx.post(server.url + "/v1/tts", json=body, timeout=120)
            order.append(name)

        first = threading.Thread(target=post, args=("big", big))
        first.start()
        assert measuring.wait(120)
        post("small", small)
        small_done.set()
        first.join(120)
    assert seen == [True]  # the small request was answered while the big one was measured
    assert order == ["small", "big"]
    assert answers["big"].status_code == answers["small"].status_code == 200
    pcm = np.frombuffer(answers["big"].content, dtype="<i2")
    assert pcm.shape[0] > 600 * sr and not pcm[:600 * sr].any() and pcm[600 * sr:].any()
