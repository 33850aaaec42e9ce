"""The HTTP server on the tiny checkpoint, over real loopback sockets: the official ``openai``
SDK for /v1/audio/speech, plain HTTP (httpx) for /v1/tts and the voice library, and a matrix of
bad requests that must each get a 4xx JSON error naming the field while the server keeps
serving."""

import base64
import io
import json
import threading
import time

import numpy as np
import pytest
import soundfile as sf
import torch

pytest.importorskip("aiohttp")
openai = pytest.importorskip("openai")
try:  # the HTTP client the openai SDK itself depends on (httpx2 in newer releases)
    import httpx2 as httpx
except ImportError:
    httpx = pytest.importorskip("httpx")

from conftest import served, tone  # noqa: E402
from fish_core.engine.rows import RowBatch  # noqa: E402
from fish_core.serve.http import formats  # noqa: E402
from fish_core.serve.background import BackgroundServer  # noqa: E402
from fish_core.serve.limits import Limits  # noqa: E402
from fish_core.serve.service import Service  # noqa: E402
from fish_core.local.driver import SpeechJob  # noqa: E402

KEY = "test-key-123"
FAST = dict(max_new_tokens=24, temperature=0.8, top_p=0.8, top_k=30)
LIMITS = Limits(max_body_bytes=2 * 2**20, max_text_chars=500, max_references=2,
                max_reference_seconds=5.0, max_new_tokens=64, timeout_seconds=120.0)


@pytest.fixture(scope="module")
def synth(tiny_synth):
    return tiny_synth


def wav_bytes(wave: torch.Tensor, sr: int) -> bytes:
    out = io.BytesIO()
    sf.write(out, wave.numpy(), sr, format="WAV", subtype="PCM_16")
    return out.getvalue()


@pytest.fixture(scope="module")
def server(synth, voices_dir):
    with served(synth, voices_dir, api_key=KEY, limits=LIMITS) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def http(server, method: str, path: str, key: str | None = KEY, **kwargs) -> httpx.Response:
    headers = dict(kwargs.pop("headers", {}))
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.request(method, server.url + path, headers=headers, timeout=120, **kwargs)


def samples(data: bytes) -> np.ndarray:
    wave, _ = sf.read(io.BytesIO(data), dtype="int16")
    return wave


def pcm_of(wave: torch.Tensor) -> np.ndarray:
    return np.frombuffer(formats.pcm16(wave), dtype="<i2")


# ---------------------------------------------------------------- OpenAI dialect
def test_openai_speech_equals_python_api(client, synth, voices_dir):
    from fish_core.speech.voices import Voice

    text = "Hello from the server."
    voice = Voice.load(voices_dir / "alice.safetensors")
    speech = synth.tts(text, voice, seed=11, **FAST)
    response = client.audio.speech.create(model="tts-1", input=text, voice="alice",
                                          response_format="wav",
                                          extra_body={"seed": 11, **FAST})
    data = response.content
    assert data[:4] == b"RIFF" and response.response.headers["x-sailfish-seed"] == "11"
    assert data == formats.encode(speech.waveform, speech.sample_rate, "wav")
    assert np.array_equal(samples(data), pcm_of(speech.waveform))


def test_openai_streamed_equals_whole(client):
    body = dict(model="s2-pro", input="Streaming over HTTP.", voice="alice",
                response_format="pcm", extra_body={"seed": 4, **FAST})
    whole = client.audio.speech.create(**body).content
    with client.audio.speech.with_streaming_response.create(stream_format="audio",
                                                            **body) as response:
        assert response.headers["content-type"] == "audio/pcm"
        pieces = [piece for piece in response.iter_bytes() if piece]
    assert len(whole) > 0 and b"".join(pieces) == whole


def test_openai_sse_events(client, server):
    body = dict(model="s2-pro", input="Events, please.", voice="alice", response_format="wav",
                extra_body={"seed": 4, **FAST})
    whole = client.audio.speech.create(**body).content
    with client.audio.speech.with_streaming_response.create(stream_format="sse",
                                                            **body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[len("data: "):]) for line in response.iter_lines()
                  if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "speech.audio.done" and set(kinds[:-1]) == {"speech.audio.delta"}
    streamed = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert streamed[:4] == b"RIFF" and streamed[44:] == whole[44:]  # same samples, open header


def test_models_and_health(client, server):
    ids = {m.id for m in client.models.list().data}
    assert {"s2-pro", "tts-1", "tts-1-hd"} <= ids
    health = http(server, "GET", "/v1/health", key=None)
    assert health.status_code == 200 and health.json()["status"] == "ok"


@pytest.mark.parametrize("fmt", ["flac", "mp3", "opus"])
def test_other_formats_decode_or_are_refused(client, sizes, fmt):
    if fmt not in formats.writable():
        with pytest.raises(openai.BadRequestError) as e:
            client.audio.speech.create(model="s2-pro", input="Hi.", voice="alice",
                                       response_format=fmt, extra_body={"seed": 1, **FAST})
        assert e.value.body["param"] == "response_format"
        return
    data = client.audio.speech.create(model="s2-pro", input="Formats.", voice="alice",
                                      response_format=fmt, extra_body={"seed": 1, **FAST}).content
    wave, sr = sf.read(io.BytesIO(data), dtype="float32")
    assert sr in (sizes.sample_rate, formats.OPUS_RATE) and wave.shape[0] > 0


def test_references_clone_inline(client, synth, server):
    audio = base64.b64encode(wav_bytes(tone(22050, 0.5, 330), 22050)).decode()
    response = http(server, "POST", "/v1/audio/speech", json={
        "input": "Cloned inline.", "references": [{"audio": audio, "text": "A reference."}],
        "ref_audio": "data:audio/wav;base64," + audio, "ref_text": "Another one.",
        "response_format": "wav", "seed": 2, **FAST})
    assert response.status_code == 200, response.text
    assert samples(response.content).shape[0] > 0


# ---------------------------------------------------------------- fish-speech dialect
def test_fish_tts_json_and_streaming(server, synth, voices_dir):
    body = {"text": "Fish dialect.", "reference_id": "alice", "format": "wav", "seed": 9,
            "max_new_tokens": 24, "top_p": 0.8, "temperature": 0.8, "chunk_length": 200}
    whole = http(server, "POST", "/v1/tts", json=body)
    assert whole.status_code == 200 and whole.headers["content-type"] == "audio/wav"
    streamed = http(server, "POST", "/v1/tts", json={**body, "streaming": True})
    assert streamed.status_code == 200 and streamed.content[44:] == whole.content[44:]


def test_fish_tts_msgpack(server):
    body = {"text": "Packed.", "reference_id": "alice", "format": "pcm", "seed": 9,
            "max_new_tokens": 24}
    packer = None
    for name in ("ormsgpack", "msgpack"):
        try:
            packer = __import__(name).packb
            break
        except ImportError:
            continue
    data = packer(body) if packer else b"\x81\xa4text\xa2hi"
    response = http(server, "POST", "/v1/tts", content=data,
                    headers={"Content-Type": "application/msgpack"})
    if packer is None:
        assert response.status_code == 415 and response.json()["error"]["param"] == "content-type"
    else:
        json_response = http(server, "POST", "/v1/tts", json=body)
        assert response.status_code == 200 and response.content == json_response.content


# ---------------------------------------------------------------- voice library
def test_voice_library_both_dialects(server, voices_dir):
    clip = wav_bytes(tone(44100, 0.6, 180), 44100)
    added = http(server, "POST", "/v1/audio/voices", data={"name": "bob", "text": "Bob here."},
                 files={"audio": ("bob.wav", clip, "audio/wav")})
    assert added.status_code == 201, added.text
    assert (voices_dir / "bob.safetensors").is_file()
    names = [v["id"] for v in http(server, "GET", "/v1/audio/voices").json()["data"]]
    assert "bob" in names and "alice" in names
    again = http(server, "POST", "/v1/audio/voices", data={"name": "bob", "text": "x"},
                 files={"audio": ("bob.wav", clip, "audio/wav")})
    assert again.status_code == 409 and again.json()["error"]["param"] == "name"

    renamed = http(server, "PATCH", "/v1/audio/voices/bob", json={"name": "robert"})
    assert renamed.status_code == 200 and (voices_dir / "robert.safetensors").is_file()
    speech = http(server, "POST", "/v1/tts", json={"text": "Robert speaks.",
                                                   "reference_id": "robert", "seed": 1,
                                                   "max_new_tokens": 24})
    assert speech.status_code == 200

    fish_added = http(server, "POST", "/v1/references/add", data={"id": "carol", "text": "Hi."},
                      files={"audio": ("c.wav", clip, "audio/wav")})
    assert fish_added.status_code == 200 and fish_added.json()["success"] is True
    listed = http(server, "GET", "/v1/references/list").json()["reference_ids"]
    assert {"carol", "robert"} <= set(listed)
    updated = http(server, "POST", "/v1/references/update",
                   json={"old_reference_id": "carol", "new_reference_id": "sub/carol"})
    assert updated.status_code == 200 and (voices_dir / "sub" / "carol.safetensors").is_file()
    deleted = http(server, "DELETE", "/v1/references/delete", json={"reference_id": "sub/carol"})
    assert deleted.status_code == 200 and not (voices_dir / "sub" / "carol.safetensors").exists()
    gone = http(server, "DELETE", "/v1/audio/voices/robert")
    assert gone.status_code == 200 and not (voices_dir / "robert.safetensors").exists()
    assert sorted(p.name for p in voices_dir.rglob("*.safetensors")) == ["alice.safetensors"]


def test_voice_upload_on_a_full_disk_is_507_naming_the_field(server, voices_dir, monkeypatch):
    """The disk fills while a voice is saved: 507 naming the field and the reason (not a 500,
    not the server's path), no file left behind, the voice not listed; then it saves."""
    import errno

    from fish_core.audio import atomic

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    before = sorted(p.name for p in voices_dir.rglob("*"))
    clip = wav_bytes(tone(44100, 0.6, 180), 44100)
    monkeypatch.setattr(atomic.os, "fsync", full)
    for path, data in (("/v1/audio/voices", {"name": "dora", "text": "Dora here."}),
                       ("/v1/references/add", {"id": "dora", "text": "Dora here."})):
        answer = http(server, "POST", path, data=data,
                      files={"audio": ("d.wav", clip, "audio/wav")})
        error = answer.json()["error"]
        assert answer.status_code == 507, answer.text
        assert error["param"] == ("name" if "voices" in path else "id")
        assert "no space left on the device" in error["message"]
        assert str(voices_dir) not in error["message"]
    assert sorted(p.name for p in voices_dir.rglob("*")) == before
    assert "dora" not in [v["id"] for v in http(server, "GET", "/v1/audio/voices").json()["data"]]
    monkeypatch.undo()
    added = http(server, "POST", "/v1/audio/voices", data={"name": "dora", "text": "Dora."},
                 files={"audio": ("d.wav", clip, "audio/wav")})
    assert added.status_code == 201 and http(server, "DELETE", "/v1/audio/voices/dora").is_success


# ---------------------------------------------------------------- bad requests
GOOD = {"model": "s2-pro", "input": "Fine.", "voice": "alice", "max_new_tokens": 8}
AUDIO = base64.b64encode(wav_bytes(tone(44100, 0.3), 44100)).decode()
LONG_AUDIO = base64.b64encode(wav_bytes(tone(8000, 6.0), 8000)).decode()  # over the 5 s limit
JSON = {"Content-Type": "application/json"}  # raw bodies say what they are (else 415)
BAD = [
    # (id, method, path, how to send, expected status, param named)
    ("not json", "POST", "/v1/audio/speech", {"content": b"{nope", "headers": JSON}, 400,
     "body"),
    ("json array", "POST", "/v1/audio/speech", {"json": [1, 2]}, 400, "body"),
    ("missing input", "POST", "/v1/audio/speech", {"json": {"model": "s2-pro"}}, 400, "input"),
    ("input not str", "POST", "/v1/audio/speech", {"json": {**GOOD, "input": 5}}, 400, "input"),
    ("empty input", "POST", "/v1/audio/speech", {"json": {**GOOD, "input": "  "}}, 400, "input"),
    ("empty input, a cue", "POST", "/v1/audio/speech",
     {"json": {**GOOD, "input": " ", "instructions": "calm"}}, 400, "input"),
    ("fish text missing", "POST", "/v1/tts", {"json": {"format": "wav"}}, 400, "text"),
    ("fish text too long", "POST", "/v1/tts", {"json": {"text": "a" * 501}}, 400, "text"),
    ("input too long", "POST", "/v1/audio/speech", {"json": {**GOOD, "input": "a" * 501}}, 400,
     "input"),
    ("unknown voice", "POST", "/v1/audio/speech", {"json": {**GOOD, "voice": "nobody"}}, 404,
     "voice"),
    ("voice escapes", "POST", "/v1/audio/speech", {"json": {**GOOD, "voice": "../alice"}}, 400,
     "voice"),
    ("voice abs path", "POST", "/v1/audio/speech", {"json": {**GOOD, "voice": "/etc/passwd"}},
     400, "voice"),
    ("unknown model", "POST", "/v1/audio/speech", {"json": {**GOOD, "model": "gpt-9"}}, 404,
     "model"),
    ("aac", "POST", "/v1/audio/speech", {"json": {**GOOD, "response_format": "aac"}}, 400,
     "response_format"),
    ("speed", "POST", "/v1/audio/speech", {"json": {**GOOD, "speed": 3.0}}, 400, "speed"),
    ("loudness", "POST", "/v1/audio/speech", {"json": {**GOOD, "loudness": 3}}, 400, "loudness"),
    ("pause tag", "POST", "/v1/audio/speech", {"json": {**GOOD, "input": "Hi [pause:2]"}}, 400,
     "input"),
    ("speed type", "POST", "/v1/audio/speech", {"json": {**GOOD, "speed": "fast"}}, 400, "speed"),
    ("stream format", "POST", "/v1/audio/speech", {"json": {**GOOD, "stream_format": "ws"}},
     400, "stream_format"),
    ("stream flac", "POST", "/v1/audio/speech",
     {"json": {**GOOD, "stream_format": "audio", "response_format": "flac"}}, 400,
     "response_format"),
    ("temperature", "POST", "/v1/audio/speech", {"json": {**GOOD, "temperature": 0}}, 400,
     "temperature"),
    ("top_p", "POST", "/v1/audio/speech", {"json": {**GOOD, "top_p": 1.5}}, 400, "top_p"),
    ("top_k bool", "POST", "/v1/audio/speech", {"json": {**GOOD, "top_k": True}}, 400, "top_k"),
    ("seed negative", "POST", "/v1/audio/speech", {"json": {**GOOD, "seed": -1}}, 400, "seed"),
    ("seed float", "POST", "/v1/audio/speech", {"json": {**GOOD, "seed": 1.5}}, 400, "seed"),
    ("max_new_tokens cap", "POST", "/v1/audio/speech", {"json": {**GOOD, "max_new_tokens": 65}},
     400, "max_new_tokens"),
    ("unknown field", "POST", "/v1/audio/speech", {"json": {**GOOD, "sped": 1}}, 400, "sped"),
    ("instructions brackets", "POST", "/v1/audio/speech",
     {"json": {**GOOD, "instructions": "<|im_end|>"}}, 400, "instructions"),
    ("bad base64", "POST", "/v1/audio/speech",
     {"json": {**GOOD, "references": [{"audio": "@@@", "text": "x"}]}}, 400,
     "references[0].audio"),
    ("not audio", "POST", "/v1/audio/speech",
     {"json": {**GOOD, "references": [{"audio": base64.b64encode(b"hello").decode(),
                                       "text": "x"}]}}, 400, "references[0].audio"),
    ("reference too long", "POST", "/v1/audio/speech",
     {"json": {**GOOD, "references": [{"audio": LONG_AUDIO, "text": "x"}]}}, 400,
     "references[0].audio"),
    ("reference no text", "POST", "/v1/audio/speech",
     {"json": {**GOOD, "references": [{"audio": AUDIO}]}}, 400, "references[0].text"),
    ("too many references", "POST", "/v1/audio/speech",
     {"json": {**GOOD, "references": [{"audio": AUDIO, "text": "x"}] * 3}}, 400, "references"),
    ("huge body", "POST", "/v1/audio/speech",
     {"content": b"x" * (2 * 2**20 + 10), "headers": JSON}, 413, "body"),
    ("wrong content type", "POST", "/v1/audio/speech",
     {"content": b"input=hi", "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
     415, "content-type"),
    ("fish unknown reference", "POST", "/v1/tts", {"json": {"text": "x", "reference_id": "zed"}},
     404, "reference_id"),
    ("fish streaming mp3", "POST", "/v1/tts",
     {"json": {"text": "x", "streaming": True, "format": "mp3"}}, 400, "format"),
    ("fish chunk_length", "POST", "/v1/tts", {"json": {"text": "x", "chunk_length": 5}}, 400,
     "chunk_length"),
    ("fish streaming type", "POST", "/v1/tts", {"json": {"text": "x", "streaming": "yes"}}, 400,
     "streaming"),
    ("voice add no audio", "POST", "/v1/audio/voices",
     {"data": {"name": "x", "text": "y"}, "files": {"notes": ("n.txt", b"hi")}}, 400, "audio"),
    ("voice add bad name", "POST", "/v1/audio/voices",
     {"data": {"name": "../../x", "text": "y"}, "files": {"audio": ("a.wav", b"RIFF")}}, 400,
     "name"),
    ("voice delete unknown", "DELETE", "/v1/audio/voices/nobody", {}, 404, "name"),
    ("voice delete escape", "DELETE", "/v1/audio/voices/..%2F..%2Fetc", {}, 400, "name"),
    ("fish rename missing", "POST", "/v1/references/update", {"json": {"old_reference_id": "a"}},
     400, "new_reference_id"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_request_matrix(server, case):
    _, method, path, send, status, param = case
    response = http(server, method, path, **send)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and param in error["message"]
    assert "Traceback" not in response.text
    assert http(server, "GET", "/v1/health", key=None).status_code == 200  # still serving


@pytest.mark.parametrize("key", [None, "wrong-key", KEY + "x"])
def test_auth_is_required(server, key):
    for method, path in (("POST", "/v1/audio/speech"), ("GET", "/v1/models"),
                         ("GET", "/v1/audio/voices"), ("POST", "/v1/tts")):
        response = http(server, method, path, key=key, json=GOOD)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"


# ---------------------------------------------------------------- concurrency
def test_disconnect_cancels_generation(server, synth, monkeypatch):
    """A client that leaves mid-stream stops its generation within a frame or so."""
    frames, left = [], threading.Event()
    join, feed = RowBatch.join_many, SpeechJob.feed

    def endless(batch, *args, **kwargs):  # rows that never stop by themselves
        return join(batch, *args, stop_on_eos=False, **kwargs)

    def slow(job, column, eos):  # ~50 ms frames
        frames.append(left.is_set())
        time.sleep(0.05)
        feed(job, column, eos)

    monkeypatch.setattr(RowBatch, "join_many", endless)
    monkeypatch.setattr(SpeechJob, "feed", slow)
    body = {"text": "Leave early.", "streaming": True, "format": "pcm", "seed": 3,
            "max_new_tokens": 64}
    with httpx.stream("POST", server.url + "/v1/tts", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {KEY}"}) as response:
        assert response.status_code == 200
        next(response.iter_raw())
    left.set()
    for _ in range(400):  # until the round is over (at most 20 s)
        if not server.service.scheduler.busy:
            break
        time.sleep(0.05)
    assert not server.service.scheduler.busy
    assert len(frames) < 64 and sum(frames) <= 4
    assert http(server, "GET", "/v1/health", key=None).status_code == 200


def test_timeout_gives_504(synth, voices_dir):
    service = Service.standalone(lambda: synth, voices=[voices_dir],
                                 limits=Limits(timeout_seconds=0.0))
    with BackgroundServer(service) as running:
        response = httpx.post(running.url + "/v1/tts", json={"text": "Too slow."}, timeout=60)
    service.close()
    assert response.status_code == 504 and "timed out" in response.json()["error"]["message"]


def test_requests_arriving_together_are_batched(synth, voices_dir):
    service = Service.standalone(lambda: synth, voices=[voices_dir], max_batch=4)
    service.scheduler.batch_wait = 0.5
    bodies = [{"text": f"Request number {i}.", "reference_id": "alice", "format": "pcm",
               "seed": 20 + i, "max_new_tokens": 24} for i in range(3)]
    results = [None] * len(bodies)
    with BackgroundServer(service) as running:
        def post(i):
            results[i] = httpx.post(running.url + "/v1/tts", json=bodies[i], timeout=120)

        threads = [threading.Thread(target=post, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        alone = [httpx.post(running.url + "/v1/tts", json=b, timeout=120) for b in bodies]
    service.close()
    assert max(service.scheduler.batch_sizes) > 1
    for together, single in zip(results, alone):
        assert together.status_code == single.status_code == 200
        assert together.content == single.content


def test_speed_without_pedalboard_is_a_422_naming_speed(server, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pedalboard", None)  # "import pedalboard" now fails
    response = http(server, "POST", "/v1/audio/speech",
                    json={"model": "s2-pro", "input": "Faster.", "speed": 1.5})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["param"] == "speed"
    assert error["message"].startswith("speed: a speaking rate other than 1 needs pedalboard")
    assert "pip install pedalboard" in error["message"]
    assert http(server, "GET", "/v1/health", key=None).status_code == 200
