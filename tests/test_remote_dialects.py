"""The remote client against small stand-in servers that answer as each engine documents
(SGLang-Omni SSE chunks of base64 WAV, vLLM-Omni whole WAV with ``ref_audio`` data URLs,
fish-speech streaming WAV on ``/v1/tts``) and fail as they fail: the client parses each,
detects the dialect, retries 5xx, fails over to a live endpoint, times out, cancels, and
rejects audio it cannot use. Loopback only; every wait is bounded."""

import asyncio
import base64
import io
import json
import socket
import struct
import threading

import numpy as np
import pytest
import soundfile as sf
import torch

web = pytest.importorskip("aiohttp.web")

from fish_core.params import Cancelled  # noqa: E402
from fish_core.remote import RemoteError, RemoteSynthesizer, RemoteUserError  # noqa: E402
from fish_core.remote.wire import AudioFormatError  # noqa: E402

FAST = dict(max_new_tokens=8, seed=1)


class StandIn:
    """An aiohttp app on a background loop, on a free loopback port."""

    def __init__(self, app):
        self.app, self.loop = app, asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.requests: list[dict] = []
        app["seen"] = self.requests

    def __enter__(self):
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=30)
        return self

    async def _start(self):
        self.runner = web.AppRunner(self.app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)


def tone(rate: int, samples: int, hz: float = 300.0) -> np.ndarray:
    return (0.25 * np.sin(2 * np.pi * hz * np.arange(samples) / rate)).astype(np.float32)


def wav(x: np.ndarray, rate: int, subtype: str = "PCM_16") -> bytes:
    out = io.BytesIO()
    sf.write(out, x, rate, format="WAV", subtype=subtype)
    return out.getvalue()


def streaming_header(rate: int, channels: int = 1) -> bytes:
    """A WAV header of unknown length, as streaming servers send it."""
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE" + b"fmt "
            + struct.pack("<IHHIIHH", 16, 1, channels, rate, 2 * rate * channels, 2 * channels, 16)
            + b"data" + struct.pack("<I", 0xFFFFFFFF))


def pcm(x: np.ndarray) -> bytes:
    return (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


def pcm_read(x: np.ndarray) -> np.ndarray:
    return np.frombuffer(pcm(x), "<i2").astype(np.float32) / 32768.0


def models(owner):
    async def handler(request):
        return web.json_response({"object": "list",
                                  "data": [{"id": "s2-pro", "object": "model", "owned_by": owner}]})
    return handler


# ---------------------------------------------------------------- the stand-ins
def sglang_app(rate: int, pieces: list[np.ndarray], fail_first: int = 0) -> web.Application:
    app = web.Application()
    app["fails"] = fail_first

    async def speech(request):
        body = await request.json()
        request.app["seen"].append(body)
        if request.app["fails"] > 0:
            request.app["fails"] -= 1
            return web.json_response({"error": {"message": "engine overloaded"}}, status=503)
        if not body.get("input"):
            return web.json_response({"error": {"message": "input: field required",
                                                "type": "invalid_request_error"}}, status=400)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for piece in pieces:
            event = {"object": "audio.speech.chunk",
                     "audio": {"data": base64.b64encode(wav(piece, rate)).decode()}}
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    app.router.add_post("/v1/audio/speech", speech)
    app.router.add_get("/v1/models", models("sglang-omni"))
    return app


def vllm_app(rate: int, audio: bytes) -> web.Application:
    app = web.Application()

    async def speech(request):
        body = await request.json()
        request.app["seen"].append(body)
        return web.Response(body=audio, content_type="audio/wav")

    app.router.add_post("/v1/audio/speech", speech)
    app.router.add_get("/v1/models", models("vllm-omni"))
    return app


def fish_app(rate: int, segments: list[np.ndarray], channels: int = 1,
             endless: bool = False) -> web.Application:
    app = web.Application()
    app["gone"] = threading.Event()

    async def tts(request):
        body = await request.json()
        request.app["seen"].append(body)
        if body.get("reference_id") == "missing":
            return web.json_response({"message": "reference missing not found"}, status=404)
        response = web.StreamResponse(headers={"Content-Type": "audio/wav"})
        await response.prepare(request)
        await response.write(streaming_header(rate, channels))
        try:
            for segment in segments:
                data = pcm(np.repeat(segment, channels))
                await response.write(data[:3])  # odd splits: a sample across two reads
                await response.write(data[3:])
            for _ in range(200 if endless else 0):  # keep talking until the client leaves
                await asyncio.sleep(0.05)
                await response.write(pcm(segments[0][:64]))
        except (Exception, asyncio.CancelledError):  # the client went away
            request.app["gone"].set()
            raise
        await response.write_eof()
        return response

    async def health(request):
        return web.json_response({"status": "ok"})

    app.router.add_post("/v1/tts", tts)
    app.router.add_get("/v1/health", health)
    return app


def free_port() -> str:
    """A loopback URL where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


# ---------------------------------------------------------------- parsing each dialect
def test_sglang_sse_chunks_detected_and_joined(sizes):
    rate = sizes.sample_rate
    pieces = [tone(rate, 1000), tone(rate, 777, 500.0), tone(rate, 1500, 200.0)]
    with StandIn(sglang_app(rate, pieces)) as server:
        synth = RemoteSynthesizer(server.url, sample_rate=rate)
        assert synth.dialect.name == "sglang-omni"
        ref = synth.encode_voice(torch.from_numpy(tone(rate, rate // 2)), "Ref words.",
                                 sample_rate=rate)
        speech = synth.tts("Hello.", ref, **FAST)
    expected = np.concatenate([sf.read(io.BytesIO(wav(p, rate)), dtype="float32")[0]
                               for p in pieces])
    np.testing.assert_array_equal(speech.waveform.numpy(), expected)
    body = server.requests[0]
    assert body["stream"] is True and body["seed"] == 1 and body["max_new_tokens"] == 8
    sent, _ = sf.read(io.BytesIO(base64.b64decode(body["references"][0]["audio"])),
                      dtype="float32")
    assert body["references"][0]["text"] == "Ref words." and sent.shape[0] == rate // 2


def test_vllm_whole_wav_with_ref_audio_data_url(sizes):
    rate = sizes.sample_rate
    audio = tone(rate, 3000)
    with StandIn(vllm_app(rate, wav(audio, rate, "FLOAT"))) as server:
        synth = RemoteSynthesizer(server.url, sample_rate=rate)
        assert synth.dialect.name == "vllm-omni"
        ref = synth.encode_voice(torch.from_numpy(tone(rate, rate // 2)), "Ref.",
                                 sample_rate=rate)
        speech = synth.tts("Hi.", ref, **FAST)
    np.testing.assert_array_equal(speech.waveform.numpy(), audio)
    body = server.requests[0]
    assert body["ref_audio"].startswith("data:audio/wav;base64,") and body["ref_text"] == "Ref."
    assert "seed" not in body  # not part of this dialect: said in the docs, not sent blindly


def test_fish_streaming_wav_stereo_downmixed_and_detected(sizes):
    rate = sizes.sample_rate
    segments = [tone(rate, 2001), tone(rate, 999, 450.0)]
    with StandIn(fish_app(rate, segments, channels=2)) as server:
        synth = RemoteSynthesizer(server.url, sample_rate=rate)
        assert synth.dialect.name == "fish-speech"
        speech = synth.tts("Hi there.", **FAST)
    expected = np.concatenate([pcm_read(s) for s in segments])
    np.testing.assert_array_equal(speech.waveform.numpy(), expected)
    body = server.requests[0]
    assert body["streaming"] is True and body["format"] == "wav" and body["text"] == "Hi there."


def test_fish_stream_progress_per_chunk(sizes):
    rate = sizes.sample_rate
    segments = [tone(rate, 2048 * 2), tone(rate, 2048 * 3)]
    seen = []
    with StandIn(fish_app(rate, segments)) as server:
        RemoteSynthesizer(server.url, "fish-speech", sample_rate=rate).tts(
            "Count.", on_progress=lambda d, t: seen.append(d), **FAST)
    assert len(seen) >= 3 and seen == sorted(seen) and seen[-1] == FAST["max_new_tokens"]


# ---------------------------------------------------------------- failures
def test_5xx_is_retried_with_backoff(sizes):
    rate = sizes.sample_rate
    with StandIn(sglang_app(rate, [tone(rate, 500)], fail_first=2)) as server:
        synth = RemoteSynthesizer(server.url, "sglang-omni", sample_rate=rate, retries=2,
                                  backoff=0.01)
        assert synth.tts("Retry me.", **FAST).waveform.shape[0] == 500
        assert len(server.requests) == 3
    with StandIn(sglang_app(rate, [tone(rate, 500)], fail_first=5)) as server:
        synth = RemoteSynthesizer(server.url, "sglang-omni", sample_rate=rate, retries=1,
                                  backoff=0.01)
        with pytest.raises(RemoteError, match="HTTP 503: engine overloaded"):
            synth.tts("Retry me.", **FAST)
        assert len(server.requests) == 2  # bounded


def test_fail_over_and_spread_across_endpoints(sizes):
    rate = sizes.sample_rate
    with StandIn(sglang_app(rate, [tone(rate, 400)])) as a, \
            StandIn(sglang_app(rate, [tone(rate, 400)])) as b:
        synth = RemoteSynthesizer([free_port(), a.url, b.url], "sglang-omni", sample_rate=rate,
                                  retries=0, backoff=0.01, connect_timeout=2)
        for _ in range(6):
            assert synth.tts("Spread.", **FAST).waveform.shape[0] == 400
        assert len(a.requests) >= 2 and len(b.requests) >= 2  # both replicas serve


def test_every_endpoint_down_names_them(sizes):
    dead = [free_port(), free_port()]
    with pytest.raises(RemoteError) as error:
        RemoteSynthesizer(dead, "fish-speech", sample_rate=sizes.sample_rate, retries=1,
                          backoff=0.01, connect_timeout=2).tts("Anyone?", **FAST)
    assert all(url in str(error.value) for url in dead)


def test_4xx_names_endpoint_and_server_message(sizes):
    rate = sizes.sample_rate
    with StandIn(fish_app(rate, [tone(rate, 100)])) as server:
        synth = RemoteSynthesizer(server.url, "fish-speech", sample_rate=rate)
        from fish_core.speech.voices import Voice

        with pytest.raises(RemoteUserError, match=rf"{server.url}/v1/tts: HTTP 404: reference "
                                                  "missing not found"):
            synth.dialect.voice_names = lambda transport: ["missing"]
            synth.tts("Hi.", Voice("missing"), **FAST)
        assert len(server.requests) == 1  # a 4xx is not retried


def test_read_timeout(sizes):
    rate = sizes.sample_rate
    app = web.Application()

    async def slow(request):
        await asyncio.sleep(1.5)
        return web.Response(body=b"")

    app.router.add_post("/v1/tts", slow)
    with StandIn(app) as server:
        synth = RemoteSynthesizer(server.url, "fish-speech", sample_rate=rate, retries=0,
                                  read_timeout=0.3)
        with pytest.raises(RemoteError, match="timed out"):
            synth.tts("Slow.", **FAST)


def test_cancel_closes_the_connection(sizes):
    rate = sizes.sample_rate
    app = fish_app(rate, [tone(rate, 2048)] * 4, endless=True)
    with StandIn(app) as server:
        synth = RemoteSynthesizer(server.url, "fish-speech", sample_rate=rate)
        chunks = []

        def cancel():
            return len(chunks) >= 2

        with pytest.raises(Cancelled):
            synth.tts("Stop me.", on_progress=lambda d, t: chunks.append(d), cancel=cancel,
                      **FAST)
        assert app["gone"].wait(10)  # the server saw the client leave


def test_bad_audio_is_rejected_before_callers(sizes):
    rate = sizes.sample_rate
    with StandIn(vllm_app(rate, wav(tone(rate * 2, 100), rate * 2))) as server:
        with pytest.raises(AudioFormatError, match=f"{rate * 2} Hz"):
            RemoteSynthesizer(server.url, "vllm-omni", sample_rate=rate).tts("x", **FAST)
    with StandIn(vllm_app(rate, wav(np.zeros(0, np.float32), rate))) as server:
        with pytest.raises(AudioFormatError, match="no audio"):
            RemoteSynthesizer(server.url, "vllm-omni", sample_rate=rate).tts("x", **FAST)
    with StandIn(vllm_app(rate, b'{"not": "audio"}')) as server:
        with pytest.raises(AudioFormatError, match="not WAV"):
            RemoteSynthesizer(server.url, "vllm-omni", sample_rate=rate).tts("x", **FAST)
    three = np.zeros((10, 3), np.float32)
    with StandIn(vllm_app(rate, wav(three, rate))) as server:
        with pytest.raises(AudioFormatError, match="3 channels"):
            RemoteSynthesizer(server.url, "vllm-omni", sample_rate=rate).tts("x", **FAST)


def test_bad_options_name_the_field(sizes):
    with pytest.raises(ValueError, match="dialect must be"):
        RemoteSynthesizer("http://127.0.0.1:1", "grpc")
    with pytest.raises(ValueError, match="remote url"):
        RemoteSynthesizer("ftp://x", "sailfish")
    with pytest.raises(ValueError, match="no credentials"):
        RemoteSynthesizer("http://user:secret@127.0.0.1:1", "sailfish")
    with pytest.raises(ValueError, match="retries"):
        RemoteSynthesizer("http://127.0.0.1:1", "sailfish", retries=-1)


def test_stream_yields_chunks_as_they_arrive_and_is_not_replayed(sizes):
    rate = sizes.sample_rate
    segments = [tone(rate, 2048), tone(rate, 1024, 500.0)]
    with StandIn(fish_app(rate, segments)) as server:
        synth = RemoteSynthesizer(server.url, "fish-speech", sample_rate=rate)
        with synth.stream("Streamed.", **FAST) as stream:
            chunks = list(stream)
        assert stream.seed == FAST["seed"] and len(chunks) >= 2
        expected = np.concatenate([pcm_read(s) for s in segments])
        np.testing.assert_array_equal(torch.cat(chunks).numpy(), expected)
    app = web.Application()

    async def breaks(request):  # half a stream, then the connection drops
        response = web.StreamResponse(headers={"Content-Type": "audio/wav"})
        await response.prepare(request)
        await response.write(streaming_header(rate) + pcm(tone(rate, 4096)))
        request.transport.close()
        return response

    app.router.add_post("/v1/tts", breaks)
    with StandIn(app) as server:
        synth = RemoteSynthesizer(server.url, "fish-speech", sample_rate=rate, backoff=0.01)
        with pytest.raises(RemoteError, match="not repeated"):
            list(synth.stream("Broken.", **FAST))
