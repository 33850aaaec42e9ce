"""A stopping server ends its requests: a real ``sailfish serve`` process on the tiny checkpoint,
with streams (audio and SSE), a queued whole answer and WebSocket sessions (one speaking, one
waiting for text) in flight, gets SIGTERM: every client is told within a few seconds (503 when
nothing was sent, a cut stream or an SSE error when something was, a WebSocket error and the
close), and the process exits soon after (``--shutdown-timeout``)."""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

aiohttp = pytest.importorskip("aiohttp")
try:  # the HTTP client the openai SDK depends on (httpx2 in newer releases)
    import httpx2 as httpx
except ImportError:
    httpx = pytest.importorskip("httpx")

ROOT = Path(__file__).resolve().parents[1]
TEXT = " ".join(f"Sentence number {i} is spoken here slowly." for i in range(40))
TOLD_WITHIN = 6.0  # seconds from SIGTERM to every client's end (--shutdown-timeout 1)
EXITS_WITHIN = 15.0  # seconds from SIGTERM to the process's exit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client(threading.Thread):
    """One client on its own thread; ``started`` once its first byte (or message) came."""

    def __init__(self, run):
        super().__init__(daemon=True)
        self.run_client, self.started = run, threading.Event()
        self.outcome, self.ended = None, None

    def run(self):
        try:
            self.outcome = self.run_client(self)
        except Exception as e:  # noqa: BLE001 - what the client saw is the result
            self.outcome = ("raised", type(e).__name__, str(e))
        finally:
            self.ended = time.monotonic()
            self.started.set()


def stream(url: str, body: dict):
    def run(client):
        data = b""
        try:
            with httpx.stream("POST", url + "/v1/audio/speech", json=body, timeout=60) as r:
                if r.status_code != 200:
                    r.read()
                    return ("status", r.status_code, r.text)
                for piece in r.iter_bytes():
                    data += piece
                    client.started.set()
        except httpx.RemoteProtocolError as e:
            return ("cut", data, str(e))
        return ("whole", data)
    return run


def whole(url: str, body: dict):
    def run(client):
        client.started.set()  # nothing comes before the whole answer
        r = httpx.post(url + "/v1/audio/speech", json=body, timeout=60)
        return ("status", r.status_code, r.text)
    return run


def socket_session(url: str, text: str | None):
    async def session(client):
        messages = []
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(url.replace("http", "ws") + "/v1/audio/speech/stream",
                                       protocols=("sailfish.speech.v1",)) as ws:
                await ws.send_str(json.dumps({"type": "session.config", "seed": 3,
                                              "max_new_tokens": 64}))
                if text is not None:
                    await ws.send_str(json.dumps({"type": "input.text", "text": text}))
                while True:
                    msg = await ws.receive(timeout=60)
                    if msg.type == aiohttp.WSMsgType.TEXT:
                        messages.append(json.loads(msg.data))
                        if text is None or messages[-1]["type"] == "audio.start":
                            client.started.set()
                    elif msg.type != aiohttp.WSMsgType.BINARY:
                        return ("closed", ws.close_code, messages)
    return lambda client: asyncio.run(session(client))


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_ends_every_request_within_seconds(ckpt_dir, tmp_path, stop):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    server = subprocess.Popen(
        [sys.executable, "-m", "fish_core", "serve", "--model", str(ckpt_dir), "--port",
         str(port), "--device", "cpu", "--precision", "fp32", "--max-batch", "2",
         "--voices", str(tmp_path / "voices"), "--shutdown-timeout", "1", "--threads", "1"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
            time.sleep(0.2)
        body = {"model": "s2-pro", "input": TEXT, "seed": 1, "max_new_tokens": 64,
                "response_format": "pcm"}
        clients = {"audio": Client(stream(url, {**body, "stream_format": "audio"})),
                   "sse": Client(stream(url, {**body, "stream_format": "sse"})),
                   "speaking": Client(socket_session(url, TEXT)),
                   "waiting": Client(socket_session(url, None))}
        for client in clients.values():
            client.start()
        for name, client in clients.items():
            assert client.started.wait(120), name
        clients["queued"] = Client(whole(url, body))  # behind the two rows in use
        clients["queued"].start()
        time.sleep(0.5)
        assert all(c.ended is None for c in clients.values()), {
            n: c.outcome for n, c in clients.items()}
        server.send_signal(stop)
        signalled = time.monotonic()
        for client in clients.values():
            client.join(TOLD_WITHIN + 5)
        took = {name: round(c.ended - signalled, 2) if c.ended else None
                for name, c in clients.items()}
        assert all(t is not None and t < TOLD_WITHIN for t in took.values()), took
        server.wait(EXITS_WITHIN)
        exited = time.monotonic() - signalled
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    out = {name: c.outcome for name, c in clients.items()}
    assert out["audio"][0] == "cut" and out["audio"][1], out["audio"]
    kind, data, _ = out["sse"]
    assert kind == "cut" and b'"type": "error"' in data and b"shutting down" in data, data[-300:]
    assert out["queued"][:2] == ("status", 503) and "shutting down" in out["queued"][2]
    for name in ("speaking", "waiting"):
        kind, code, messages = out[name]
        assert kind == "closed" and code == 1001, out[name]
        assert messages[-1]["type"] == "error"
        assert "shutting down" in messages[-1]["error"]["message"]
    assert exited < EXITS_WITHIN and server.returncode == 0, server.stderr.read()
    assert "server stopped" in server.stdout.read()
