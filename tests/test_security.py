"""Security of the remote client and the Model Loader's remote mode (issue 19): a shared
workflow is untrusted input, so it can neither point a key at a host nor pick which secret is
sent; a key goes only to the origins it is bound to; a remote answer cannot make the client
read without bound; errors name the endpoint, not a foreign server's body. Model files: pinned
downloads, codec.pth never unpickled by torch (our restricted reader, on any torch).

Remote hosts here are real sockets on 127.0.0.1 that record every byte they receive; the node
tests run on the ComfyUI stand-in (tests/comfy_stubs.py)."""

from __future__ import annotations

import json
import re
import socket
import socketserver
import struct
import threading
import tracemalloc
from pathlib import Path

import pytest
import torch

import comfy_stubs
from fish_core.remote import RemoteError, RemoteSynthesizer, endpoints
from fish_core.remote.http import Credential, Endpoint, MAX_QUOTE, Transport
from fish_core.audio.wav import AudioFormatError, MAX_CHUNKS, WavReader

SECRETS = {
    "HF_TOKEN": "hf_SECRET_hf_token_0001",
    "AWS_SECRET_ACCESS_KEY": "aws-SECRET-access-key-0002",
    "OPENAI_API_KEY": "sk-SECRET-openai-0003",
    "SAILFISH_REMOTE_API_KEY": "sailfish-SECRET-default-0004",
}
HF_FILE_TOKEN = "hf_SECRET_token_file_0005"
GOOD_KEY = "good-endpoint-key-0006"
FRAMES = 12


# ---------------------------------------------------------------- a recording listener
class Recorder(socketserver.ThreadingTCPServer):
    """An HTTP listener on 127.0.0.1 that keeps every byte each connection sent and answers
    with ``respond(path, send)`` (``send(bytes)`` writes to the client; raises once the client
    has gone)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, respond=None):
        super().__init__(("127.0.0.1", 0), RecordingHandler)
        self.respond = respond or (lambda path, send: send(answer(404, b"{}")))
        self.received: list[bytes] = []
        self.sent = 0  # body bytes the client took before it left
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def everything(self) -> bytes:
        return b"".join(self.received)

    def __enter__(self) -> "Recorder":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()


class RecordingHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            piece = self.request.recv(65536)
            if not piece:
                break
            data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        while length and len(body) < int(length.group(1)):
            piece = self.request.recv(65536)
            if not piece:
                break
            body += piece
        self.server.received.append(head + b"\r\n\r\n" + body)
        path = head.split(b" ")[1].decode() if head.count(b" ") >= 2 else "/"

        def send(chunk: bytes) -> None:
            self.request.sendall(chunk)
            self.server.sent += len(chunk)

        try:
            self.server.respond(path, send)
        except OSError:
            pass  # the client closed the connection: what a bounded client does


def answer(status: int, body: bytes, kind: str = "application/json",
           extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n{extra}\r\n").encode() + body


def models_answer(path, send) -> None:
    """Our serve's /v1/models (so that dialect auto finds ``sailfish``)."""
    send(answer(200, json.dumps({"data": [{"id": "s2-pro", "owned_by": "sailfish"}]}).encode()))


def wav_header(rate: int = 44100, channels: int = 1, bits: int = 16) -> bytes:
    fmt = struct.pack("<HHIIHH", 1 if bits == 16 else 3, channels, rate,
                      rate * channels * bits // 8, channels * bits // 8, bits)
    return b"RIFF\xff\xff\xff\xffWAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt


def streamed(head: bytes, kind: str = "audio/wav"):
    """A responder that sends ``head`` then endless bytes (up to 128 MiB), as chunked, to the
    speech request (the model list, asked first, is a 404: an engine without one)."""
    def respond(path, send) -> None:
        if path.endswith("/models"):
            send(answer(404, b"{}"))
            return
        send(f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nConnection: close\r\n\r\n".encode())
        send(head)
        block = b"\x01\x00" * (1 << 15)
        for _ in range((128 << 20) // len(block)):
            send(block)
    return respond


# ---------------------------------------------------------------- the stand-in ComfyUI
@pytest.fixture
def comfy(tmp_path, monkeypatch):
    """The pack on the ComfyUI stand-in, secrets in the environment and in ~/.cache, and no
    endpoints file yet."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "token").write_text(HF_FILE_TOKEN + "\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv(endpoints.ENV_VAR, raising=False)
    with comfy_stubs.pack_in_comfy(tmp_path / "comfy", "sailfish_security") as (pack, stubs):
        yield pack, stubs
        pack.nodes.remote.forget()


def write_endpoints(stubs, entries: dict) -> Path:
    path = Path(stubs.folder_paths.get_user_directory()) / endpoints.FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"endpoints": entries}))
    return path


LOADER = dict(model="unused", precision="auto", quantization="none", device="auto",
              compile=False, context_length=0, unload_after_minutes=0)


def loader(pack):
    return next(n for n in pack.nodes.NODES if n.id == "SailfishModelLoader")


def no_secret_in(text: str | bytes) -> bool:
    data = text.encode() if isinstance(text, str) else text
    return not any(s.encode() in data for s in [*SECRETS.values(), HF_FILE_TOKEN])


# ---------------------------------------------------------------- a malicious workflow
ATTACKS = [
    {"remote_url": "{attacker}", "api_key_env": "HF_TOKEN"},
    {"remote_url": "{attacker}", "api_key_env": "AWS_SECRET_ACCESS_KEY"},
    {"remote_url": "{attacker}", "api_key_env": "OPENAI_API_KEY"},
    {"remote_url": "{attacker}", "api_key_file": "~/.cache/huggingface/token"},
    {"remote_url": "{attacker}", "api_key_file": "/proc/self/environ"},
    {"remote_url": "{attacker}"},  # the default SAILFISH_REMOTE_API_KEY
    {"remote_url": "{attacker}", "dialect": "sailfish", "remote": "good"},
    {"remote": "{attacker}"},
    {"remote": "{attacker}/v1"},
    {"remote": "HF_TOKEN"},
    {"remote": "~/.cache/huggingface/token"},
    {"remote": "/proc/self/environ"},
]


def test_a_malicious_workflow_reaches_no_unconfigured_host_and_sends_no_secret(comfy):
    pack, stubs = comfy
    node = loader(pack)
    with Recorder(models_answer) as attacker, Recorder(models_answer) as good:
        write_endpoints(stubs, {"good": {"urls": good.url, "api_key_env": "GOOD_ENGINE_KEY"}})
        for attack in ATTACKS:
            inputs = {k: v.format(attacker=attacker.url) for k, v in attack.items()}
            with pytest.raises(ValueError) as error:
                node.execute(**LOADER, **inputs)
            assert no_secret_in(str(error.value)), (attack, error.value)
            assert attacker.url not in str(error.value), (attack, error.value)
            if "remote" in inputs and "remote_url" not in inputs:  # what ComfyUI checks first
                message = pack.nodes.model.validate_remote(inputs["remote"])
                assert isinstance(message, str) and "configured: good" in message
        assert attacker.received == []  # not one connection
        assert good.received == []  # the good endpoint's key was never even read (unset)


def test_comfyui_drops_the_removed_inputs_and_only_the_configured_key_goes_out(comfy,
                                                                               monkeypatch):
    """ComfyUI 0.3.64 passes only declared inputs to a node, so a prompt's remote_url /
    api_key_env never reach it: what runs is the endpoint by name, with the operator's key."""
    pack, stubs = comfy
    monkeypatch.setenv("GOOD_ENGINE_KEY", GOOD_KEY)
    with Recorder(models_answer) as good:
        write_endpoints(stubs, {"good": {"urls": [good.url], "api_key_env": "GOOD_ENGINE_KEY"}})
        (handle,) = loader(pack).execute(**LOADER, remote="good")
        assert repr(handle) == "RemoteHandle(endpoint='good', model=None)"  # all the history holds
        assert good.received, "the loader reaches its engine (dialect auto)"
        assert all(f"Authorization: Bearer {GOOD_KEY}".encode() in r for r in good.received)
        assert no_secret_in(good.everything)


def test_unknown_endpoint_lists_the_configured_names(comfy):
    pack, stubs = comfy
    write_endpoints(stubs, {"gpu-farm": {"urls": "https://tts.example.com"},
                            "lan": {"urls": ["http://127.0.0.1:9", "http://127.0.0.1:10"]}})
    with pytest.raises(ValueError, match=r"no endpoint named 'studio'; configured: "
                                         r"gpu-farm, lan"):
        loader(pack).execute(**LOADER, remote="studio")
    assert "off" in endpoints.choices() and endpoints.choices()[1:] == ["gpu-farm", "lan"]


def test_old_workflows_load_with_a_clear_message(comfy):
    """A workflow saved before endpoints: its widgets_values put the old remote_url where
    ``remote`` is now (ComfyUI's frontend drops the extra values); an API prompt may still
    carry the removed inputs."""
    pack, _ = comfy
    model = pack.nodes.model
    assert model.validate_remote("") is True  # an old local-mode workflow: runs as before
    assert model.validate_remote("off") is True and model.validate_remote() is True
    message = model.validate_remote("http://127.0.0.1:8080")
    assert isinstance(message, str) and "by URL" in message and "endpoints file" in message
    with pytest.raises(ValueError, match="api_key_env, remote_url: the Model Loader no longer"):
        loader(pack).execute(**LOADER, remote_url="http://127.0.0.1:8080",
                             api_key_env="SAILFISH_REMOTE_API_KEY")
    v1 = pack.nodes.v1_mappings()[0]["SailfishModelLoader"]
    declared = {**v1.INPUT_TYPES()["required"], **v1.INPUT_TYPES()["optional"]}
    assert not set(model.REMOVED) & set(declared)
    import inspect

    assert "remote" in inspect.getfullargspec(v1.VALIDATE_INPUTS).args  # ComfyUI reads this
    assert v1.VALIDATE_INPUTS(remote="nope").startswith("remote: no endpoint named 'nope'")


def test_the_endpoints_file_is_outside_what_comfyui_web_api_writes(comfy):
    """ComfyUI's /userdata routes write under <user dir>/<user id>/ ("default" for one
    user); the endpoints file is <user dir>/sailfish/, which no web request reaches."""
    _, stubs = comfy
    user_dir = Path(stubs.folder_paths.get_user_directory())
    (path, label), = endpoints.default_files()
    assert path == user_dir / "sailfish" / "endpoints.json"
    assert str(user_dir) not in label  # errors name it without the server's path


@pytest.mark.parametrize("entry, field", [
    ({"urls": "http://127.0.0.1:1", "api_key": "inline"}, "unknown field"),
    ({"urls": "http://127.0.0.1:1", "api_key_env": "A", "api_key_file": "b"}, "not both"),
    ({"urls": "http://127.0.0.1:1", "dialect": "grpc"}, "dialect"),
    ({"urls": []}, "urls"),
    ({"urls": "ftp://x"}, "http"),
    ({"urls": "http://user:pw@127.0.0.1:1"}, "credentials"),
])
def test_endpoints_file_mistakes_name_the_field(tmp_path, entry, field):
    path = tmp_path / "endpoints.json"
    path.write_text(json.dumps({"endpoints": {"x": entry}}))
    with pytest.raises(ValueError, match=field):
        endpoints.load([path])
    path.write_text(json.dumps({"endpoints": {"off": {"urls": "http://127.0.0.1:1"}}}))
    with pytest.raises(ValueError, match="reserved"):
        endpoints.load([path])


def test_endpoint_key_errors_name_neither_key_nor_path(tmp_path, monkeypatch):
    secret_dir = tmp_path / "very-private-dir"
    config = endpoints.EndpointConfig("farm", ("https://tts.example.com",),
                                      api_key_file=str(secret_dir / "key"))
    with pytest.raises(ValueError) as error:
        config.api_key()
    assert "farm" in str(error.value) and "very-private-dir" not in str(error.value)
    monkeypatch.setenv("BAD_KEY", "secret-part-one\nsecret-part-two")  # header injection
    with pytest.raises(ValueError) as error:
        endpoints.EndpointConfig("farm", ("https://x",), api_key_env="BAD_KEY").api_key()
    assert "printable" in str(error.value) and "secret-part" not in str(error.value)


def test_local_is_offered_only_when_the_operator_enables_it(comfy, monkeypatch):
    """No engine is built in: a workflow naming ``local`` reaches nothing until the operator
    enables it (``"local": {}``: a key-less Sailfish serve on 127.0.0.1:8080)."""
    pack, stubs = comfy
    path = write_endpoints(stubs, {})
    assert endpoints.choices() == ["off"] and "local" not in endpoints.load()
    with pytest.raises(ValueError, match=r"no endpoint named 'local'; configured: none .*"
                                         r"only when the operator enables it") as error:
        loader(pack).execute(**LOADER, remote="local")
    assert '{"endpoints": {"local": {}}}' in str(error.value)
    path.write_text(json.dumps({"endpoints": {"local": {}}}))
    local = endpoints.load()["local"]
    assert local.urls == ("http://127.0.0.1:8080",) and local.dialect == "sailfish"
    assert endpoints.choices() == ["off", "local"]
    assert local.api_key() is None  # SAILFISH_REMOTE_API_KEY is not read for it
    monkeypatch.setenv("SAILFISH_REMOTE_API_KEY", SECRETS["SAILFISH_REMOTE_API_KEY"])
    assert local.client().transport.credential is None
    path.write_text(json.dumps({"endpoints": {"local": {"urls": "http://127.0.0.1:9000"}}}))
    assert endpoints.load()["local"].urls == ("http://127.0.0.1:9000",)


SECRET_PAGE = b"<html>internal admin page: SESSION=SECRET-0007 db=prod</html>"


def test_an_unidentified_local_engine_is_never_quoted(comfy):
    """Whatever answers where ``local`` points (not a Sailfish serve): the node error and the
    history carry the status alone, no byte of its answer."""
    pack, stubs = comfy
    for status in (403, 404, 500):
        with Recorder(lambda path, send: send(answer(status, SECRET_PAGE, "text/html"))) as other:
            write_endpoints(stubs, {"local": {"urls": other.url}})
            with pytest.raises(Exception) as error:
                loader(pack).execute(**LOADER, remote="local")
                synth = pack.nodes.remote.remote_synthesizer(
                    pack.nodes.remote.RemoteHandle("local"))
                synth.tts("Hi.", seed=1, max_new_tokens=FRAMES)
            message = str(error.value)
            assert f"HTTP {status}" in message and "endpoint 'local'" in message
            assert b"SECRET" not in message.encode() and "internal" not in message
            assert other.url not in message
            pack.nodes.remote.forget()


def test_an_identified_sailfish_engine_is_quoted_short(tiny_synth, voices_dir):
    """Our serve identifies itself (its /v1/models): its own messages are quoted, bounded."""
    from conftest import served

    with served(tiny_synth, voices_dir) as running:
        client = RemoteSynthesizer(running.url, "sailfish", retries=0, name="local")
        assert not client.transport.shows_text  # nothing said yet
        from fish_core.speech.voices import Voice
        with pytest.raises(ValueError) as error:
            client.tts("Hi.", Voice("nobody", [], 44100, 2048), seed=1, max_new_tokens=FRAMES)
        assert client.transport.identified and "'alice'" in str(error.value)
        assert running.url not in str(error.value)


def test_an_engines_lists_are_quoted_first_few_and_a_count():
    """An unknown model against an engine listing thousands of long names (a 900 kB model
    list, a 981,584-character node error before): the error holds the first few names,
    shortened, and how many more (of the MAX_MODELS read)."""
    from fish_core.remote.http import MAX_NAMES
    from fish_core.remote.models import MAX_MODELS, UnknownModel

    names = [f"model-{i:05d}-" + "x" * 200 for i in range(4_000)]
    listing = json.dumps({"data": [{"id": n, "owned_by": "sglang"} for n in names]}).encode()
    with Recorder(lambda path, send: send(answer(200, listing))) as engine:
        with pytest.raises(UnknownModel) as error:
            RemoteSynthesizer(engine.url, "sglang-omni", retries=0, model="nope", name="farm")
    message = str(error.value)
    assert "endpoint 'farm'" in message and engine.url not in message
    assert message.count("model-0") == MAX_NAMES
    assert f"and {MAX_MODELS - MAX_NAMES:,} more" in message
    assert len(message) < 800


def test_a_bad_model_list_names_the_endpoint_not_its_url():
    with Recorder(lambda path, send: send(answer(200, b'{"models": []}'))) as engine:
        with pytest.raises(AudioFormatError) as error:
            RemoteSynthesizer(engine.url, "sglang-omni", retries=0, name="farm").models
    assert "endpoint 'farm'/v1/models" in str(error.value) and engine.url not in str(error.value)


# ---------------------------------------------------------------- a key and its origins
def test_the_key_is_not_sent_on_a_redirect_to_another_origin():
    with Recorder(models_answer) as other:
        def redirect(path, send):
            send(answer(302, b"moved", "text/plain", f"Location: {other.url}{path}\r\n"))

        with Recorder(redirect) as configured:
            with pytest.raises(RemoteError, match="redirect") as error:
                RemoteSynthesizer(configured.url, "auto", api_key=GOOD_KEY)
            assert other.url not in str(error.value)
            assert f"Bearer {GOOD_KEY}".encode() in configured.everything
        assert other.received == []


def test_the_key_is_bound_to_the_origins_of_its_urls():
    bound = [Endpoint.parse("https://a.example.com"), Endpoint.parse("http://127.0.0.1:8000")]
    credential = Credential(GOOD_KEY, bound)
    assert credential.header(bound[0]) == {"Authorization": f"Bearer {GOOD_KEY}"}
    for other in ("http://a.example.com", "https://a.example.com:8443",
                  "https://b.example.com", "http://127.0.0.1:8001", "http://localhost:8000"):
        assert credential.header(Endpoint.parse(other)) == {}, other


@pytest.mark.parametrize("url", ["http://10.0.0.5:8000", "http://gpu-box:8000",
                                 "http://example.com", "http://127.0.0.1:8000 http://10.1.1.1"])
def test_no_key_over_plain_http_to_a_host_that_is_not_loopback(url):
    with pytest.raises(ValueError, match="plain http"):
        RemoteSynthesizer(url, "sailfish", api_key=GOOD_KEY)  # refused before connecting
    assert RemoteSynthesizer(url, "sailfish").transport.credential is None  # no key: fine


@pytest.mark.parametrize("url", ["https://gpu-box:8000", "http://127.0.0.1:8000",
                                 "http://localhost:8000", "http://[::1]:8000",
                                 "http://127.8.0.1:8000"])
def test_a_key_goes_over_https_or_to_loopback(url):
    assert RemoteSynthesizer(url, "sailfish", api_key=GOOD_KEY).transport.credential


def test_the_cli_rules_are_the_same(tmp_path, monkeypatch, capsys):
    from fish_core import cli

    monkeypatch.setenv("ENGINE_KEY", GOOD_KEY)
    code = cli.main(["say", "Hi.", "-o", str(tmp_path / "x.wav"), "--remote",
                     "http://10.0.0.5:8000", "--dialect", "sailfish", "--api-key-env",
                     "ENGINE_KEY"])
    assert code == 2 and "plain http" in capsys.readouterr().err


def test_a_configured_endpoint_with_plain_http_elsewhere_fails_in_the_loader(comfy,
                                                                             monkeypatch):
    pack, stubs = comfy
    monkeypatch.setenv("GOOD_ENGINE_KEY", GOOD_KEY)
    write_endpoints(stubs, {"lan": {"urls": "http://192.168.1.20:8000", "dialect": "sailfish",
                                    "api_key_env": "GOOD_ENGINE_KEY"}})
    with pytest.raises(ValueError, match="remote endpoint 'lan': refusing to send the API key "
                                         "over plain http"):
        loader(pack).execute(**LOADER, remote="lan")


# ---------------------------------------------------------------- bounded answers
def bounded(call) -> tuple[Exception, int]:
    """``call()``'s error and the peak of Python allocations while it ran."""
    tracemalloc.start()
    try:
        with pytest.raises((RemoteError, AudioFormatError)) as error:
            call()
        return error.value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_audio_far_larger_than_the_request_can_produce_is_cut_off():
    with Recorder(streamed(wav_header() + b"data\xff\xff\xff\xff")) as server:
        client = RemoteSynthesizer(server.url, "sailfish", retries=0)
        error, peak = bounded(lambda: client.tts("Hi.", seed=1, max_new_tokens=FRAMES))
        limit = client.engine.answer_limit(FRAMES)
    assert "larger than this request can produce" in str(error)
    assert limit < 1 << 20 and peak < 8 * limit  # nowhere near the 128 MiB offered
    assert server.sent < 64 << 20  # the client left: the server could not push it all


def test_a_wav_chunk_header_flood_is_rejected_at_once():
    flood = wav_header()[:12] + b"junk\x00\x00\x00\x00" * 200_000
    with Recorder(streamed(flood)) as server:
        client = RemoteSynthesizer(server.url, "sailfish", retries=0)
        error, _ = bounded(lambda: client.tts("Hi.", seed=1, max_new_tokens=FRAMES))
    assert f"more than {MAX_CHUNKS} chunks" in str(error)


def test_wav_parsing_is_linear_whatever_the_chunking():
    """Fed 8 bytes at a time, a header is parsed once per byte: the parser never holds more
    than one unfinished chunk, and a huge chunk size is refused before it is buffered."""
    reader = WavReader("test")
    header = wav_header() + b"LIST" + struct.pack("<I", 1000) + b"x" * 1000
    for at in range(0, len(header), 8):
        reader.feed(header[at:at + 8])
        assert len(reader.header) < 1100
    samples = reader.feed(b"data\x10\x00\x00\x00" + b"\x00\x40" * 8)
    assert samples.shape == (8,) and reader.sample_rate == 44100
    with pytest.raises(AudioFormatError, match="chunk of"):
        WavReader("test").feed(wav_header()[:12] + b"LIST" + struct.pack("<I", 1 << 31))


def test_endless_json_and_sse_lines_are_cut_off():
    def endless_json(path, send):
        send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
        send(b'{"data": "')
        for _ in range(64 << 4):
            send(b"a" * (1 << 16))

    with Recorder(endless_json) as server:
        error, _ = bounded(lambda: RemoteSynthesizer(server.url, "auto", retries=0))
    assert "larger than this request can produce" in str(error)
    with Recorder(streamed(b"data: " + b"A" * 1000, "text/event-stream")) as server:
        client = RemoteSynthesizer(server.url, "sglang-omni", retries=0)
        error, _ = bounded(lambda: client.tts("Hi.", seed=1, max_new_tokens=FRAMES))
    assert "larger than this request can produce" in str(error)


def test_a_json_nesting_bomb_is_a_clear_error():
    with Recorder(lambda path, send: send(answer(200, b"[" * 200_000))) as server:
        with pytest.raises(AudioFormatError, match="not JSON"):
            RemoteSynthesizer(server.url, "auto", retries=0)


def test_errors_quote_a_configured_server_short_and_clean(comfy):
    """An engine's error body: at most MAX_QUOTE characters, no control characters, and the
    endpoint named by its configured name, not its URL."""
    pack, stubs = comfy
    body = ("\x1b[31mforbidden\r\nX-Injected: 1 " + "internal detail " * 200
            + "TAIL-OF-THE-BODY").encode()
    with Recorder(lambda path, send: send(answer(403, body, "text/plain"))) as server:
        write_endpoints(stubs, {"internal": {"urls": server.url}})
        with pytest.raises(ValueError) as error:  # the pack's RemoteUserError
            loader(pack).execute(**LOADER, remote="internal")
    message = str(error.value)
    assert message.startswith("endpoint 'internal'/v1/models: HTTP 403: [31mforbidden "
                              "X-Injected: 1 internal detail")
    assert server.url not in message and "TAIL-OF-THE-BODY" not in message
    assert "\x1b" not in message and "\r" not in message and "\n" not in message
    assert len(message) < MAX_QUOTE + 60


# ---------------------------------------------------------------- model files
def test_downloads_are_pinned_to_the_reviewed_revision(tmp_path, monkeypatch):
    import huggingface_hub

    from fish_core.loading import hub

    calls = []  # what would be asked of Hugging Face (nothing is written: resolve then fails)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda **kw: calls.append(kw))
    monkeypatch.setattr(hub, "unreachable", lambda url: None)  # no network probe here
    for name, variant in hub.VARIANTS.items():
        if variant.revision is None:  # not reviewed: not downloaded, and says how to
            with pytest.raises(hub.ModelNotFound, match="pins no reviewed revision"):
                hub.resolve(name, models_dir=tmp_path)
            continue
        assert re.fullmatch(r"[0-9a-f]{40}", variant.revision), name
        with pytest.raises(hub.ModelNotFound, match="lacks"):
            hub.resolve(name, models_dir=tmp_path)
        assert calls[-1]["repo_id"] == variant.repo_id
        assert calls[-1]["revision"] == variant.revision
    assert hub.VARIANTS["s2-pro"].revision == "1de9996b6be38b745688de084d87a5633f714e4e"
    assert len(calls) == sum(v.revision is not None for v in hub.VARIANTS.values())


def test_codec_pth_is_never_unpickled_by_torch(ckpt_dir, monkeypatch):
    """On any torch (those whose weights_only can be bypassed included: before 2.6,
    CVE-2025-32434; before 2.10, CVE-2026-24747) codec.pth is read by our restricted reader
    (codec/pth.py, tests/test_pth.py), never by torch.load."""
    from fish_core.codec import checkpoint as codec_checkpoint

    loads = []
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(a))
    for version in ("2.5.1+cu124", "2.9.1", "2.13.0", "1.13.1"):
        monkeypatch.setattr(torch, "__version__", version)
        assert codec_checkpoint.read_checkpoint(ckpt_dir / "codec.pth")
    assert loads == []


def test_a_remote_error_carries_no_url_of_an_unconfigured_host():
    """Only configured endpoints are ever reached, and a refused connection names the
    endpoint, not a body (there is none)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    transport = Transport(f"http://127.0.0.1:{port}", retries=0, name="gone")
    with pytest.raises(RemoteError, match=r"endpoint 'gone'/v1/models: ConnectionRefused"):
        transport.request("GET", "/v1/models", lambda r: r.body())


def test_a_huge_voice_list_is_quoted_short():
    from fish_core.speech.voices import Voice

    names = json.dumps({"data": [{"name": f"voice-{i}-" + "x" * 100} for i in range(20_000)]})

    def voices(path, send):  # the model list, asked first, is a 404: an engine without one
        send(answer(404, b"{}") if path.endswith("/models") else answer(200, names.encode()))

    with Recorder(voices) as server:
        client = RemoteSynthesizer(server.url, "sailfish", retries=0)
        with pytest.raises(ValueError, match="'nobody'") as error:
            client.tts("Hi.", Voice("nobody", [], 44100, 2048), seed=1, max_new_tokens=FRAMES)
    assert len(str(error.value)) < MAX_QUOTE + 400


@pytest.mark.parametrize("head", [
    "".join(f"X-Flood-{i}: y\r\n" for i in range(1000)),  # more headers than http.client takes
    "X-Long: " + "y" * (1 << 20) + "\r\n",  # one header line of 1 MiB
])
def test_a_header_flood_is_rejected(head):
    def respond(path, send):
        send(f"HTTP/1.1 200 OK\r\n{head}Content-Length: 2\r\n\r\n{{}}".encode())

    with Recorder(respond) as server:
        error, peak = bounded(lambda: RemoteSynthesizer(server.url, "auto", retries=0))
    assert "every attempt failed" in str(error) and "X-Flood" not in str(error)
    assert peak < 4 << 20
