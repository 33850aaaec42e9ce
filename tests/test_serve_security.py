"""``serve`` is safe by default, over real loopback sockets on the tiny checkpoint: cross-site and
forged-Host requests are refused before anything is read or spoken; a network bind needs a key;
the key comes from the environment or a file; the queue, JSON bodies and forms are bounded;
every error is the JSON shape naming the field sent, without server paths or object reprs; log
lines are escaped; on ComfyUI, voice changes need a loopback peer or the key; SGLang-Omni's
request shapes are accepted where they do not conflict with OpenAI's (``data:`` URLs only)."""

import asyncio
import base64
import importlib
import io
import json
import logging
import os
import re
import shutil
import socket
import sys
import threading
import types
from contextlib import contextmanager

import pytest
import soundfile as sf

pytest.importorskip("aiohttp")
web = pytest.importorskip("aiohttp.web")
try:  # the HTTP client the openai SDK depends on (httpx2 in newer releases)
    import httpx2 as httpx
except ImportError:
    httpx = pytest.importorskip("httpx")

from conftest import served, tone  # noqa: E402
from fish_core import cli  # noqa: E402
from fish_core.serve.background import BackgroundServer  # noqa: E402
from fish_core.serve.http.bodies import json_depth  # noqa: E402
from fish_core.serve.http.guard import Guard  # noqa: E402
from fish_core.serve.http.errors import ApiError  # noqa: E402
from fish_core.serve.limits import Limits  # noqa: E402
from fish_core.serve.routes import SERVICE  # noqa: E402
from fish_core.serve.service import Service  # noqa: E402
from test_nodes_routes import serving  # noqa: E402

KEY = "sec-key-456"
LIMITS = Limits(max_body_bytes=2**20, max_text_chars=300, max_references=2,
                max_reference_seconds=5.0, max_new_tokens=32, timeout_seconds=120.0,
                max_json_depth=16, max_form_parts=8)
SPEECH = {"model": "s2-pro", "input": "Safe by default.", "voice": "alice", "seed": 3,
          "max_new_tokens": 8}
JSON = {"Content-Type": "application/json"}
EVIL = "http://evil.example"
ERROR_KEYS = {"message", "type", "param", "code"}


def wav_bytes(seconds: float = 0.4, sr: int = 22050) -> bytes:
    out = io.BytesIO()
    sf.write(out, tone(sr, seconds, 300).numpy(), sr, format="WAV", subtype="PCM_16")
    return out.getvalue()


def data_url(data: bytes) -> str:
    return "data:audio/wav;base64," + base64.b64encode(data).decode("ascii")


@pytest.fixture(scope="module")
def synth(tiny_synth):
    return tiny_synth


@pytest.fixture(scope="module")
def server(synth, voices_dir):
    """No key, loopback: the default a newcomer starts."""
    with served(synth, voices_dir, limits=LIMITS) as running:
        yield running


@pytest.fixture(scope="module")
def keyed(synth, voices_dir):
    with served(synth, voices_dir, api_key=KEY, limits=LIMITS) as running:
        yield running


def http(server, method: str, path: str, **kwargs) -> httpx.Response:
    return httpx.request(method, server.url + path, timeout=120, **kwargs)


def rounds(server) -> int:
    """Generation rounds run so far: unchanged means nothing was spoken."""
    return len(server.service.scheduler.batch_sizes)


def error_of(response, status: int, param=None) -> dict:
    """The JSON error of ``response``, checked: status, shape, field named, nothing leaked."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == ERROR_KEYS
    assert error["param"] == param
    if param is not None:
        assert param in error["message"]
    assert_no_leak(response.text)
    return error


def assert_no_leak(text: str) -> None:
    assert "object at 0x" not in text and "Traceback" not in text
    for folder in (os.getcwd(), os.path.expanduser("~"), "/tmp/", "/work/", "/root/"):
        assert folder not in text


def raw_request(server, data: bytes, wait_for_close: bool = True) -> bytes:
    """Send raw bytes (headers no client library would send) and read the whole answer."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.sendall(data)
        chunks = []
        while wait_for_close and (chunk := sock.recv(65536)):
            chunks.append(chunk)
    return b"".join(chunks)


def status_and_body(raw: bytes) -> tuple[int, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


# ---------------------------------------------------------------- cross-site requests
def test_cross_site_post_without_content_type_is_refused_and_nothing_spoken(server):
    """A page's "simple" request: text/plain or no content type, its own Origin."""
    before = rounds(server)
    body = b'{"input": "Spoken by a web page.", "voice": "alice", "max_new_tokens": 8}'
    for headers in ({"Origin": EVIL, "Content-Type": "text/plain"},
                    {"Origin": EVIL, "Sec-Fetch-Site": "cross-site"},
                    {"Sec-Fetch-Site": "cross-site"},  # no-cors requests carry no Origin
                    {"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"},  # other port
                    {"Origin": "null"}):  # sandboxed frames, file: pages
        error = error_of(http(server, "POST", "/v1/audio/speech", content=body,
                              headers=headers), 403, "origin")
        assert error["code"] == "cross_origin"
    # without an Origin (curl and SDKs): the content type still has to say JSON
    error_of(http(server, "POST", "/v1/audio/speech", content=body), 415, "content-type")
    error_of(http(server, "POST", "/v1/audio/speech", content=body,
                  headers={"Content-Type": "text/plain"}), 415, "content-type")
    assert rounds(server) == before


def test_same_origin_pages_and_programs_pass(server):
    """A page the server itself serves (same origin) and a program (no Origin) are answered."""
    own = server.url
    for headers in ({"Origin": own, "Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"},
                    {}):
        response = http(server, "POST", "/v1/audio/speech", json=SPEECH, headers=headers)
        assert response.status_code == 200 and response.content[:4] == b"RIFF"


def test_cross_site_voice_changes_are_refused(server, voices_dir):
    files = {"audio": ("m.wav", wav_bytes(), "audio/wav")}
    for path, id_field in (("/v1/audio/voices", "name"), ("/v1/references/add", "id")):
        error_of(http(server, "POST", path, data={id_field: "mallory", "text": "Planted."},
                      files=files, headers={"Origin": EVIL}), 403, "origin")
    error_of(http(server, "PATCH", "/v1/audio/voices/alice", json={"name": "eve"},
                  headers={"Origin": EVIL}), 403, "origin")
    error_of(http(server, "POST", "/v1/references/update",
                  json={"old_reference_id": "alice", "new_reference_id": "eve"},
                  headers={"Sec-Fetch-Site": "cross-site"}), 403, "origin")
    error_of(http(server, "DELETE", "/v1/audio/voices/alice", headers={"Origin": EVIL}), 403,
             "origin")
    assert sorted(p.name for p in voices_dir.rglob("*.safetensors")) == ["alice.safetensors"]


def test_voice_routes_take_their_own_content_types(server):
    error_of(http(server, "POST", "/v1/audio/voices", content=b"name=x&text=y",
                  headers={"Content-Type": "application/x-www-form-urlencoded"}),
             415, "content-type")
    error_of(http(server, "PATCH", "/v1/audio/voices/alice", content=b'{"name": "eve"}',
                  headers={"Content-Type": "text/plain"}), 415, "content-type")


# ---------------------------------------------------------------- Host (DNS rebinding)
def test_forged_host_is_refused(server):
    before = rounds(server)
    for host in ("evil.example", f"evil.example:{server.port}", "192.168.1.5:8080",
                 "localhost.evil.example"):
        headers = {"Host": host, **JSON}
        error = error_of(http(server, "POST", "/v1/audio/speech", json=SPEECH, headers=headers),
                         403, "host")
        assert error["code"] == "forbidden_host" and "--allowed-hosts" in error["message"]
        error_of(http(server, "GET", "/v1/audio/voices", headers={"Host": host}), 403, "host")
    assert rounds(server) == before
    for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}", "[::1]:9",
                 "LOCALHOST"):
        assert http(server, "GET", "/v1/models", headers={"Host": host}).status_code == 200


def test_host_rules_follow_the_bind_and_the_allowed_names():
    def allowed(guard: Guard, host: str) -> bool:
        try:
            guard.check_host(host)
        except ApiError as e:
            assert e.status == 403 and e.param == "host"
            return False
        return True

    loopback = Guard.for_bind("127.0.0.1")
    assert allowed(loopback, "localhost:8080") and allowed(loopback, "[::1]:1")
    assert not allowed(loopback, "10.0.0.7:8080") and not allowed(loopback, "tts.lan")
    one = Guard.for_bind("10.0.0.7", ["tts.lan", "LB.example:8000"])
    assert (allowed(one, "10.0.0.7:8080") and allowed(one, "tts.lan")
            and allowed(one, "lb.example") and allowed(one, "localhost"))
    assert not allowed(one, "10.0.0.8") and not allowed(one, "evil.example")
    every = Guard.for_bind("0.0.0.0")  # any IP literal is the machine's own; names are not
    assert allowed(every, "192.168.1.5:8080") and allowed(every, "[fe80::1]:80")
    assert not allowed(every, "rebind.evil.example")
    assert allowed(Guard.for_bind("0.0.0.0", ["*"]), "anything.example")
    comfy = Guard.for_bind("0.0.0.0,::", origins=["http://my-ui.lan:3000"])
    comfy.check_origin("http://my-ui.lan:3000", "cross-site", "tts.lan:8188")  # allowed
    with pytest.raises(ApiError):
        comfy.check_origin("http://other.lan:3000", None, "tts.lan:8188")


# ---------------------------------------------------------------- start-up: bind and key
@contextmanager
def started(monkeypatch):
    """``serve`` as the CLI runs it, up to ``web.run_app`` (captured instead of run)."""
    calls = []
    monkeypatch.setattr(web, "run_app", lambda app, **kw: calls.append((app, kw)))
    yield calls


def serve_argv(ckpt_dir, voices, *extra) -> list[str]:
    return ["serve", "--model", str(ckpt_dir), "--device", "cpu", "--lazy", "--voices",
            str(voices), *extra]


def test_network_bind_without_key_is_refused_unless_allowed(ckpt_dir, tmp_path, monkeypatch,
                                                            capsys):
    monkeypatch.delenv("SAILFISH_SERVE_API_KEY", raising=False)
    with started(monkeypatch) as calls:
        for host in ("0.0.0.0", "::", "192.168.1.5"):
            assert cli.main(serve_argv(ckpt_dir, tmp_path, "--host", host)) == 2
            err = capsys.readouterr().err
            assert "--allow-no-key" in err and "SAILFISH_SERVE_API_KEY" in err
        assert calls == []  # refused before anything started (or loaded)
        assert cli.main(serve_argv(ckpt_dir, tmp_path, "--host", "0.0.0.0",
                                   "--allow-no-key")) == 0
        assert cli.main(serve_argv(ckpt_dir, tmp_path, "--host", "localhost")) == 0
    assert [kw["host"] for _, kw in calls] == ["0.0.0.0", "localhost"]
    assert not calls[0][0][SERVICE].has_key


def key_is_required(service: Service, key: str) -> None:
    with BackgroundServer(service) as running:
        assert http(running, "GET", "/v1/models").status_code == 401
        wrong = http(running, "GET", "/v1/models", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        right = http(running, "GET", "/v1/models", headers={"Authorization": f"Bearer {key}"})
        assert right.status_code == 200
    service.close()


def test_key_from_environment_and_from_file(ckpt_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SAILFISH_SERVE_API_KEY", "env-key-1")
    key_file = tmp_path / "serve.key"
    key_file.write_text("file-key-2\n", encoding="utf-8")
    with started(monkeypatch) as calls:
        assert cli.main(serve_argv(ckpt_dir, tmp_path, "--host", "0.0.0.0")) == 0  # key: env
        assert cli.main(serve_argv(ckpt_dir, tmp_path, "--api-key-file", str(key_file))) == 0
        assert cli.main(serve_argv(ckpt_dir, tmp_path, "--api-key-file",
                                   str(tmp_path / "missing.key"))) == 2
        assert "--api-key-file" in capsys.readouterr().err
        (tmp_path / "empty.key").write_text("\n")
        assert cli.main(serve_argv(ckpt_dir, tmp_path, "--api-key-file",
                                   str(tmp_path / "empty.key"))) == 2
        assert "empty" in capsys.readouterr().err
    (env_app, _), (file_app, _) = calls
    key_is_required(env_app[SERVICE], "env-key-1")
    key_is_required(file_app[SERVICE], "file-key-2")
    with pytest.raises(SystemExit):  # one source on the command line at a time
        cli.build_parser().parse_args(serve_argv(ckpt_dir, tmp_path, "--api-key", "a",
                                                 "--api-key-file", str(key_file)))


def test_help_says_why_not_api_key(capsys):
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "`ps`" in text and "SAILFISH_SERVE_API_KEY" in text and "--allow-no-key" in text


# ---------------------------------------------------------------- resources
def test_queue_bound_answers_429_with_retry_after(synth, voices_dir):
    entered, release = threading.Event(), threading.Event()

    @contextmanager
    def blocked_model():  # the first round waits here until released
        entered.set()
        assert release.wait(120)
        yield synth

    service = Service(blocked_model, voices=[voices_dir], limits=LIMITS, max_queue=1)
    first = {}
    with BackgroundServer(service) as running:
        thread = threading.Thread(target=lambda: first.update(
            r=http(running, "POST", "/v1/audio/speech", json=SPEECH)))
        thread.start()
        try:
            assert entered.wait(60)  # the first request holds the only place
            busy = http(running, "POST", "/v1/audio/speech", json=SPEECH)
            error = error_of(busy, 429)
            assert error["code"] == "queue_full" and int(busy.headers["Retry-After"]) >= 1
            busy_voice = http(running, "POST", "/v1/audio/voices",
                              data={"name": "q", "text": "Queued."},
                              files={"audio": ("q.wav", wav_bytes(), "audio/wav")})
            assert busy_voice.status_code == 429
        finally:
            release.set()
            thread.join(120)
        assert first["r"].status_code == 200
        assert http(running, "POST", "/v1/audio/speech", json=SPEECH).status_code == 200
        assert http(running, "GET", "/v1/health").json()["status"] == "ok"
    service.close()
    assert not (voices_dir / "q.safetensors").exists()


def test_nesting_bomb_and_oversized_json(server):
    bomb = b"[" * 100_000 + b"]" * 100_000
    deep = b'{"input": "x", "voice": {"id": ' + b"[" * 20 + b"]" * 20 + b"}}"
    for body, why in ((bomb, "structure characters"), (deep, "nests deeper")):
        error = error_of(http(server, "POST", "/v1/audio/speech", content=body, headers=JSON),
                         400, "body")
        assert why in error["message"]
    error_of(http(server, "POST", "/v1/tts", content=bomb, headers=JSON), 400, "body")
    assert json_depth(b'{"input": "[[[[[[[[[[[[[[[[[[[[[[[[\\"[[["}') == 1  # strings skipped
    over = b'{"input": "' + b"a" * LIMITS.max_body_bytes + b'"}'
    error_of(http(server, "POST", "/v1/audio/speech", content=over, headers=JSON), 413, "body")

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(LIMITS.max_body_bytes // 65536 + 2):
            yield b" " * 65536

    error_of(http(server, "POST", "/v1/audio/speech", content=chunks(), headers=JSON), 413,
             "body")
    assert http(server, "GET", "/v1/health").status_code == 200


def test_multipart_parts_are_bounded(server, voices_dir):
    data = {f"field{i}": "x" for i in range(LIMITS.max_form_parts + 1)}
    error = error_of(http(server, "POST", "/v1/audio/voices", data=data,
                          files={"audio": ("a.wav", wav_bytes(), "audio/wav")}), 400, "body")
    assert "form parts" in error["message"]
    assert not (voices_dir / "x.safetensors").exists()


def test_slow_body_times_out(synth, voices_dir):
    with served(synth, voices_dir, limits=Limits(body_timeout_seconds=0.3)) as running:
        raw = raw_request(running, b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                   b"Content-Type: application/json\r\nContent-Length: 100\r\n"
                                   b"Connection: close\r\n\r\n{\"input\":")
    status, body = status_and_body(raw)
    assert status == 408 and b'"param": "body"' in body


def test_undecodable_authorization_is_401(keyed):
    for value in (b"Bearer \xff\xfe\xfa", b"\xc3\x28", b"Bearer " + KEY.encode() + b"\xff"):
        raw = raw_request(keyed, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 b"Authorization: " + value + b"\r\nConnection: close\r\n\r\n")
        status, body = status_and_body(raw)
        assert status == 401 and b"invalid_api_key" in body
    assert http(keyed, "GET", "/v1/models",
                headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


# ---------------------------------------------------------------- the error shape
def test_unknown_routes_and_methods_answer_json(server, keyed):
    for running in (server, keyed):
        error_of(http(running, "GET", "/nope"), 404)
        error_of(http(running, "POST", "/v1/audio/speech/extra", json=SPEECH), 404)
        wrong = http(running, "GET", "/v1/audio/speech")
        error = error_of(wrong, 405)
        assert error["code"] == "method_not_allowed" and "POST" in wrong.headers["Allow"]
        error_of(http(running, "PUT", "/v1/models"), 405)


def test_errors_name_the_field_sent_without_paths_or_reprs(server, voices_dir):
    not_audio = data_url(b"hello, not audio")
    cases = [({**SPEECH, "ref_audio": not_audio, "ref_text": "x"}, "ref_audio"),
             ({**SPEECH, "references": [{"audio": not_audio, "text": "x"}]},
              "references[0].audio"),
             ({**SPEECH, "references": [{"audio_path": not_audio, "text": "x"}]},
              "references[0].audio_path")]
    for body, param in cases:
        error = error_of(http(server, "POST", "/v1/audio/speech", json=body), 400, param)
        assert "not readable audio" in error["message"]
    broken = voices_dir / "broken.safetensors"
    broken.write_bytes(b"not a safetensors file")
    try:
        response = http(server, "POST", "/v1/audio/speech", json={**SPEECH, "voice": "broken"})
        error_of(response, 422, "voice")
        assert str(voices_dir) not in response.text
    finally:
        broken.unlink()


def test_control_characters_in_paths_are_escaped_in_logs(server, caplog):
    caplog.set_level(logging.INFO)
    # a CR overwrites the line on a terminal (a LF does not match the route's name)
    response = http(server, "DELETE", "/v1/audio/voices/x%0D2026-12-01 forged%1b[31m line",
                    headers={"Origin": EVIL})
    error_of(response, 403, "origin")
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("sailfish.serve")]
    refused = [line for line in lines if "refused" in line]
    assert refused and all(not re.search(r"[\r\n\x1b]", line) for line in lines)
    assert "x\\r2026-12-01 forged\\x1b[31m" in refused[0]
    error = error_of(http(server, "GET", "/v1/x%0D%0Ay"), 404)
    assert "\r" not in error["message"] and "\\r" in error["message"]


# ---------------------------------------------------------------- SGLang-Omni shapes
def test_sglang_omni_request_shapes(server):
    clip = wav_bytes()
    inline = {**SPEECH, "references": [{"audio": base64.b64encode(clip).decode(),
                                        "text": "A reference."}]}
    by_path = {**SPEECH, "references": [{"audio_path": data_url(clip), "text": "A reference."}]}
    shorthand = {**SPEECH, "ref_audio": data_url(clip), "ref_text": "A reference.",
                 "repetition_penalty": 1.1}
    answers = [http(server, "POST", "/v1/audio/speech", json=b) for b in (inline, by_path,
                                                                         shorthand)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert answers[0].content == answers[1].content == answers[2].content
    health = http(server, "GET", "/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"


@pytest.mark.parametrize("url", ["http://127.0.0.1:1/a.wav", "https://example.com/a.wav",
                                 "file:///etc/passwd", "/etc/passwd", "~/voice.wav"])
def test_audio_urls_and_paths_are_never_fetched(server, url):
    before = rounds(server)
    for body, param in (({**SPEECH, "references": [{"audio_path": url, "text": "x"}]},
                         "references[0].audio_path"),
                        ({**SPEECH, "ref_audio": url, "ref_text": "x"}, "ref_audio"),
                        ({**SPEECH, "references": [{"audio": url, "text": "x"}]},
                         "references[0].audio")):
        error = error_of(http(server, "POST", "/v1/audio/speech", json=body), 400, param)
        assert "data: URL" in error["message"]
    error_of(http(server, "POST", "/v1/audio/speech", json={
        **SPEECH, "references": [{"audio": "AAAA", "audio_path": "AAAA", "text": "x"}]}),
        400, "references[0].audio_path")
    assert rounds(server) == before


def test_health_needs_no_key(keyed):
    for path in ("/health", "/v1/health"):
        assert http(keyed, "GET", path).status_code == 200
    assert http(keyed, "GET", "/v1/models").status_code == 401


# ---------------------------------------------------------------- ComfyUI's /sailfish routes
PEER = "X-Test-Peer"  # the stand-in app takes the peer address from this header


@web.middleware
async def peer_from_header(request, handler):
    """Stand in for a LAN peer: ComfyUI's server would see it as ``request.remote``."""
    peer = request.headers.get(PEER)
    return await handler(request.clone(remote=peer) if peer else request)


async def comfy_calls(table, requests):
    """Serve ``table`` as ComfyUI would (its own app) on loopback; ``requests``: (method, path,
    headers, json)."""
    from aiohttp import ClientSession

    out = []
    async with serving(table, [peer_from_header]) as port, ClientSession() as session:
        for method, path, headers, body in requests:
            headers = {k: v.replace("PORT", str(port)) for k, v in headers.items()}
            async with session.request(method, f"http://127.0.0.1:{port}{path}",
                                       headers=headers, json=body) as response:
                out.append((response.status, await response.json()))
    return out


def comfy_table(comfy):
    """The /sailfish routes as mounted, built now (the key is read when they are built)."""
    mounted = comfy.pack.nodes.routes
    serve_routes = importlib.import_module(comfy.pack.__name__ + ".fish_core.serve.routes")
    return serve_routes.routes(mounted.build_service(), mounted.PREFIX)


def test_comfy_voice_changes_need_a_loopback_peer_or_the_key(comfy, voices_dir,
                                                             monkeypatch):
    root = comfy.pack.nodes.paths.roots("fish_speech_voices")[0]
    root.mkdir(parents=True, exist_ok=True)
    for name in ("keep", "drop", "keyed"):
        shutil.copy(voices_dir / "alice.safetensors", root / f"{name}.safetensors")
    lan = {PEER: "192.168.1.20"}
    monkeypatch.delenv("SAILFISH_SERVE_API_KEY", raising=False)
    answers = asyncio.run(comfy_calls(comfy_table(comfy), [
        ("GET", "/sailfish/v1/audio/voices", lan, None),  # reading: as before
        ("DELETE", "/sailfish/v1/audio/voices/keep", lan, None),
        ("PATCH", "/sailfish/v1/audio/voices/keep", lan, {"name": "stolen"}),
        ("POST", "/sailfish/v1/references/update", lan,
         {"old_reference_id": "keep", "new_reference_id": "stolen"}),
        ("DELETE", "/sailfish/v1/audio/voices/drop", {}, None),  # this machine: allowed
        ("DELETE", "/sailfish/v1/audio/voices/keep", {"Origin": EVIL}, None),
        ("GET", "/sailfish/v1/audio/voices", {"Host": "rebind.evil.example"}, None),
        ("GET", "/sailfish/v1/audio/voices", {"Origin": "http://127.0.0.1:PORT"}, None),
        ("GET", "/sailfish/nope", {}, None),
        ("GET", "/sailfish/v1/tts", {}, None),
    ]))
    (read, *lan_changes, local, cross, rebind, same, unknown, method) = answers
    assert read[0] == 200 and {"keep", "drop"} <= {v["id"] for v in read[1]["data"]}
    for status, body in lan_changes:
        assert status == 403 and body["error"]["code"] == "loopback_only"
    assert local[0] == 200 and not (root / "drop.safetensors").exists()
    assert cross[0] == 403 and cross[1]["error"]["param"] == "origin"
    assert rebind[0] == 403 and "SAILFISH_SERVE_ALLOWED_HOSTS" in rebind[1]["error"]["message"]
    assert same[0] == 200
    assert unknown[0] == 404 and set(unknown[1]["error"]) == ERROR_KEYS
    assert method[0] == 405 and method[1]["error"]["code"] == "method_not_allowed"
    assert (root / "keep.safetensors").is_file() and not (root / "stolen.safetensors").exists()

    monkeypatch.setenv("SAILFISH_SERVE_API_KEY", KEY)  # with a key, the key decides
    bearer = {"Authorization": f"Bearer {KEY}"}
    [(no_key, _), (with_key, _)] = asyncio.run(comfy_calls(comfy_table(comfy), [
        ("DELETE", "/sailfish/v1/audio/voices/keyed", lan, None),
        ("DELETE", "/sailfish/v1/audio/voices/keyed", {**lan, **bearer}, None),
    ]))
    assert no_key == 401 and with_key == 200 and not (root / "keyed.safetensors").exists()


def test_comfy_guard_follows_comfyui_arguments(comfy, monkeypatch):
    """ComfyUI's --listen sets the addresses, --enable-cors-header an origin it allows."""
    mounted = comfy.pack.nodes.routes
    refused = importlib.import_module(comfy.pack.__name__ + ".fish_core.serve").ApiError
    cli_args = types.ModuleType("comfy.cli_args")
    cli_args.args = types.SimpleNamespace(listen="127.0.0.1", enable_cors_header=None)
    monkeypatch.setitem(sys.modules, "comfy.cli_args", cli_args)
    monkeypatch.setenv("SAILFISH_SERVE_ALLOWED_HOSTS", "studio.lan")
    local = mounted.guard()
    local.check_host("127.0.0.1:8188")
    local.check_host("studio.lan:8188")
    with pytest.raises(refused):
        local.check_host("192.168.1.5:8188")  # loopback only: not one of ComfyUI's addresses
    cli_args.args = types.SimpleNamespace(listen="0.0.0.0,::", enable_cors_header="http://ui.lan")
    lan = mounted.guard()
    lan.check_host("192.168.1.5:8188")
    lan.check_origin("http://ui.lan", "cross-site", "192.168.1.5:8188")
    with pytest.raises(refused):
        lan.check_origin(EVIL, "cross-site", "192.168.1.5:8188")


# ---------------------------------------------------------------- round two (issue 28)
def test_lone_surrogates_anywhere_are_400_naming_the_field(server):
    """JSON escapes can carry a lone surrogate (no UTF-8 byte can): a 400 naming the field,
    never a 500, whatever field holds it; a surrogate pair is text and passes."""
    cases = [
        (b'{"input": "Hi \\ud800 there", "voice": "alice"}', "input"),
        (b'{"input": "Hi.", "instructions": "\\udc00"}', "instructions"),
        (b'{"input": "Hi.", "voice": "al\\udfffice"}', "voice"),
        (b'{"input": "Hi.", "references": [{"audio": "AAAA", "text": "\\ud83d"}]}',
         "references[0].text"),
        (b'{"input": "Hi.", "model": "\\ud800"}', "model"),
    ]
    for body, param in cases:
        error = error_of(http(server, "POST", "/v1/audio/speech", content=body, headers=JSON),
                         400, param)
        assert "surrogate" in error["message"]
    error_of(http(server, "POST", "/v1/tts", content=b'{"text": "\\ud800"}', headers=JSON),
             400, "text")
    pair = b'{"input": "A smile \\ud83d\\ude00.", "voice": "alice", "max_new_tokens": 8}'
    assert http(server, "POST", "/v1/audio/speech", content=pair,
                headers=JSON).status_code == 200


def test_voice_names_are_checked_in_bytes(server, voices_dir):
    """Within the character limit, over the file system's 255 bytes: a 400 naming the field,
    on every route that takes a name (never the OSError of a too-long file name)."""
    wide = "语" * 100  # 100 characters, 300 bytes of UTF-8
    files = {"audio": ("a.wav", wav_bytes(), "audio/wav")}
    error = error_of(http(server, "POST", "/v1/audio/voices",
                          data={"name": wide, "text": "A tone."}, files=files), 400, "name")
    assert "bytes" in error["message"]
    error_of(http(server, "POST", "/v1/audio/speech", json={"input": "Hi.", "voice": wide}),
             400, "voice")
    error_of(http(server, "PATCH", "/v1/audio/voices/alice", json={"name": wide}), 400, "name")
    error_of(http(server, "DELETE", f"/v1/audio/voices/{wide}"), 400, "name")
    error_of(http(server, "POST", "/v1/tts", json={"text": "Hi.", "reference_id": wide}), 400,
             "reference_id")
    assert (voices_dir / "alice.safetensors").is_file()


def test_a_client_that_leaves_mid_body_ends_quietly(server, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    heads = [b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
             b"application/json\r\nContent-Length: 100000\r\n\r\n{\"input\": \"",
             b"POST /v1/audio/voices HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
             b"multipart/form-data; boundary=x\r\nTransfer-Encoding: chunked\r\n\r\n"
             b"10\r\n--x\r\nContent-Dis\r\n"]
    for head in heads:
        raw_request(server, head, wait_for_close=False)  # sent, then the socket is closed
    for _ in range(100):  # the server notices the close
        if sum("499" in r.getMessage() for r in caplog.records) >= len(heads):
            break
        threading.Event().wait(0.05)
    assert sum('" 499 ' in r.getMessage() for r in caplog.records) == len(heads)
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert http(server, "GET", "/v1/health").status_code == 200


def test_request_sizes_per_kind(server):
    """A speech body without reference audio is small (Limits.request_bytes); one with
    references may use the body limit; the small routes take small bodies only; a body of
    countless tiny values is refused before it is parsed."""
    padding = " " * (LIMITS.request_bytes() + 1)
    body = b'{"input": "Hi.", "voice": "alice"' + padding.encode() + b"}"
    error = error_of(http(server, "POST", "/v1/audio/speech", content=body, headers=JSON),
                     413, "body")
    assert "without reference audio" in error["message"]
    reference = {"audio": data_url(wav_bytes(seconds=4.0, sr=44100)), "text": "A tone."}
    with_refs = {"input": "Hi.", "references": [reference], "max_new_tokens": 8, "seed": 1}
    assert len(json.dumps(with_refs)) > LIMITS.request_bytes()
    assert http(server, "POST", "/v1/audio/speech", json=with_refs).status_code == 200
    error_of(http(server, "PATCH", "/v1/audio/voices/alice", content=body, headers=JSON),
             413, "body")
    values = b'{"input": "Hi.", "x": [' + b",".join([b"0"] * 200_000) + b"]}"
    error = error_of(http(server, "POST", "/v1/audio/speech", content=values, headers=JSON),
                     400, "body")
    assert "structure" in error["message"]


@pytest.mark.parametrize("body, why", [
    (b"--x\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nv", "no closing delimiter"),
    (b"--x\r\nContent-Disposition: form-data; name=\"name\"" + b"v" * 9000, "no headers end"),
    (b"--x\r\nContent-Type: text/plain\r\n\r\nv\r\n--x--\r\n", "no disposition"),
    (b"--x\r\nContent-Disposition: form-data; name=\"n\"\r\nContent-Type: multipart/mixed; "
     b"boundary=y\r\n\r\n--y--\r\n--x--\r\n", "nested"),
    (b"junk without any delimiter", "no delimiter"),
    (b"--xjunk\r\n", "bad delimiter line"),
])
def test_malformed_forms_are_400(server, body, why):
    headers = {"Content-Type": "multipart/form-data; boundary=x"}
    error_of(http(server, "POST", "/v1/audio/voices", content=body, headers=headers), 400,
             "body")


def test_forms_as_clients_send_them(server, voices_dir):
    """A preamble, quoted names with non-ASCII letters, a filename* parameter: parsed as
    form data is (RFC 7578), on an executor thread."""
    wav = wav_bytes()
    body = (b"a preamble to ignore\r\n--b0undary\r\n"
            b'Content-Disposition: form-data; name="name"\r\n\r\n'
            + "émile form".encode() + b"\r\n--b0undary\r\n"
            b'Content-Disposition: form-data; name="text"\r\n\r\nA tone.\r\n--b0undary\r\n'
            b"Content-Disposition: form-data; name=\"audio\"; filename*=UTF-8''t%C3%B6ne.wav"
            b"\r\nContent-Type: audio/wav\r\n\r\n" + wav + b"\r\n--b0undary--\r\nepilogue")
    response = http(server, "POST", "/v1/audio/voices", content=body,
                    headers={"Content-Type": "multipart/form-data; boundary=b0undary"})
    assert response.status_code == 201, response.text
    assert (voices_dir / "émile form.safetensors").is_file()
    assert http(server, "DELETE", "/v1/audio/voices/émile form").status_code == 200


def test_voice_listing_is_cached_and_invalidated(synth, tmp_path):
    """20,000 voice files: walked once, then answered from the cache until a folder changes
    (a file added beside the server, in a new sub-folder, or through the API)."""
    from fish_core.serve.voicelib import VoiceLibrary

    root = tmp_path / "many"
    root.mkdir()
    for i in range(20_000):
        (root / f"v{i:05d}.safetensors").touch()
    library = VoiceLibrary([root])
    with served(synth, root, limits=LIMITS) as running:
        running.service.voices = library
        running.service.scheduler.jobs.voices = library

        def listed() -> list[str]:
            response = http(running, "GET", "/v1/audio/voices")
            assert response.status_code == 200
            return [v["id"] for v in response.json()["data"]]

        assert len(listed()) == 20_000 and library.walks == 1
        assert len(listed()) == 20_000 and library.walks == 1  # from the cache
        (root / "sub").mkdir()
        assert library.names() and library.walks == 2  # the root changed: walked again
        (root / "sub" / "late.safetensors").touch()
        assert "sub/late" in listed() and library.walks == 3  # the sub-folder is watched
        assert http(running, "DELETE", "/v1/audio/voices/sub/late").status_code == 200
        assert "sub/late" not in listed()
        fish = http(running, "GET", "/v1/references/list").json()["reference_ids"]
        assert len(fish) == 20_000


def test_parsing_and_listing_run_off_the_event_loop(synth, voices_dir, monkeypatch):
    """While a body is parsed or the voices are listed (held here until released), the server
    still answers other clients: that work is on an executor thread, not the event loop."""
    from fish_core.serve.http import bodies

    entered, release = threading.Event(), threading.Event()
    parse_json = bodies.parse_json

    def held_parse(*args):
        entered.set()
        assert release.wait(120)
        return parse_json(*args)

    monkeypatch.setattr(bodies, "parse_json", held_parse)
    with served(synth, voices_dir, limits=LIMITS) as running:
        names = running.service.voices.names

        def held_names():
            entered.set()
            assert release.wait(120)
            return names()

        monkeypatch.setattr(running.service.voices, "names", held_names)
        for method, path, kwargs in (("POST", "/v1/audio/speech", {"json": {"input": "Hi."}}),
                                     ("GET", "/v1/audio/voices", {})):
            entered.clear()
            release.clear()
            slow = threading.Thread(target=http, args=(running, method, path), kwargs=kwargs)
            slow.start()
            assert entered.wait(120)
            assert http(running, "GET", "/v1/health").status_code == 200  # while it is held
            assert slow.is_alive()
            release.set()
            slow.join(120)


def test_undecodable_bytes_are_escaped_in_logs(server, caplog):
    """Header bytes that are not UTF-8 reach the server as lone surrogates: the access line
    shows them escaped (so a log file that takes only UTF-8 can always write it)."""
    caplog.set_level(logging.INFO)
    raw = raw_request(server, b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: "
                              b"a\xffb\r\nConnection: close\r\n\r\n")
    assert status_and_body(raw)[0] == 200
    for _ in range(100):
        lines = [r.getMessage() for r in caplog.records if r.name == "sailfish.serve.access"]
        if any("/v1/health" in line for line in lines):
            break
        threading.Event().wait(0.05)
    assert any("a\\udcffb" in line for line in lines), lines
    assert all(line.encode("utf-8") for line in lines)


def test_streams_per_client_flag(ckpt_dir, tmp_path, monkeypatch, capsys):
    with started(monkeypatch) as calls:
        assert cli.main(serve_argv(ckpt_dir, tmp_path, "--max-streams-per-client", "3")) == 0
        assert cli.main(serve_argv(ckpt_dir, tmp_path, "--max-streams-per-client", "0")) == 2
        assert "--max-streams-per-client" in capsys.readouterr().err
    (app, _), = calls
    assert app[SERVICE].limits.max_streams_per_client == 3
    app[SERVICE].close()


# ---------------------------------------------------------------- round three (issue 36)
def test_huge_json_integers_are_400_not_500(server):
    """Python refuses to read an integer of over 4300 digits (a ValueError inside json.loads),
    and a float field cannot hold one of over 308: any integer longer than the longest any field
    takes is a 400 naming the body, on every JSON route."""
    from fish_core.serve.http.bodies import MAX_INT_DIGITS

    before = rounds(server)
    for digits in (5000, 400, MAX_INT_DIGITS + 1):
        huge = b"9" * digits
        for path, body in (("/v1/audio/speech", b'{"input": "Hi.", "seed": ' + huge + b"}"),
                           ("/v1/audio/speech", b'{"input": "Hi.", "speed": -' + huge + b"}"),
                           ("/v1/tts", b'{"text": "Hi.", "top_k": ' + huge + b"}")):
            error = error_of(http(server, "POST", path, content=body, headers=JSON), 400, "body")
            assert error["type"] == "invalid_request_error"
            assert f"an integer of {digits} digits" in error["message"]
    error = error_of(http(server, "PATCH", "/v1/audio/voices/alice", headers=JSON,
                          content=b'{"name": ' + b"1" * 5000 + b"}"), 400, "body")
    assert "digits" in error["message"]
    assert rounds(server) == before  # nothing spoken
    error = error_of(http(server, "POST", "/v1/audio/speech", headers=JSON, content=(
        b'{"input": "Hi.", "seed": ' + b"9" * MAX_INT_DIGITS + b"}")), 400, "seed")
    assert "must lie in" in error["message"]  # within the digits: the field's own check


@pytest.mark.parametrize("charset, readable", [("idna", False), ("punycode", False),
                                               ("rot13", True), ("utf-16", True)])
def test_rfc2231_filenames_in_any_charset_are_400_not_500(server, voices_dir, charset,
                                                          readable):
    """``filename*=idna''…`` (a codec that takes no error handler) and its kind: a 400 naming
    the form field, never a 500, nothing saved; a charset that reads (or is no text codec) is
    a file like any other."""
    body = (b"--x\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nrfc2231\r\n"
            b"--x\r\nContent-Disposition: form-data; name=\"text\"\r\n\r\nA tone.\r\n"
            b"--x\r\nContent-Disposition: form-data; name=\"audio\"; filename*="
            + charset.encode() + b"''a%FF%00.wav\r\nContent-Type: audio/wav\r\n\r\n"
            + wav_bytes() + b"\r\n--x--\r\n")
    response = http(server, "POST", "/v1/audio/voices", content=body,
                    headers={"Content-Type": "multipart/form-data; boundary=x"})
    if readable:
        assert response.status_code == 201, response.text
        assert http(server, "DELETE", "/v1/audio/voices/rfc2231").status_code == 200
        return
    error = error_of(response, 400, "audio")
    assert error["type"] == "invalid_request_error" and "filename*" in error["message"]
    assert not (voices_dir / "rfc2231.safetensors").exists()


def test_a_voice_name_through_a_file_is_409_naming_the_field(server, voices_dir):
    """``alice.safetensors/x`` would be saved inside a voice file, and ``dir`` as a folder's
    name: on add and rename, a 409 naming the field (never a 500), nothing changed."""
    (voices_dir / "dir.safetensors").mkdir()
    files = {"audio": ("a.wav", wav_bytes(), "audio/wav")}
    try:
        for name, why in (("alice.safetensors/x", "which is a file"),
                          ("alice.safetensors/deeper/x", "which is a file"),
                          ("dir", "which is a folder")):
            error = error_of(http(server, "POST", "/v1/audio/voices",
                                  data={"name": name, "text": "A tone."}, files=files), 409,
                             "name")
            assert why in error["message"]
            error = error_of(http(server, "PATCH", "/v1/audio/voices/alice",
                                  json={"name": name}), 409, "name")
            assert why in error["message"]
            error = error_of(http(server, "POST", "/v1/references/add",
                                  data={"id": name, "text": "A tone."}, files=files), 409, "id")
            assert why in error["message"]
        assert (voices_dir / "alice.safetensors").is_file()
        assert http(server, "POST", "/v1/audio/speech", json=SPEECH).status_code == 200
    finally:
        (voices_dir / "dir.safetensors").rmdir()


def test_max_streams_flag(ckpt_dir, tmp_path, monkeypatch, capsys):
    with started(monkeypatch) as calls:
        assert cli.main(serve_argv(ckpt_dir, tmp_path, "--max-streams", "5")) == 0
        assert cli.main(serve_argv(ckpt_dir, tmp_path, "--max-streams", "0")) == 2
        assert "--max-streams must be at least 1" in capsys.readouterr().err
    (app, _), = calls
    assert app[SERVICE].limits.max_streams == 5
    assert Limits().max_streams >= Limits().max_streams_per_client
    app[SERVICE].close()


def test_the_operators_lexicon_cannot_grow_a_request_past_its_budget(synth, voices_dir):
    """``serve --lexicon``: a request whose text the lexicon would grow past
    budgets.LEXICON_GROWTH is refused (422, saying the limit), and nothing is spoken."""
    from fish_core.text.lexicon import Lexicon

    lexicon = Lexicon.parse("a\t" + "b" * 200 + "\n", "--lexicon words.tsv")
    with served(synth, voices_dir, limits=LIMITS, lexicon=lexicon) as running:
        response = http(running, "POST", "/v1/audio/speech",
                        json={"input": " ".join(["a"] * 100), "max_new_tokens": 8})
        error = error_of(response, 422)
        assert "--lexicon words.tsv" in error["message"]
        assert "budgets.LEXICON_GROWTH" in error["message"]
        assert rounds(running) == 0
        assert http(running, "POST", "/v1/audio/speech", json={
            "input": "a b.", "max_new_tokens": 8}).status_code == 200
