"""``serve/jobs.py`` and the voice library's memo: a request becomes a job in one place, its saved
voice resolved once and read from disk only when its file changed (counted, not timed), its
name kept; an uploaded reference is parsed once (``audio.files.read_audio_bytes``)."""

from __future__ import annotations

import io
import os
import shutil
import time

import numpy as np
import pytest
import soundfile as sf

pytest.importorskip("aiohttp")
try:  # the HTTP client the openai SDK itself depends on (httpx2 in newer releases)
    import httpx2 as httpx
except ImportError:
    httpx = pytest.importorskip("httpx")

from conftest import served, tone  # noqa: E402
from fish_core.audio.files import AudioError, read_audio_bytes  # noqa: E402
from fish_core.serve.request import SpeechRequest  # noqa: E402
from fish_core.serve.http.errors import ApiError  # noqa: E402
from fish_core.serve.jobs import Jobs  # noqa: E402
from fish_core.serve.limits import Limits  # noqa: E402
from fish_core.serve.voicelib import VoiceLibrary  # noqa: E402
from fish_core.speech.voices import Voice  # noqa: E402

FAST = {"max_new_tokens": 8, "temperature": 0.8, "top_p": 0.8, "top_k": 30}


@pytest.fixture()
def library(tmp_path, voices_dir):
    root = tmp_path / "voices"
    root.mkdir()
    shutil.copy(voices_dir / "alice.safetensors", root / "alice.safetensors")
    settled(root / "alice.safetensors")
    return VoiceLibrary([root])


def settled(path):
    """``path`` as a file saved a while ago (a file written in the last seconds is never trusted
    unchanged: ``access.file_stamp``)."""
    past = time.time() - 60
    os.utime(path, (past, past))


def test_a_saved_voice_is_read_once_until_its_file_changes(library, tiny_synth):
    c = tiny_synth.runtime.config
    first = library.load("alice", "voice", c.num_codebooks, c.codebook_size)
    again = library.load("alice", "voice", c.num_codebooks, c.codebook_size)
    assert again is first and library.loads == 1
    path = library.roots[0] / "alice.safetensors"
    changed = Voice("alice", first.clips[:1] * 2, first.sample_rate)  # another file
    changed.save(path)
    reread = library.load("alice", "voice", c.num_codebooks, c.codebook_size)
    assert library.loads == 2 and len(reread.clips) == 2
    assert library.load("alice", "voice", c.num_codebooks, c.codebook_size) is not reread
    assert library.loads == 3  # written just now: read again until it has settled
    settled(path)
    kept = library.load("alice", "voice", c.num_codebooks, c.codebook_size)
    assert library.load("alice", "voice", c.num_codebooks, c.codebook_size) is kept
    assert library.loads == 4
    library.rename("alice", "bob")  # a change through the library forgets every voice
    with pytest.raises(ApiError) as error:
        library.load("alice")
    assert error.value.status == 404
    assert library.load("bob", "voice", c.num_codebooks, c.codebook_size).name == "alice"
    assert library.loads == 5


def test_a_file_replaced_beside_the_server_is_read_again(library, tiny_synth, tmp_path):
    c = tiny_synth.runtime.config
    library.load("alice", "voice", c.num_codebooks, c.codebook_size)
    path = library.roots[0] / "alice.safetensors"
    copy = tmp_path / "copy.safetensors"
    shutil.copy(path, copy)
    os.replace(copy, path)  # same bytes, a new file (another inode)
    library.load("alice", "voice", c.num_codebooks, c.codebook_size)
    assert library.loads == 2


def test_jobs_keep_the_saved_voice_and_its_name(library, tiny_synth):
    jobs = Jobs(library, Limits())
    runtime = tiny_synth.runtime
    [voice] = jobs.voice(runtime, SpeechRequest("Hello.", "alice"))
    assert voice.name == "alice" and voice.clips  # not re-boxed as an anonymous "speaker"
    assert jobs.voice(runtime, SpeechRequest("Hello.")) == []  # the model's own voice
    default = Jobs(library, Limits(), default_voice="alice")
    assert [v.name for v in default.voice(runtime, SpeechRequest("Hello."))] == ["alice"]
    assert library.loads == 1  # three resolutions, one read


def test_requests_for_one_voice_read_its_file_once(library, tiny_synth):
    """Five requests naming the same saved voice (openai and fish-speech dialects): the file is
    read once; the voice listing is not walked to answer them."""
    with served(tiny_synth, library.roots[0]) as running:
        running.service.voices = running.service.scheduler.jobs.voices = library
        for i in range(3):
            r = httpx.post(running.url + "/v1/audio/speech", timeout=120,
                           json={"input": f"Hello {i}.", "voice": "alice", "seed": i, **FAST})
            assert r.status_code == 200, r.text
        for i in range(2):
            r = httpx.post(running.url + "/v1/tts", timeout=120,
                           json={"text": f"Hi {i}.", "reference_id": "alice", "seed": i,
                                 "max_new_tokens": 8})
            assert r.status_code == 200, r.text
    assert library.loads == 1 and library.walks == 0


def wav(wave, sr: int) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, np.asarray(wave), sr, format="WAV")
    return buffer.getvalue()


def test_uploaded_audio_is_parsed_once(monkeypatch):
    short, long = wav(tone(16000), 16000), wav(tone(16000, seconds=6.0), 16000)
    opened = []
    real = sf.SoundFile

    def counting(*args, **kwargs):
        opened.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(sf, "SoundFile", counting)
    monkeypatch.setattr(sf, "info", lambda *a, **k: pytest.fail("parsed a second time"))
    wave, sr = read_audio_bytes(short, max_seconds=5, name="ref")
    assert sr == 16000 and wave.shape == (8000,) and len(opened) == 1
    with pytest.raises(AudioError, match=r"^ref: is 6\.0 s long; the limit is 5 s"):
        read_audio_bytes(long, max_seconds=5, name="ref")
    with pytest.raises(AudioError, match=r"^ref: is not readable audio") as error:
        read_audio_bytes(b"RIFF" + b"\0" * 40, name="ref")
    assert "BytesIO" not in str(error.value)


def test_the_wire_request_carries_one_checked_request():
    """Each dialect builds the speech ``Request`` once at parse time (``to_request``): its ranges
    are the ``Request``'s rules (top_k by ``MAX_TOP_K``), errors name the dialect's fields, the
    operator's max_new_tokens cap is the door's; the seed is picked there, once."""
    from fish_core.params import MAX_TOP_K
    from fish_core.serve.api.fish import parse_fish
    from fish_core.serve.api.openai import parse_openai

    limits, models = Limits(max_new_tokens=64), {"s2-pro"}
    wire = parse_openai({"input": "Hi.", "seed": 5, "top_k": 40, "speed": 1}, limits, models)
    assert (wire.speech.text, wire.speech.seed, wire.speech.sampling.top_k) == ("Hi.", 5, 40)
    assert wire.speech.sampling.max_new_tokens == 64  # the cap is the default's ceiling
    assert isinstance(parse_fish({"text": "Hi."}, limits).speech.seed, int)  # picked once
    cases = [({"top_k": MAX_TOP_K + 1}, "top_k", f"must lie in 1 .. {MAX_TOP_K}"),
             ({"temperature": 2}, "temperature", "must lie in (0, 2)"),
             ({"max_new_tokens": 65}, "max_new_tokens", "must lie in 1 .. 64"),
             ({"max_new_tokens": 0}, "max_new_tokens", "must lie in 1 .. 64"),
             ({"speed": 2.5}, "speed", "speed: must be a number from 0.5"),
             ({"loudness": 3}, "loudness", "loudness: must be a target in LUFS")]
    for extra, param, message in cases:
        for parse in (lambda b: parse_openai({"input": "Hi.", **b}, limits, models),
                      lambda b: parse_fish({"text": "Hi.", **b}, limits)):
            with pytest.raises(ApiError) as error:
                parse(extra)
            assert (error.value.status, error.value.param) == (400, param), extra
            assert message in error.value.message, error.value.message


def test_a_stream_sentence_replaces_text_and_seed_only():
    """A WS session's sentence i: the session's checked request with its text and the seed
    ``batch_seed(seed, i)`` (no second check, the references the same objects)."""
    from fish_core.params import MAX_SEED, batch_seed
    from fish_core.serve.api.stream_config import StreamConfig, sentence_request
    from fish_core.serve.api.openai import parse_openai

    wire = parse_openai({"input": "-", "seed": MAX_SEED, "response_format": "pcm"}, Limits(),
                        {"s2-pro"})
    config = StreamConfig(wire, "[calm] ")
    one = sentence_request(config, "Second one.", 1)
    assert one.text == one.speech.text == "[calm] Second one."
    assert one.speech.seed == batch_seed(MAX_SEED, 1) == 0
    assert one.speech.sampling == wire.speech.sampling and one.references is wire.references
    assert (one.stream, one.format) == ("audio", "pcm")
