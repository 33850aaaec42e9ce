"""The remote client against a real engine, opt-in: these run only when
``SAILFISH_REAL_ENGINE_URL`` names one (and, for the model-name check,
``SAILFISH_REAL_ENGINE_CHECKPOINT`` the model it serves, as its ``/v1/models`` lists it), and skip
with that reason otherwise. ``.ci/run`` does not set them: a real engine is a 7 GB set-up.

A real vLLM-Omni 0.30 serving S2 in a virtual environment of its own, then these tests
pointed at it (docs/remote.md, "Trying it against a real engine")::

    ~/vo/bin/vllm serve fishaudio/s2-pro --omni --host 127.0.0.1 --port 8091
    SAILFISH_REAL_ENGINE_URL=http://127.0.0.1:8091 \\
    SAILFISH_REAL_ENGINE_CHECKPOINT=fishaudio/s2-pro \\
        python -m pytest tests/test_remote_real_engine.py -v

Each request asks for few frames (``FRAMES``): the engine runs on a CPU. What is checked: the
dialect is detected; the same request read whole (WAV), as raw streamed PCM, as OpenAI SSE
and through ``stream`` gives the same audio; a reference clip is taken; the same seed gives the
same audio and another seed other audio at temperature > 0; per-request sampling settings are
taken; a voice registered in the engine is used by its name (Python and CLI); ``s2-pro``
resolves to the model the engine serves."""

import os
import uuid

import numpy as np
import pytest
import soundfile as sf
import torch

from fish_core.remote import RemoteSynthesizer
from fish_core.remote.dialects import read_body, read_sse

URL = os.environ.get("SAILFISH_REAL_ENGINE_URL", "").strip()
CHECKPOINT = os.environ.get("SAILFISH_REAL_ENGINE_CHECKPOINT", "").strip()
pytestmark = pytest.mark.skipif(not URL, reason="SAILFISH_REAL_ENGINE_URL is not set (no real "
                                                "engine to test against; see the module doc)")
FRAMES = 24
TEXT = "Hello there, this is a real engine."
SAMPLED = dict(max_new_tokens=FRAMES, temperature=0.8, top_p=0.9, top_k=30)


@pytest.fixture(scope="module")
def synth():
    return RemoteSynthesizer(URL, read_timeout=600.0)


def clip(rate: int = 44100) -> torch.Tensor:
    """A reference clip: one second of a gliding tone (the tiny model takes any audio)."""
    t = np.arange(rate) / rate
    return torch.from_numpy((0.2 * np.sin(2 * np.pi * (200 + 100 * t) * t)).astype(np.float32))


def same(a: torch.Tensor, b: torch.Tensor, lsb: float = 1.5 / 32768) -> bool:
    """Equal audio, allowing 16-bit rounding (a WAV body and raw PCM may round apart)."""
    return a.shape == b.shape and bool((a - b).abs().max() <= lsb) if a.numel() else False


def test_detection_and_the_model(synth):
    assert synth.dialect.name in ("vllm-omni", "sglang-omni", "sailfish")
    assert synth.models, "the engine lists no model"
    if CHECKPOINT:
        assert CHECKPOINT in synth.models


def test_served_model_name_resolves(synth):
    named = RemoteSynthesizer(URL, model="s2-pro")
    assert named.model in synth.models
    if CHECKPOINT:
        assert named.model == CHECKPOINT
    with pytest.raises(ValueError, match="is not served by .* it serves"):
        RemoteSynthesizer(URL, model="no-such-model-here")


def test_plain_stream_and_sse_are_the_same_audio(synth):
    plain = synth.tts(TEXT, seed=5, **SAMPLED).waveform
    assert plain.numel() > 0
    with synth.stream(TEXT, seed=5, **SAMPLED) as stream:
        streamed = torch.cat(list(stream))
    assert same(plain, streamed)
    engine = synth.engine
    params = engine.params(5, synth_params(), 300)
    body = engine.dialect.body(TEXT, [], None, params)
    chunks = []
    sse = {**body, "stream_format": "sse"} if synth.dialect.name == "vllm-omni" else body
    engine.transport.request("POST", engine.dialect.speech_path,
                             lambda r: read_sse(r, lambda x, _: chunks.append(x), params),
                             json_body=sse, limit=engine.answer_limit(FRAMES))
    assert same(plain, torch.cat(chunks))
    whole = []
    wav_body = {**body, "stream": False, "response_format": "wav"}
    wav_body.pop("stream_format", None)
    engine.transport.request("POST", engine.dialect.speech_path,
                             lambda r: read_body(r, lambda x, _: whole.append(x), params),
                             json_body=wav_body, limit=engine.answer_limit(FRAMES))
    assert same(plain, torch.cat(whole))


def synth_params():
    from fish_core.params import SamplingParams

    return SamplingParams.from_options(SAMPLED, "test")


def test_a_reference_clip(synth):
    voice = synth.encode_voice(clip(), "A gliding tone.", sample_rate=44100)
    with_clip = synth.tts(TEXT, voice, seed=5, **SAMPLED).waveform
    assert with_clip.numel() > 0


def test_seeds_reproduce_and_differ(synth):
    first = synth.tts(TEXT, seed=11, **SAMPLED).waveform
    again = synth.tts(TEXT, seed=11, **SAMPLED).waveform
    other = synth.tts(TEXT, seed=12, **SAMPLED).waveform
    assert same(first, again), "the same seed gave other audio"
    assert not same(first, other), "another seed gave the same audio at temperature 0.8"


def test_per_request_sampling_is_taken(synth):
    for options in (dict(temperature=0.3, top_p=0.5, top_k=3), dict(temperature=1.2, top_k=1)):
        speech = synth.tts(TEXT, seed=3, max_new_tokens=FRAMES, **options)
        assert speech.waveform.numel() > 0


def test_an_engine_voice_by_name(synth, tmp_path, capsys):
    from fish_core import cli

    name = f"sailfish-test-{uuid.uuid4().hex[:8]}"
    voice = synth.encode_voice(clip(), "A gliding tone.", sample_rate=44100)
    synth.register_voice(voice, name, consent="sailfish-test: a generated tone, no person")
    assert name in synth.engine_voices()
    by_name = synth.tts(TEXT, voice=name, seed=5, **SAMPLED).waveform
    assert by_name.numel() > 0
    with pytest.raises(ValueError, match=f"voice 'not-{name}' is not one of the voices of"):
        synth.tts(TEXT, voice=f"not-{name}", seed=5, **SAMPLED)
    out = tmp_path / "named.wav"
    assert cli.main(["say", TEXT, "--voice", name, "--remote", URL, "--seed", "5",
                     "--max-new-tokens", str(FRAMES), "--top-p", "0.9", "-o", str(out)]) == 0
    capsys.readouterr()
    heard, rate = sf.read(out, dtype="float32")
    assert rate == synth.sample_rate and same(torch.from_numpy(heard), by_name)
