"""Speaking rate (``audio/stretch.py``): Rubber Band through pedalboard keeps the pitch and
makes exactly ``round(n / speed)`` samples; a result at a speed is the unstretched speech / X
while its pauses keep their length; serve honours OpenAI's ``speed``."""

import math

import numpy as np
import pytest
import torch

from fish_core.audio.stretch import SpeedError, check_speed, stretch

pytest.importorskip("pedalboard")

SR = 44100
FAST = dict(max_new_tokens=10, temperature=0.8, top_p=0.8, top_k=30)


def dominant_hz(wave: torch.Tensor, sr: int) -> float:
    spectrum = np.abs(np.fft.rfft(wave.numpy() * np.hanning(wave.shape[0])))
    return float(np.argmax(spectrum) * sr / wave.shape[0])


@pytest.mark.parametrize("speed", [0.5, 0.8, 1.25, 2.0])
def test_exact_length_and_the_same_pitch(speed):
    t = torch.arange(SR) / SR
    tone = 0.3 * torch.sin(2 * math.pi * 440 * t)
    out = stretch(tone, SR, speed)
    assert out.shape[0] == round(SR / speed) and out.dtype == torch.float32
    core = out[out.shape[0] // 4: 3 * out.shape[0] // 4]
    assert dominant_hz(core, SR) == pytest.approx(440, rel=0.02)


def test_speed_one_is_untouched_and_bad_speeds_are_named():
    wave = torch.randn(1000)
    assert stretch(wave, SR, 1.0) is wave
    for bad in (0.4, 2.5, float("inf"), "fast", True):
        with pytest.raises(SpeedError, match="speed must be a number from 0.5"):
            check_speed(bad)


def test_tts_duration_is_the_unstretched_one_over_speed(tiny_synth):
    sr = tiny_synth.sample_rate
    text = "Hello there, how are you? [pause:500ms] Fine, thanks."
    plain = tiny_synth.tts(text, seed=3, **FAST)
    for speed in (0.75, 1.5):
        fast = tiny_synth.tts(text, seed=3, speed=speed, **FAST)
        for a, b in zip(plain.segments, fast.segments):
            assert b.end_sample - b.start_sample == round((a.end_sample - a.start_sample) / speed)
        gap = fast.segments[1].start_sample - fast.segments[0].end_sample
        assert gap == round(0.5 * sr)  # the pause keeps its length
        speech = sum(s.end_sample - s.start_sample for s in plain.segments)
        assert fast.waveform.shape[0] - round(0.5 * sr) == pytest.approx(speech / speed, abs=2)
        assert fast.finishing["speed"] == speed


def test_stream_and_live_at_a_speed_equal_the_whole(tiny_synth):
    text = "One sentence here. Another one there."
    whole = tiny_synth.tts(text, seed=7, speed=1.3, max_bytes=20, **FAST)
    pieces = []
    live = tiny_synth.tts(text, seed=7, speed=1.3, max_bytes=20,
                          on_chunk=lambda s, r: pieces.append(s), **FAST)
    assert torch.equal(torch.cat(pieces), live.waveform)
    assert torch.equal(live.waveform, whole.waveform)
    with tiny_synth.stream(text, seed=7, speed=1.3, max_bytes=20, **FAST) as stream:
        assert torch.equal(torch.cat(list(stream)), whole.waveform)


def test_serve_honours_openai_speed_and_loudness(tiny_synth, voices_dir):
    import io
    import json
    import urllib.request

    import soundfile as sf

    from conftest import served
    from fish_core.audio.loudness import measure

    body = {"input": "Hello from the server.", "seed": 4, "max_new_tokens": 10,
            "response_format": "wav"}

    def post(url, payload) -> bytes:
        request = urllib.request.Request(url, json.dumps(payload).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.read()

    with served(tiny_synth, voices_dir) as server:
        def speak(**extra):
            data = post(server.url + "/v1/audio/speech", {**body, **extra})
            return sf.read(io.BytesIO(data), dtype="float32")[0]

        plain, fast = speak(), speak(speed=1.6)
        assert fast.shape[0] == round(plain.shape[0] / 1.6)
        loud = speak(loudness=-30)
        got = measure(torch.from_numpy(loud), tiny_synth.sample_rate)
        assert (got is not None and abs(got - (-30)) < 1.0) or np.abs(loud).max() > 0.85
        streamed = post(server.url + "/v1/audio/speech",
                        {**body, "speed": 1.6, "stream_format": "audio",
                         "response_format": "pcm"})
        assert len(streamed) // 2 == fast.shape[0]
