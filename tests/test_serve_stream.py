"""``WS /v1/audio/speech/stream`` on the tiny checkpoint, with aiohttp's real WebSocket client
over loopback: text in pieces, audio per sentence before ``input.done``, the same PCM as the
HTTP route with the same seeds, and every refusal (key, Origin, Host, idle, size, bad
messages, a full queue) as an HTTP error before the upgrade or an error message then the
close; a client that leaves cancels its sentence."""

import asyncio
import base64
import contextlib
import json
import threading
import time

import pytest

aiohttp = pytest.importorskip("aiohttp")

from conftest import served  # noqa: E402
from fish_core.params import batch_seed  # noqa: E402
from fish_core.serve.background import BackgroundServer  # noqa: E402
from fish_core.serve.requests import Limits  # noqa: E402
from fish_core.serve.service import Service  # noqa: E402
from fish_core.serve.speech_stream import PROTOCOL, cut_sentences  # noqa: E402

KEY = "stream-key-456"
BEARER = {"Authorization": f"Bearer {KEY}"}
FAST = dict(max_new_tokens=24, temperature=0.8, top_p=0.8, top_k=30)
LIMITS = Limits(max_text_chars=200, max_new_tokens=64, timeout_seconds=120.0,
                stream_idle_seconds=30.0)
PATH = "/v1/audio/speech/stream"
WAIT = 120  # seconds a test waits for any one message before it fails


@pytest.fixture(scope="module")
def server(tiny_synth, voices_dir):
    with served(tiny_synth, voices_dir, api_key=KEY, limits=LIMITS) as running:
        yield running


def ws_url(server) -> str:
    return server.url.replace("http://", "ws://") + PATH


def config(seed: int = 5, **extra) -> dict:
    return {"type": "session.config", "voice": "alice", "seed": seed, **FAST, **extra}


async def next_message(ws) -> tuple[str, object]:
    """("json", dict), ("bytes", data) or ("closed", close code)."""
    msg = await ws.receive(timeout=WAIT)
    if msg.type == aiohttp.WSMsgType.TEXT:
        return "json", json.loads(msg.data)
    if msg.type == aiohttp.WSMsgType.BINARY:
        return "bytes", msg.data
    return "closed", ws.close_code


async def sentence(ws, index: int) -> tuple[dict, bytes]:
    """One sentence's audio.start, PCM frames and audio.done."""
    kind, start = await next_message(ws)
    assert kind == "json" and start["type"] == "audio.start", start
    assert start["sentence_index"] == index
    pcm = b""
    while True:
        kind, value = await next_message(ws)
        if kind == "bytes":
            pcm += value
            continue
        assert kind == "json" and value["type"] == "audio.done", value
        assert value["sentence_index"] == index and value["samples"] * 2 == len(pcm)
        return start, pcm


async def error_then_close(ws) -> dict:
    """The error message the server sends before it closes (audio before it skipped)."""
    while True:
        kind, value = await next_message(ws)
        assert kind != "closed", "closed without an error message"
        if kind == "json" and value["type"] == "error":
            assert set(value["error"]) == {"message", "type", "param", "code"}
            kind, code = await next_message(ws)
            assert kind == "closed" and code != 1000
            return value["error"]


async def http_pcm(server, text: str, seed: int) -> bytes:
    async with aiohttp.ClientSession() as session:
        async with session.post(server.url + "/v1/audio/speech", headers=BEARER, json={
                "input": text, "voice": "alice", "seed": seed, "response_format": "pcm",
                **FAST}) as response:
            assert response.status == 200, await response.text()
            return await response.read()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 4 * WAIT))


# ---------------------------------------------------------------- sentences
def test_sentences_are_cut_as_the_text_arrives():
    assert cut_sentences("Hello the") == ([], "Hello the")
    assert cut_sentences("Hello there.") == ([], "Hello there.")  # may still be "there.5"
    assert cut_sentences("Hello there. How") == (["Hello there."], " How")
    assert cut_sentences("It weighs 3.5 kg. Ok") == (["It weighs 3.5 kg."], " Ok")
    assert cut_sentences("你好。我") == (["你好。"], "我")
    assert cut_sentences("A line\n\nNext") == (["A line"], "\n\nNext")
    done, rest = cut_sentences("Fine\n\n")  # how input.done flushes the rest
    assert done == ["Fine"] and not rest.strip()


# ---------------------------------------------------------------- the session
def test_pieces_stream_per_sentence_and_match_the_http_route(server, tiny_synth):
    texts = ["Hello there, friend.", "How are you today?", "Fine"]

    async def session():
        async with aiohttp.ClientSession() as client, client.ws_connect(
                ws_url(server), headers=BEARER) as ws:
            await ws.send_json(config(seed=21))
            kind, configured = await next_message(ws)
            assert configured["type"] == "session.configured" and configured["seed"] == 21
            assert configured["format"] == "pcm" and configured["sample_width"] == 2
            for piece in ("Hello the", "re, friend", ". How are yo"):  # cut mid-word
                await ws.send_json({"type": "input.text", "text": piece})
            first = await sentence(ws, 0)  # before the next piece, before input.done
            await ws.send_json({"type": "input.text", "text": "u today? Fine"})
            second = await sentence(ws, 1)
            await ws.send_json({"type": "input.done"})
            third = await sentence(ws, 2)
            kind, done = await next_message(ws)
            assert done == {"type": "session.done", "total_sentences": 3}
            assert (await next_message(ws))[0] == "closed" and ws.close_code == 1000
            return [first, second, third]

    spoken = run(session())
    for i, (start, pcm) in enumerate(spoken):
        assert start["sentence_text"] == texts[i]
        assert start["seed"] == batch_seed(21, i)
        assert start["sample_rate"] == tiny_synth.sample_rate
        assert pcm and pcm == run(http_pcm(server, texts[i], batch_seed(21, i)))


def test_key_as_a_subprotocol_for_browsers(server):
    token = "base64url.bearer." + base64.urlsafe_b64encode(KEY.encode()).decode().rstrip("=")

    async def session():
        async with aiohttp.ClientSession() as client, client.ws_connect(
                ws_url(server), protocols=(PROTOCOL, token)) as ws:
            assert ws.protocol == PROTOCOL  # the key is never echoed
            await ws.send_json(config())
            assert (await next_message(ws))[1]["type"] == "session.configured"
            await ws.send_json({"type": "input.done"})  # nothing said: just the end
            assert (await next_message(ws))[1] == {"type": "session.done", "total_sentences": 0}

    run(session())


# ---------------------------------------------------------------- refusals before the upgrade
async def handshake_status(server, path: str = PATH, **kwargs) -> tuple[int, dict | None]:
    url = server.url.replace("http://", "ws://") + path
    async with aiohttp.ClientSession() as client:
        try:
            async with client.ws_connect(url, **kwargs):
                return 101, None
        except aiohttp.WSServerHandshakeError as e:
            return e.status, None


def test_key_host_and_origin_are_checked_before_the_upgrade(server):
    wrong = "base64url.bearer." + base64.urlsafe_b64encode(b"nope").decode()
    cases = [
        ({}, 401),  # no key
        ({"headers": {"Authorization": "Bearer wrong"}}, 401),
        ({"protocols": (PROTOCOL, wrong)}, 401),
        ({"protocols": (PROTOCOL, "base64url.bearer.!!")}, 401),
        ({"headers": {**BEARER, "Origin": "http://evil.example"}}, 403),  # CSWSH
        ({"headers": {**BEARER, "Sec-Fetch-Site": "cross-site"}}, 403),
        ({"headers": {**BEARER, "Host": "rebind.evil.example"}}, 403),  # DNS rebinding
        ({"headers": {**BEARER, "Origin": server.url}}, 101),  # a page the server serves
    ]
    for kwargs, expected in cases:
        assert run(handshake_status(server, **kwargs))[0] == expected, kwargs
    query = f"{PATH}?api_key={KEY}&token={KEY}&key={KEY}"  # URLs land in logs: never read
    assert run(handshake_status(server, query))[0] == 401


def test_plain_http_get_is_told_to_upgrade(server):
    async def get():
        async with aiohttp.ClientSession() as client:
            async with client.get(server.url + PATH, headers=BEARER) as response:
                return response.status, await response.json()

    status, body = run(get())
    assert status == 426 and body["error"]["code"] == "upgrade_required"


# ---------------------------------------------------------------- errors in the session
async def session_error(server, messages: list, raw: bool = False) -> dict:
    async with aiohttp.ClientSession() as client, client.ws_connect(
            ws_url(server), headers=BEARER) as ws:
        for message in messages:
            if isinstance(message, bytes):
                await ws.send_bytes(message)
            elif isinstance(message, str):
                await ws.send_str(message)
            else:
                await ws.send_json(message)
        return await error_then_close(ws)


def test_bad_messages_get_an_error_then_the_close(server):
    over = "a" * (LIMITS.max_text_chars + 1)
    cases = [
        (["{not json"], "message", None),
        (['["a list"]'], "message", None),
        ([{"text": "no type"}], "type", None),
        ([{"type": "response.create"}], "type", "unknown_message_type"),
        ([{"type": "input.text", "text": "Before config."}], "type", "not_configured"),
        ([config(), config()], "type", "already_configured"),
        ([config(bogus=1)], "bogus", None),
        ([config(response_format="mp3")], "response_format", None),
        ([config(seed=-1)], "seed", None),
        ([config(), {"type": "input.text", "text": 5}], "text", None),
        ([config(), {"type": "input.text", "text": over}], "text", None),  # one piece
        ([config()] + [{"type": "input.text", "text": "b" * 60}] * 4, "text", None),  # unended
        ([config(), b"\x00\x01"], "message", None),
        ([config(), "[" * 100 + "]" * 100], "message", None),
    ]
    for messages, param, code in cases:
        error = run(session_error(server, messages))
        assert error["param"] == param, (messages[-1], error)
        assert error["type"] == "invalid_request_error"
        if code:
            assert error["code"] == code
        assert "Traceback" not in error["message"] and "/" not in error["message"].replace(
            "/v1", "")


def test_unknown_voice_is_an_error_message(server):
    error = run(session_error(server, [config(voice="nobody"),
                                       {"type": "input.text", "text": "Hi there. "}]))
    assert error["param"] == "voice" and "nobody" in error["message"]


def test_idle_session_is_closed(tiny_synth, voices_dir):
    limits = Limits(max_new_tokens=64, timeout_seconds=120.0, stream_idle_seconds=0.3)
    with served(tiny_synth, voices_dir, limits=limits) as running:
        before = run(session_error(running, []))  # not even a config
        after = run(session_error(running, [config()]))  # configured, then silent
    for error in (before, after):
        assert error["code"] == "idle_timeout"


def test_a_full_queue_answers_an_error_then_closes(tiny_synth, voices_dir):
    with served(tiny_synth, voices_dir, limits=LIMITS, max_queue=1) as running:
        async def two_sessions():
            async with aiohttp.ClientSession() as client, client.ws_connect(
                    ws_url(running)) as first:
                await first.send_json(config())
                assert (await next_message(first))[1]["type"] == "session.configured"
                async with client.ws_connect(ws_url(running)) as second:  # no place left
                    error = await error_then_close(second)
                    assert second.close_code == 1013
                await first.send_json({"type": "input.done"})
                assert (await next_message(first))[1]["type"] == "session.done"
                return error

        error = run(two_sessions())
    assert error["code"] == "queue_full"


def test_disconnect_mid_sentence_cancels_it(tiny_synth, voices_dir):
    entered, release = threading.Event(), threading.Event()

    @contextlib.contextmanager
    def slow_model():  # the round waits here, so the client is gone before it generates
        entered.set()
        assert release.wait(WAIT)
        yield tiny_synth

    service = Service(slow_model, voices=[voices_dir], limits=LIMITS)
    submitted = []
    submit = service.scheduler.submit
    service.scheduler.submit = lambda *a: submitted.append(submit(*a)) or submitted[-1]
    with BackgroundServer(service) as running:
        async def leave():
            async with aiohttp.ClientSession() as client:
                ws = await client.ws_connect(ws_url(running))
                await ws.send_json(config())
                await next_message(ws)
                await ws.send_json({"type": "input.text", "text": "A sentence to cancel. "})
                await asyncio.get_running_loop().run_in_executor(None, entered.wait, WAIT)
                await ws.close()

        run(leave())
        assert len(submitted) == 1
        deadline = time.monotonic() + WAIT
        while not submitted[0].cancelled.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert submitted[0].cancelled.is_set()
        release.set()
        while service.scheduler.busy and time.monotonic() < deadline:
            time.sleep(0.05)
        assert submitted[0].job is None or submitted[0].job.results == []  # never generated
    service.close()


# ---------------------------------------------------------------- on ComfyUI's server
def test_mounted_under_the_comfy_prefix(tiny_synth, voices_dir):
    from aiohttp import web

    from fish_core.serve.routes import routes

    @contextlib.contextmanager
    def model():
        yield tiny_synth

    service = Service(model, voices=[voices_dir], limits=LIMITS)

    async def session():
        app = web.Application()
        app.add_routes(routes(service, "/sailfish"))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"ws://127.0.0.1:{runner.addresses[0][1]}/sailfish{PATH}"
        try:
            async with aiohttp.ClientSession() as client:
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await client.ws_connect(url, headers={"Origin": "http://evil.example"})
                async with client.ws_connect(url) as ws:
                    await ws.send_json(config(seed=3))
                    assert (await next_message(ws))[1]["type"] == "session.configured"
                    await ws.send_json({"type": "input.text", "text": "Hello from ComfyUI."})
                    await ws.send_json({"type": "input.done"})
                    start, pcm = await sentence(ws, 0)
                    assert pcm and start["seed"] == batch_seed(3, 0)
                    assert (await next_message(ws))[1]["type"] == "session.done"
            return refused.value.status
        finally:
            await runner.cleanup()

    assert run(session()) == 403
    service.close()
