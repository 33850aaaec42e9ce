"""Under load every answer is the answer alone: clients at once mixing whole answers, audio
streams, SSE, WebSocket sessions, clients that leave mid-stream and bad requests, on the tiny
checkpoint with continuous batching; then each request served again on its own. Every answer
given under load is complete and bit-identical to the one given alone, and the server keeps
serving (a short soak; the scheduler's own batching tests cover the rows)."""

import asyncio
import base64
import json
import threading

import pytest

aiohttp = pytest.importorskip("aiohttp")
try:  # the HTTP client the openai SDK depends on (httpx2 in newer releases)
    import httpx2 as httpx
except ImportError:
    httpx = pytest.importorskip("httpx")

from conftest import served  # noqa: E402

CLIENTS, ROUNDS = 6, 3
KINDS = ("whole", "audio", "sse", "socket", "leaver", "bad")


def body(client: int, round_: int) -> dict:
    return {"model": "s2-pro", "input": f"Client {client} speaks in round {round_}.",
            "voice": "alice", "seed": 100 * client + round_, "max_new_tokens": 16,
            "temperature": 0.8, "top_p": 0.8, "top_k": 30, "response_format": "pcm"}


def ask(url: str, kind: str, request: dict):
    """One request of ``kind``; what came back (bytes of PCM, or a status)."""
    if kind == "whole":
        r = httpx.post(url + "/v1/audio/speech", json=request, timeout=120)
        assert r.status_code == 200, r.text
        return r.content
    if kind == "bad":
        r = httpx.post(url + "/v1/audio/speech", json={**request, "seed": "x"}, timeout=120)
        assert r.status_code == 400 and r.json()["error"]["param"] == "seed", r.text
        return r.status_code
    if kind in ("audio", "sse", "leaver"):
        stream = "sse" if kind == "sse" else "audio"
        data = b""
        with httpx.stream("POST", url + "/v1/audio/speech", timeout=120,
                          json={**request, "stream_format": stream}) as r:
            assert r.status_code == 200
            for piece in r.iter_bytes():
                data += piece
                if kind == "leaver":
                    return None  # gone after the first piece
        if kind == "audio":
            return data
        events = [json.loads(line[5:]) for line in data.decode().splitlines()
                  if line.startswith("data:")]
        assert events[-1]["type"] == "speech.audio.done", events[-1]
        return b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    return asyncio.run(socket_sentence(url, request))


async def socket_sentence(url: str, request: dict) -> bytes:
    """The request's text as one WebSocket session of one sentence (seed: the session's)."""
    pcm = b""
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url.replace("http", "ws") + "/v1/audio/speech/stream",
                                   protocols=("sailfish.speech.v1",)) as ws:
            config = {k: request[k] for k in ("voice", "seed", "max_new_tokens", "temperature",
                                              "top_p", "top_k")}
            await ws.send_str(json.dumps({"type": "session.config", **config}))
            await ws.send_str(json.dumps({"type": "input.text", "text": request["input"]}))
            await ws.send_str(json.dumps({"type": "input.done"}))
            while True:
                msg = await ws.receive(timeout=120)
                if msg.type == aiohttp.WSMsgType.BINARY:
                    pcm += msg.data
                    continue
                assert msg.type == aiohttp.WSMsgType.TEXT, msg
                message = json.loads(msg.data)
                assert message["type"] != "error", message
                if message["type"] == "session.done":
                    return pcm


def test_every_answer_under_load_is_the_answer_alone(tiny_synth, voices_dir):
    plan = [(c, r, KINDS[(c + r) % len(KINDS)]) for c in range(CLIENTS) for r in range(ROUNDS)]
    got, failures = {}, []
    with served(tiny_synth, voices_dir, max_batch=4) as server:
        def client(c: int) -> None:
            try:
                for c_, r, kind in plan:
                    if c_ == c:
                        got[(c, r)] = ask(server.url, kind, body(c, r))
            except Exception as e:  # noqa: BLE001 - reported below
                failures.append((c, repr(e)))

        threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not failures, failures
        assert max(server.service.scheduler.batch_sizes) > 1  # they did share the model
        for c, r, kind in plan:  # the same requests again, one at a time
            if kind in ("leaver", "bad"):
                continue
            alone = ask(server.url, kind, body(c, r))
            assert got[(c, r)] and got[(c, r)] == alone, (c, r, kind)
        assert ask(server.url, "whole", body(0, 0))  # still serving
