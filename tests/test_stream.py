"""Streaming synthesis on the tiny fixture checkpoint: the stream concatenates to the
non-streamed audio, chunks follow the documented rule, and closing a stream cancels it."""

import math
import threading

import pytest
import torch

from fish_core.local.driver import ChunkDecoder, SpeechJob, decode_batches
from fish_core.params import GenerationError

FAST = dict(max_new_tokens=24, temperature=0.8, top_p=0.8, top_k=30)


@pytest.fixture(scope="module")
def synth(tiny_synth):
    return tiny_synth


@pytest.fixture(scope="module")
def voice(synth):
    t = torch.arange(synth.sample_rate // 2) / synth.sample_rate
    wave = 0.3 * torch.sin(2 * math.pi * 220 * t)
    return synth.encode_voice({"waveform": wave[None, None], "sample_rate": synth.sample_rate},
                              "A short reference.", name="Ref")


def random_codes(synth, frames: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    config = synth.runtime.config
    return torch.randint(0, config.codebook_size, (config.num_codebooks, frames), generator=g)


def test_chunks_follow_the_rule(synth):
    hop = synth.runtime.codec.frame_length
    decoder = ChunkDecoder(synth.runtime.codec, first_frames=3, chunk_frames=10)
    codes = random_codes(synth, 40)
    sizes = []
    for i in range(codes.shape[1]):  # one frame at a time, as generation delivers them
        sizes += [c.shape[0] // hop for c in decoder.push(codes[:, i:i + 1])]
    sizes += [c.shape[0] // hop for c in decoder.flush()]
    assert sizes == [3, 6, 10, 10, 10, 1]


def test_decode_batches_is_the_stream_concatenated(synth):
    pieces = [random_codes(synth, 37, 1), random_codes(synth, 5, 2), random_codes(synth, 20, 3)]
    decoder, chunks = ChunkDecoder(synth.runtime.codec), []
    for piece in pieces:
        for i in range(piece.shape[1]):
            chunks += decoder.push(piece[:, i:i + 1])
        chunks += decoder.flush()
    whole = decode_batches(synth.runtime.codec, pieces)
    assert whole.shape[0] == sum(p.shape[1] for p in pieces) * synth.runtime.codec.frame_length
    assert torch.equal(torch.cat(chunks), whole)


@pytest.mark.parametrize("max_bytes", [300, 20])  # one text batch, then several
def test_stream_equals_tts(synth, voice, max_bytes):
    text = "Streaming audio while it is made. It must sound the same."
    speech = synth.tts(text, voice, seed=7, max_bytes=max_bytes, **FAST)
    stream = synth.stream(text, voice, seed=7, max_bytes=max_bytes, **FAST)
    chunks = list(stream)
    assert stream.seed == speech.seed == 7
    assert len(chunks) >= 1 and all(c.dtype == torch.float32 for c in chunks)
    streamed = torch.cat(chunks)
    assert streamed.shape == speech.waveform.shape
    assert (streamed - speech.waveform).abs().max().item() <= 1e-6


def test_first_chunk_after_first_frames(synth):
    hop = synth.runtime.codec.frame_length
    speech = synth.tts("How soon does audio start?", seed=3, **FAST)
    with synth.stream("How soon does audio start?", seed=3, first_frames=2, chunk_frames=8,
                      **FAST) as stream:
        first = next(iter(stream))
    assert first.shape[0] == min(2, speech.codes.shape[1]) * hop


def test_a_stream_left_open_yields_to_a_new_one(synth):
    """A stream read in part and never closed, then a second stream on the same model: the
    second runs whole and sounds as ``tts`` does; the first stops with an error saying why
    (they never decode into the same caches at once)."""
    text = "Two streams on one model. The second one wins."
    long = {**FAST, "max_new_tokens": 1000}  # still decoding when the others start
    left_open = synth.stream(text, seed=5, first_frames=1, chunk_frames=1, **long)
    next(iter(left_open))
    speech = synth.tts(text, seed=6, **FAST)
    second = torch.cat(list(synth.stream(text, seed=6, **FAST)))
    assert second.shape == speech.waveform.shape
    assert (second - speech.waveform).abs().max().item() <= 1e-6  # as test_stream_equals_tts
    try:
        rest = list(left_open)  # it may have ended before the second began
    except GenerationError as e:
        assert "another decode started" in str(e)
    else:
        assert all(c.dtype == torch.float32 for c in rest)
    left_open.close()


def test_closing_a_stream_cancels_generation(synth, monkeypatch):
    frames, gate = [], threading.Event()
    original = SpeechJob.feed

    def slow(job, column, eos):  # every column the live job is handed
        frames.append(column)
        gate.wait(timeout=10)  # hold generation until the consumer has cancelled
        original(job, column, eos)

    monkeypatch.setattr(SpeechJob, "feed", slow)
    stream = synth.stream("Cancel me, please.", seed=1, max_new_tokens=200, first_frames=1,
                          temperature=0.8, top_p=0.8, top_k=30)
    stream.job.cancel()
    gate.set()
    stream.close()
    assert list(stream) == [] and len(frames) <= 2  # the prefill column and at most one more


def test_bad_stream_settings_name_the_field(synth):
    with pytest.raises(ValueError, match="first_frames"):
        synth.stream("Hi.", first_frames=0)
    with pytest.raises(ValueError, match="text"):
        synth.stream("  ")


def test_cli_say_stream_to_stdout_and_file(ckpt_dir, sizes, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    import numpy as np
    import soundfile as sf

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def say(*extra):
        return subprocess.run([sys.executable, "-m", "fish_core", "say", "Streamed to a pipe.",
                               "--model", str(ckpt_dir), "--precision", "fp32", "--seed", "5",
                               "--max-new-tokens", "16", *extra], cwd=root, env=env,
                              capture_output=True, timeout=300)

    whole = tmp_path / "whole.wav"
    assert say("-o", str(whole)).returncode == 0
    piped = say("--stream", "-o", "-")
    assert piped.returncode == 0, piped.stderr.decode()
    assert piped.stdout[:4] == b"RIFF" and b"streamed" in piped.stderr
    to_file = tmp_path / "streamed.wav"
    assert say("--stream", "-o", str(to_file)).returncode == 0
    expected = sf.read(whole, dtype="int16")[0]
    from_file, sr = sf.read(to_file, dtype="int16")  # the header was given the real length
    assert sr == sizes.sample_rate and np.array_equal(from_file, expected)
    assert to_file.read_bytes() == whole.read_bytes()
    from_pipe = np.frombuffer(piped.stdout[44:], dtype="<i2")
    assert np.array_equal(from_pipe, from_file)
    raw = say("--stream", "-o", str(tmp_path / "x.flac"))
    assert raw.returncode == 2 and b"--stream writes" in raw.stderr
