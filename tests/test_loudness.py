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
