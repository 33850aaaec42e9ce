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
from fish_core.serve.limits import Limits  # noqa: E402
from fish_core.serve.service import Service  # noqa: E402
from fish_core.serve.api.speech_stream import PROTOCOL  # noqa: E402
from fish_core.serve.api.stream_config import cut_sentences  # noqa: E402

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
            assert done == {"type": "session.done", "utterance_index": 0, "total_sentences": 3}
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
            assert (await next_message(ws))[1] == {"type": "session.done", "utterance_index": 0,
                                                  "total_sentences": 0}

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


@contextlib.contextmanager
def held_model(synth):
    """A model whose next use waits until ``release`` is set (``entered`` tells when)."""
    entered, release = threading.Event(), threading.Event()

    @contextlib.contextmanager
    def model():
        entered.set()
        assert release.wait(WAIT)
        yield synth

    yield model, entered, release
    release.set()


def test_a_full_queue_refuses_a_new_session(tiny_synth, voices_dir):
    """A place held by an HTTP request in progress: a new session is told queue_full (1013)."""
    with held_model(tiny_synth) as (model, entered, release):
        service = Service(model, voices=[voices_dir], limits=LIMITS, max_queue=1)
        with BackgroundServer(service) as running:
            async def scenario():
                async with aiohttp.ClientSession() as client:
                    speech = asyncio.ensure_future(http_pcm(running, "Held.", 1))
                    await asyncio.get_running_loop().run_in_executor(None, entered.wait, WAIT)
                    async with client.ws_connect(ws_url(running)) as ws:
                        error = await error_then_close(ws)
                        code = ws.close_code
                    release.set()
                    await speech
                    return error, code

            error, code = run(scenario())
        service.close()
    assert error["code"] == "queue_full" and code == 1013


def test_sessions_waiting_for_text_hold_no_place(tiny_synth, voices_dir):
    """Two sessions trickling white space, --max-queue 1: HTTP clients are still served, and
    the white space does not keep the sessions alive (it completes no sentence)."""
    limits = Limits(max_text_chars=200, max_new_tokens=64, timeout_seconds=120.0,
                    stream_idle_seconds=1.5)
    with served(tiny_synth, voices_dir, limits=limits, max_queue=1) as running:
        async def trickle(ws):
            await ws.send_json(config())
            assert (await next_message(ws))[1]["type"] == "session.configured"
            started = time.monotonic()
            while True:  # a space every 0.2 s, until the server ends the session
                assert time.monotonic() - started < WAIT
                with contextlib.suppress(ConnectionError):
                    await ws.send_json({"type": "input.text", "text": " "})
                try:
                    msg = await ws.receive(timeout=0.2)
                except asyncio.TimeoutError:
                    continue
                assert msg.type == aiohttp.WSMsgType.TEXT, msg
                return json.loads(msg.data)["error"]

        async def scenario():
            async with (aiohttp.ClientSession() as client,
                    client.ws_connect(ws_url(running)) as one,
                    client.ws_connect(ws_url(running)) as two):
                sessions = asyncio.gather(trickle(one), trickle(two))
                await asyncio.sleep(0.3)
                pcm = await http_pcm(running, "Still served.", 4)  # the one place is free
                return pcm, await sessions

        pcm, errors = run(scenario())
    assert pcm
    assert [e["code"] for e in errors] == ["idle_timeout", "idle_timeout"]


def test_a_sentence_waits_for_a_place(tiny_synth, voices_dir):
    """A configured session whose sentence comes while every place is taken: it is spoken
    once the place is free (the session held none while it waited for text)."""
    with held_model(tiny_synth) as (model, entered, release):
        service = Service(model, voices=[voices_dir], limits=LIMITS, max_queue=1)
        with BackgroundServer(service) as running:
            async def scenario():
                async with (aiohttp.ClientSession() as client,
                        client.ws_connect(ws_url(running)) as ws):
                    await ws.send_json(config(seed=8))
                    assert (await next_message(ws))[1]["type"] == "session.configured"
                    speech = asyncio.ensure_future(http_pcm(running, "First in line.", 2))
                    await asyncio.get_running_loop().run_in_executor(None, entered.wait, WAIT)
                    await ws.send_json({"type": "input.text", "text": "Then me. "})
                    await asyncio.sleep(0.3)
                    assert service.open_requests == 1  # the sentence waits for the place
                    release.set()
                    await ws.send_json({"type": "input.done"})
                    start, pcm = await sentence(ws, 0)
                    assert (await next_message(ws))[1]["type"] == "session.done"
                    return await speech, pcm

            first, pcm = run(scenario())
        service.close()
    assert first and pcm


def test_streams_per_client_are_capped(tiny_synth, voices_dir):
    limits = Limits(max_new_tokens=64, timeout_seconds=120.0, max_streams_per_client=2)
    with served(tiny_synth, voices_dir, limits=limits) as running:
        async def scenario():
            async with aiohttp.ClientSession() as client:
                one = await client.ws_connect(ws_url(running))
                two = await client.ws_connect(ws_url(running))
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await client.ws_connect(ws_url(running))
                async with client.get(running.url + "/v1/health") as health:
                    assert health.status == 200  # HTTP is not affected
                await one.close()
                for _ in range(100):  # the server sees the close
                    if running.service.open_streams() < 2:
                        break
                    await asyncio.sleep(0.05)
                three = await client.ws_connect(ws_url(running))  # a slot is free again
                for ws in (two, three):
                    await ws.close()
                return refused.value.status

        assert run(scenario()) == 429


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


# ---------------------------------------------------------------- round two (issue 28)
def data_url_tone(synth) -> str:
    import io

    import soundfile as sf
    from conftest import tone

    out = io.BytesIO()
    sf.write(out, tone(synth.sample_rate, 0.4, 330).numpy(), synth.sample_rate, format="WAV",
             subtype="PCM_16")
    return "data:audio/wav;base64," + base64.b64encode(out.getvalue()).decode("ascii")


async def spoken_session(server, messages: list, headers=BEARER) -> tuple[dict, list]:
    """Send ``messages`` (after none), then read to session.done: (configured, sentences)."""
    async with aiohttp.ClientSession() as client, client.ws_connect(
            ws_url(server), headers=headers) as ws:
        configured = None
        for message in messages:
            await ws.send_json(message)
            if message["type"] == "session.config":
                kind, configured = await next_message(ws)
                assert configured["type"] == "session.configured", configured
        out = []
        while True:
            kind, value = await next_message(ws)
            assert kind == "json", (kind, value)
            if value["type"] == "session.done":
                assert value["total_sentences"] == len(out)
                return configured, out
            assert value["type"] == "audio.start", value
            frames = []
            while True:
                kind, item = await next_message(ws)
                if kind == "bytes":
                    frames.append(item)
                    continue
                assert item["type"] == "audio.done" and item["error"] is False, item
                assert item["total_bytes"] == sum(map(len, frames)) > 0
                out.append((value, frames))
                break


def test_split_granularity_of_the_peers(server):
    """sentence (default), clause (SGLang-Omni's harness: 第一段，第二段；第三段。) and none
    (everything at input.done, as one request)."""
    cases = [
        ({}, ["First one. Second", " one! Third"], ["First one.", "Second one!", "Third"]),
        ({"split_granularity": "clause"}, ["第一段，第二段；第三段。"],
         ["第一段，", "第二段；", "第三段。"]),
        ({"split_granularity": "clause"}, ["Well, 3,000 of them; fine: ok"],
         ["Well,", "3,000 of them;", "fine:", "ok"]),
        ({"split_granularity": "none"}, ["One. Two", ". Three."], ["One. Two. Three."]),
    ]
    for extra, pieces, want in cases:
        messages = [config(seed=3, **extra)] + [{"type": "input.text", "text": p}
                                                for p in pieces] + [{"type": "input.done"}]
        configured, sentences = run(spoken_session(server, messages))
        assert configured["split_granularity"] == extra.get("split_granularity", "sentence")
        assert configured["session_id"] and configured["stream_audio"] is True
        assert configured["response_format"] == "pcm"
        assert [s["sentence_text"] for s, _ in sentences] == want


def test_stream_audio_false_sends_one_frame_per_sentence(server):
    """stream_audio false: one binary frame per sentence, the same PCM as streamed; with wav,
    one WAV file per sentence holding it."""
    import io

    import soundfile as sf

    text = [{"type": "input.text", "text": "One frame. Two frames."}, {"type": "input.done"}]
    _, streamed = run(spoken_session(server, [config(seed=6)] + text))
    _, whole = run(spoken_session(server, [config(seed=6, stream_audio=False)] + text))
    configured, wav = run(spoken_session(server, [config(seed=6, stream_audio=False,
                                                         response_format="wav")] + text))
    assert configured["response_format"] == "wav" and configured["stream_audio"] is False
    for (_, frames), (_, one), (start, file) in zip(streamed, whole, wav):
        assert len(one) == 1 and one[0] == b"".join(frames)
        assert len(file) == 1 and start["format"] == "wav"
        data, rate = sf.read(io.BytesIO(file[0]), dtype="int16")
        assert rate == start["sample_rate"] and data.tobytes() == one[0]


def test_session_config_fields_of_the_peers_are_checked(server):
    """Every session.config field SGLang-Omni and vLLM-Omni document: accepted where S2 can
    honour it (or it asks for nothing), refused naming the field where it cannot."""
    accepted = [dict(speaker="alice", voice=None), dict(language="English"),
                dict(initial_codec_chunk_frames=4), dict(task_type="CustomVoice"),
                dict(x_vector_only_mode=False, non_streaming_mode=None, word_timestamps=False),
                dict(speed=1.0, instructions="calm"), dict(speed=1.5), dict(stream_audio=True)]
    for extra in accepted:
        messages = [config(**extra), {"type": "input.done"}]
        run(spoken_session(server, messages))
    refused = [
        (dict(task_type="VoiceDesign"), "task_type"), (dict(task_type="Base"), "task_type"),
        (dict(speaker_embedding=[0.1, 0.2]), "speaker_embedding"),
        (dict(word_timestamps=True), "word_timestamps"),
        (dict(x_vector_only_mode=True), "x_vector_only_mode"),
        (dict(non_streaming_mode=True), "non_streaming_mode"),
        (dict(split_granularity="word"), "split_granularity"),
        (dict(stream_audio="yes"), "stream_audio"),
        (dict(response_format="wav"), "response_format"),  # streamed audio is PCM
        (dict(speaker="bob"), "speaker"),  # a second name for voice "alice"
        (dict(speed=3.0), "speed"), (dict(loudness=-16), "loudness"), (dict(language=7),
                                                                       "language"),
        (dict(initial_codec_chunk_frames=-1), "initial_codec_chunk_frames"),
    ]
    for extra, param in refused:
        error = run(session_error(server, [config(**extra)]))
        assert error["param"] == param, (extra, error)


def test_voice_default_is_the_servers_default(server):
    """vLLM-Omni's and SGLang-Omni's clients send voice "default" (no library voice of that
    name here): the server's default voice, like no voice at all."""
    text = [{"type": "input.text", "text": "Default voice."}, {"type": "input.done"}]
    _, named = run(spoken_session(server, [config(seed=2, voice="default")] + text))
    _, plain = run(spoken_session(server, [config(seed=2, voice=None)] + text))
    assert b"".join(named[0][1]) == b"".join(plain[0][1])


def test_inline_references_are_encoded_once_per_session(server, tiny_synth, monkeypatch):
    """ref_audio in session.config: encoded once for the whole session (not per sentence), and
    each sentence is what the HTTP route gives with that reference and seed."""
    calls = []
    encode = tiny_synth.runtime.encode_voice  # what the scheduler's jobs encode with
    monkeypatch.setattr(tiny_synth.runtime, "encode_voice",
                        lambda *a, **k: calls.append(1) or encode(*a, **k))
    reference = {"ref_audio": data_url_tone(tiny_synth), "ref_text": "A short reference."}
    messages = [config(seed=9, voice=None, **reference),
                {"type": "input.text", "text": "One. Two. Three. "}, {"type": "input.done"}]
    _, sentences = run(spoken_session(server, messages))
    assert len(sentences) == 3 and len(calls) == 1

    async def http(text, seed):
        async with aiohttp.ClientSession() as session:
            async with session.post(server.url + "/v1/audio/speech", headers=BEARER, json={
                    "input": text, "seed": seed, "response_format": "pcm", **FAST,
                    **reference}) as response:
                assert response.status == 200, await response.text()
                return await response.read()

    assert b"".join(sentences[1][1]) == run(http("Two.", batch_seed(9, 1)))


def test_lone_surrogates_are_a_clear_error(server):
    for messages, param in [
        ([config(), '{"type": "input.text", "text": "ok \\ud800 then"}'], "text"),
        (['{"type": "session.config", "voice": "\\udfff"}'], "voice"),
        ([config(), '{"type": "input.text", "text": "fine", "\\ud800": 1}'], "message"),
    ]:
        error = run(session_error(server, messages))
        assert error["param"] == param and "surrogate" in error["message"], error


def test_message_sizes_are_capped_per_kind(server):
    """After session.config a message is at most a text piece's worst size; a config without
    references at most Limits.request_bytes (checked before parsing)."""
    big = json.dumps({"type": "input.text", "text": "x" * (20 * LIMITS.max_text_chars)})
    error = run(session_error(server, [config(), big]))
    assert error["param"] == "message" and "after session.config" in error["message"]
    padded = dict(config(), instructions=None, model=None)
    padded["voice"] = "alice"
    bloated = json.dumps(padded)[:-1] + ", \"top_k\": 30" + " " * LIMITS.request_bytes() + "}"
    error = run(session_error(server, [bloated]))
    assert error["param"] == "message" and "without reference audio" in error["message"]
    items = "[" + ",".join(["0"] * (LIMITS.json_items() + 1)) + "]"
    error = run(session_error(server, ['{"type": "session.config", "x": ' + items + "}"]))
    assert error["param"] == "message" and "structure" in error["message"]


def test_adversarial_text_is_cut_right(server):
    """A run of dots in one piece, then empty pieces and single dots, then text: the sentences
    are what text.plan's rule gives for the whole text (nothing is lost or repeated)."""
    dots = "." * (LIMITS.max_text_chars - 10)
    pieces = ["Go" + dots] + [""] * 50 + ["."] * 5 + [" Next one. ", "Last"]
    messages = [config(max_new_tokens=4)] + [{"type": "input.text", "text": p}
                                             for p in pieces] + [{"type": "input.done"}]
    _, sentences = run(spoken_session(server, messages))
    assert [s["sentence_text"] for s, _ in sentences] == ["Go" + dots + ".....", "Next one.",
                                                          "Last"]


def test_a_key_protocol_without_ours_is_refused_and_never_logged(server, caplog):
    """A browser's key offered as a subprotocol without sailfish.speech.v1 (or any foreign
    subprotocol list): 400 before the upgrade, and no log line of any library holds it."""
    import logging

    token = "base64url.bearer." + base64.urlsafe_b64encode(KEY.encode()).decode().rstrip("=")
    caplog.set_level(logging.DEBUG)
    cases = [((token,), 400), (("chat", token), 400), (("chat",), 400),
             ((token, PROTOCOL), 101), ((PROTOCOL, token), 101)]
    for protocols, status in cases:
        assert run(handshake_status(server, protocols=protocols))[0] == status, protocols
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert token not in logged and KEY not in logged
    assert token.split(".")[-1] not in logged


def test_speed_stretches_each_sentence(server):
    """``speed`` in session.config: every sentence is the unstretched one's length / speed
    (finishing per sentence; the same seed gives the same speech)."""
    pieces = [{"type": "input.text", "text": "First one. Second one."}, {"type": "input.done"}]
    lengths = {}
    for speed in (1.0, 2.0):
        _, sentences = run(spoken_session(server, [config(seed=4, speed=speed)] + pieces))
        lengths[speed] = [sum(map(len, frames)) // 2 for _, frames in sentences]
    assert len(lengths[1.0]) == len(lengths[2.0]) == 2
    assert lengths[2.0] == [round(n / 2.0) for n in lengths[1.0]]


# ---------------------------------------------------------------- round three (issue 36)
def test_streams_are_capped_in_all_not_only_per_address(tiny_synth, voices_dir):
    """Three clients from three loopback addresses, each under its own limit: the server holds
    ``max_streams`` sessions in all, and refuses the next before the upgrade with a 503 that
    says why (Retry-After); a closed session frees its place."""
    limits = Limits(max_new_tokens=64, timeout_seconds=120.0, max_streams_per_client=8,
                    max_streams=2)
    with served(tiny_synth, voices_dir, limits=limits) as running:
        async def scenario():
            clients = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(
                local_addr=(f"127.0.0.{i}", 0))) for i in (1, 2, 3)]
            try:
                one = await clients[0].ws_connect(ws_url(running))
                two = await clients[1].ws_connect(ws_url(running))
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await clients[2].ws_connect(ws_url(running))
                async with clients[2].get(ws_url(running).replace("ws://", "http://"), headers={
                        "Connection": "Upgrade", "Upgrade": "websocket",
                        "Sec-WebSocket-Version": "13",
                        "Sec-WebSocket-Key": base64.b64encode(b"0123456789abcdef").decode()},
                        ) as answer:
                    body = await answer.json()
                    status, retry = answer.status, answer.headers.get("Retry-After")
                await one.close()
                for _ in range(100):  # the server sees the close
                    if running.service.open_streams() < 2:
                        break
                    await asyncio.sleep(0.05)
                three = await clients[2].ws_connect(ws_url(running))  # a place is free again
                for ws in (two, three):
                    await ws.close()
                return refused.value.status, status, retry, body["error"]
            finally:
                for client in clients:
                    await client.close()

        refused, status, retry, error = run(scenario())
        assert refused == status == 503 and retry
        assert error["code"] == "too_many_streams" and "--max-streams" in error["message"]
        assert "2 speech streams" in error["message"]


def test_a_huge_integer_in_session_config_is_an_error_message(server):
    """Python's int-string limit (4300 digits) is never reached: a clear error, not a 500."""
    error = run(session_error(server, ['{"type": "session.config", "voice": "alice", '
                                       '"seed": ' + "7" * 5000 + "}"]))
    assert error["param"] == "message" and "5000 digits" in error["message"]
    assert error["type"] == "invalid_request_error"
