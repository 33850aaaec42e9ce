"""Word timing over HTTP, with real clients over loopback against the tiny checkpoints (S2 and
the tiny aligner): Fish's ``POST /v1/tts/stream/with-timestamp`` server-sent events (aiohttp and
curl), the alignment events of OpenAI's SSE route (``word_timestamps``), and ``word_timestamps``
on the WebSocket session (each sentence's words once its audio is out)."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess

import pytest

aiohttp = pytest.importorskip("aiohttp")

from conftest import served  # noqa: E402
from fish_core.local.synthesizer import Synthesizer  # noqa: E402
from fish_core.serve.limits import Limits  # noqa: E402

FAST = dict(max_new_tokens=6, temperature=0.8, top_p=0.8, top_k=30, seed=3)
LIMITS = Limits(max_new_tokens=64, timeout_seconds=120.0, stream_idle_seconds=30.0)
TEXT = "Hello there friend. [pause:300ms] Goodbye now."
WAIT = 120


@pytest.fixture(scope="module")
def synth(ckpt_dir, aligner_fixtures):
    return Synthesizer.from_pretrained(ckpt_dir, device="cpu", dtype="fp32",
                                       aligner=aligner_fixtures / "tiny-aligner")


@pytest.fixture(scope="module")
def server(synth, voices_dir):
    with served(synth, voices_dir, limits=LIMITS) as running:
        yield running


def events_of(body: str) -> list[dict]:
    return [json.loads(line[len("data: "):]) for line in body.splitlines()
            if line.startswith("data: ")]


async def post(server, path: str, payload: dict) -> tuple[int, str, bytes]:
    async with aiohttp.ClientSession() as session:
        async with session.post(server.url + path, json=payload) as response:
            return response.status, response.content_type, await response.read()


def check_pieces(pieces: list[dict], whole_pcm: bytes, rate: int) -> None:
    """Pieces in order, each its offset on the whole, its words within it; the audio
    concatenates to the whole answer's."""
    offset = 0.0
    for seq, piece in enumerate(pieces):
        assert piece["chunk_seq"] == seq
        assert piece["chunk_audio_offset_sec"] == pytest.approx(offset, abs=2e-3)
        duration = piece["alignment"]["audio_duration"]
        for word in piece["alignment"]["segments"]:
            assert -1e-3 <= word["start"] <= word["end"] <= duration + 1e-3
        offset += duration
    assert offset == pytest.approx(len(whole_pcm) / 2 / rate, abs=5e-3)


def test_fish_with_timestamp_events(server):
    body = {"text": TEXT, "format": "pcm", **FAST}
    status, kind, data = asyncio.run(post(server, "/v1/tts/stream/with-timestamp", body))
    assert status == 200 and kind == "text/event-stream", data[:300]
    events = events_of(data.decode())
    assert [e["content"] for e in events] == ["Hello there friend.", "Goodbye now."]
    words = [w["text"] for e in events for w in e["alignment"]["segments"]]
    assert words == ["Hello", "there", "friend", "Goodbye", "now"]
    audio = b"".join(base64.b64decode(e["audio_base64"]) for e in events)
    status, _, whole = asyncio.run(post(server, "/v1/tts", body))
    assert status == 200 and audio == whole  # the same audio as the whole answer, in pieces
    check_pieces(events, whole, rate_of(server))
    # the pause sits between the pieces: the second starts after the silence
    assert events[1]["chunk_audio_offset_sec"] >= 0.3


def rate_of(server) -> int:
    with server.service.scheduler.model() as synth:
        return synth.sample_rate


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_fish_with_timestamp_with_curl(server):
    proc = subprocess.run(["curl", "-sS", "-N", "-X", "POST", server.url +
                           "/v1/tts/stream/with-timestamp", "-H", "Content-Type: application/json",
                           "-d", json.dumps({"text": "One two three.", "format": "wav", **FAST})],
                          capture_output=True, text=True, timeout=WAIT)
    assert proc.returncode == 0, proc.stderr
    (event,) = events_of(proc.stdout)
    assert [w["text"] for w in event["alignment"]["segments"]] == ["One", "two", "three"]
    assert base64.b64decode(event["audio_base64"])[:4] == b"RIFF"


def test_openai_sse_carries_the_alignment(server):
    body = {"input": TEXT, "response_format": "pcm", "stream_format": "sse",
            "word_timestamps": True, **FAST}
    status, kind, data = asyncio.run(post(server, "/v1/audio/speech", body))
    assert status == 200 and kind == "text/event-stream", data[:300]
    events = events_of(data.decode())
    kinds = [e["type"] for e in events]
    assert kinds == ["speech.audio.delta", "speech.audio.alignment"] * 2 + ["speech.audio.done"]
    aligned = [e for e in events if e["type"] == "speech.audio.alignment"]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events
                   if e["type"] == "speech.audio.delta")
    check_pieces(aligned, pcm, rate_of(server))
    assert [w["text"] for e in aligned for w in e["alignment"]["segments"]][-1] == "now"


def test_word_timestamps_need_sse_and_a_bool(server):
    for extra, said in (({"word_timestamps": True}, "stream_format"),
                        ({"word_timestamps": "yes", "stream_format": "sse"}, "true or false")):
        status, _, data = asyncio.run(post(server, "/v1/audio/speech",
                                           {"input": "Hi.", "response_format": "pcm",
                                            **extra, **FAST}))
        error = json.loads(data)["error"]
        assert status == 400 and error["param"] == "word_timestamps" and said in error["message"]


def test_websocket_sends_each_sentences_words_after_its_audio(server):
    async def session():
        url = server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
        async with aiohttp.ClientSession() as client, client.ws_connect(url) as ws:
            await ws.send_json({"type": "session.config", "word_timestamps": True, **FAST})
            configured = await ws.receive_json(timeout=WAIT)
            assert configured["word_timestamps"] is True
            await ws.send_json({"type": "input.text", "text": "One two three. Four five."})
            await ws.send_json({"type": "input.done"})
            seen = []
            while True:
                msg = await ws.receive(timeout=WAIT)
                if msg.type == aiohttp.WSMsgType.BINARY:
                    seen.append(("audio", len(msg.data)))
                    continue
                data = json.loads(msg.data)
                seen.append((data["type"], data))
                if data["type"] == "session.done":
                    return seen

    seen = asyncio.run(asyncio.wait_for(session(), 4 * WAIT))
    kinds = [k for k, _ in seen if k != "audio"]
    assert kinds == ["audio.start", "audio.done", "word_timestamps"] * 2 + ["session.done"]
    rate = rate_of(server)
    timed = [v for k, v in seen if k == "word_timestamps"]
    done = [v for k, v in seen if k == "audio.done"]
    assert [[w["word"] for w in t["words"]] for t in timed] == [["One", "two", "three"],
                                                                ["Four", "five"]]
    assert timed[0]["audio_offset"] == 0 and timed[1]["audio_offset"] == pytest.approx(
        done[0]["samples"] / rate, abs=1e-3)
    for t, d in zip(timed, done):
        assert all(0 <= w["start"] <= w["end"] <= d["samples"] / rate + 1e-3 for w in t["words"])
        assert t["sentence_index"] == d["sentence_index"]
