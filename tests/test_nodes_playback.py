"""Live playback from the nodes (``nodes/playback.py``, opened and closed by the node runner,
``nodes/runner.py``): the chunks of a generating node go to the browser tab that queued the
prompt, with a fake PromptServer; the route that switches it, its bounds, and the web
extension's side of the protocol.

The events' chunks must concatenate to the node's AUDIO (take 1) exactly before the 16-bit
rounding; listening must not change any output."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import sys
import types

import pytest
import torch
from aiohttp import web

from conftest import read_sizes, tone

SRT = ("1\n00:00:00,300 --> 00:00:00,900\nFirst cue.\n\n"
       "2\n00:00:01,500 --> 00:00:02,000\nSecond cue, a little longer.\n\n"
       "3\n00:00:02,050 --> 00:00:03,500\nThird.\n")


# ---------------------------------------------------------------- nodes: events to the browser
CLIENT, OTHER = "tab-1", "tab-2"
NODE_FAST = dict(seed=3, temperature=0.8, top_p=0.8, top_k=30, max_new_tokens=20)


class FakeServer:
    """What the pack uses of ComfyUI's PromptServer: ``client_id`` (the running prompt's),
    ``sockets``, ``send_sync`` (recorded), ``routes`` and ``last_node_id``."""

    def __init__(self):
        self.client_id, self.sockets, self.sent = None, {CLIENT: object(), OTHER: object()}, []
        self.last_node_id, self.routes = None, web.RouteTableDef()

    def send_sync(self, event, data, sid=None):
        self.sent.append((event, data, sid))


@pytest.fixture(scope="module")
def comfy(tmp_path_factory):
    """The pack loaded with ComfyUI stand-ins, a fake PromptServer and an executing node
    ``"7"`` of prompt ``"p1"``."""
    import comfy_stubs
    from conftest import fixtures_dir, link_checkpoint

    base = tmp_path_factory.mktemp("comfy")
    stubs = comfy_stubs.install(base)
    folder = link_checkpoint(base / "fish_speech")
    stubs.folder_paths.add_model_folder_path("fish_speech", str(folder))
    (folder / "qwen3-forced-aligner-0.6b").symlink_to(  # the word aligner, where users put it
        fixtures_dir() / "aligner" / "tiny-aligner", target_is_directory=True)
    server = FakeServer()
    context = types.SimpleNamespace(prompt_id="p1", node_id="7", list_index=None)
    execution = types.ModuleType("comfy_execution")
    execution.utils = types.SimpleNamespace(get_executing_context=lambda: context)
    saved = {k: sys.modules.get(k) for k in ("server", "comfy_execution", "comfy_execution.utils")}
    sys.modules.update({"server": types.SimpleNamespace(PromptServer=types.SimpleNamespace(
        instance=server)), "comfy_execution": execution,
        "comfy_execution.utils": execution.utils})
    pack = comfy_stubs.load_pack("sailfish_playback")
    nodes = {cls.GET_SCHEMA().node_id: cls
             for cls in asyncio.run(asyncio.run(pack.comfy_entrypoint()).get_node_list())}
    model = nodes["SailfishModelLoader"].execute(
        model="tiny-s2", precision="auto", quantization="none", device="auto", compile=False,
        context_length=0, unload_after_minutes=0).args[0]
    yield types.SimpleNamespace(pack=pack, playback=pack.nodes.playback,
                                runner=pack.nodes.runner, server=server, nodes=nodes,
                                model=model, stubs=stubs)
    pack.nodes.manager.MANAGER.unload()
    comfy_stubs.unload_pack("sailfish_playback")
    comfy_stubs.uninstall()
    for k, v in saved.items():
        sys.modules.pop(k) if v is None else sys.modules.__setitem__(k, v)


@pytest.fixture
def queued(comfy):
    """A prompt queued by CLIENT, which listens; afterwards nobody listens."""
    comfy.server.client_id, comfy.server.sent = CLIENT, []
    comfy.playback.listeners(comfy.server).set(CLIENT, True)
    comfy.playback.listeners(comfy.server).set(OTHER, True)
    yield comfy
    comfy.playback.listeners(comfy.server).set(CLIENT, False)
    comfy.playback.listeners(comfy.server).set(OTHER, False)
    comfy.stubs.mm.interrupt_current_processing(False)


@pytest.fixture
def floats(comfy, monkeypatch):
    """The float chunks handed to the sender, in order."""
    seen, original = [], comfy.playback.PlaybackSender.chunk

    def chunk(self, samples, sample_rate):
        seen.append(samples.clone())
        return original(self, samples, sample_rate)

    monkeypatch.setattr(comfy.playback.PlaybackSender, "chunk", chunk)
    return seen


def run(comfy, node_id, **inputs):
    return comfy.nodes[node_id].execute(model=comfy.model, **inputs).args


def events(server) -> list[dict]:
    """The live events sent, checked for type and addressee."""
    assert all(event == "sailfish.live" and sid == CLIENT for event, _, sid in server.sent)
    return [data for _, data, _ in server.sent]


def decoded(sent: list[dict]) -> torch.Tensor:
    """The chunk events' samples back as float (16-bit PCM / 32767, silence as zeros)."""
    pieces = []
    for e in sent:
        if e["state"] != "chunk":
            continue
        if e.get("silence"):
            pieces.append(torch.zeros(e["samples"]))
        else:
            pcm = torch.frombuffer(bytearray(base64.b64decode(e["pcm"])), dtype=torch.int16)
            assert pcm.shape[0] == e["samples"]
            pieces.append(pcm.float() / 32767)
    return torch.cat(pieces)


def check_stream(sent: list[dict], output: torch.Tensor, chunks: list[torch.Tensor]) -> None:
    """Start, chunks in order, done; the float chunks are the output (take 1) exactly and the
    16-bit payload is within rounding of it."""
    assert [e["seq"] for e in sent] == list(range(len(sent)))
    assert all(e["node"] == "7" and e["prompt_id"] == "p1" for e in sent)
    assert sent[0]["state"] == "start" and sent[-1]["state"] == "done"
    body = sent[1:-1]
    assert len(body) >= 2 and all(e["state"] == "chunk" for e in body)
    assert all(e["sample_rate"] == read_sizes().sample_rate for e in body)
    offsets = [e["offset"] for e in body]
    assert offsets == [0] + list(itertools.accumulate(e["samples"] for e in body))[:-1]
    assert sent[-1]["samples"] == output.shape[0] == sum(e["samples"] for e in body)
    assert torch.equal(torch.cat(chunks), output)
    assert (decoded(sent) - output.clamp(-1, 1)).abs().max() <= 0.5 / 32767 + 1e-7


def take_one(audio: dict, timeline: str) -> torch.Tensor:
    """Take 1 of an AUDIO batch, at its exact length (the rest is padding)."""
    length = json.loads(timeline)["takes"][0]["samples"]
    assert not audio["waveform"][0, 0, length:].any()
    return audio["waveform"][0, 0, :length]


@pytest.mark.parametrize("takes", [1, 3])
def test_tts_node_streams_take_one(queued, floats, takes):
    audio, timeline, _ = run(queued, "SailfishTTS", text="Speak while you work. Then stop.",
                          takes=takes, **NODE_FAST)
    check_stream(events(queued.server), take_one(audio, timeline), floats)


def test_the_player_gets_take_ones_words_before_done(queued, floats):
    audio, timeline, words = run(queued, "SailfishTTS", text="Speak while you work.",
                                 words="English", takes=2, **NODE_FAST)
    sent = events(queued.server)
    assert [e["state"] for e in sent[-2:]] == ["words", "done"]
    shown = sent[-2]["words"]
    assert [w["text"] for w in shown] == ["Speak", "while", "you", "work"]
    assert shown == [{"text": w["text"], "start": w["start"], "end": w["end"]}
                     for w in words["takes"][0]["words"]]
    audio_events = [dict(e, seq=i) for i, e in enumerate(e for e in sent if e["state"] != "words")]
    check_stream(audio_events, take_one(audio, timeline), floats)  # the audio as without words


def test_voice_clone_node_streams(queued, floats):
    t = torch.arange(24000) / 24000
    reference = {"waveform": (0.3 * torch.sin(2 * torch.pi * 200 * t))[None, None],
                 "sample_rate": 24000}
    audio, timeline, _ = run(queued, "SailfishVoiceClone", reference_audio=reference,
                          reference_text="A reference.", text="In that voice, live.",
                          **NODE_FAST)
    check_stream(events(queued.server), take_one(audio, timeline), floats)


def test_multi_speaker_node_streams_the_mix_with_pauses(queued, floats):
    voice = run(queued, "SailfishVoiceEncode", audio={
        "waveform": tone(read_sizes().sample_rate)[None, None],
        "sample_rate": read_sizes().sample_rate}, transcript="A short reference.",
        name="Alice")[0]
    queued.server.sent = []
    outputs = run(queued, "SailfishMultiSpeaker", script="Alice: One.\nAlice: Two.\nAlice: Three.",
                  pause=0.3, speaker_1=voice, takes=2, **NODE_FAST)
    sent = events(queued.server)
    check_stream(sent, take_one(outputs[0], outputs[-2]), floats)
    gap = round(0.3 * read_sizes().sample_rate)
    assert sum(1 for e in sent if e.get("silence") and e["samples"] == gap) == 2


def test_subtitles_node_streams_the_timeline_with_gaps(queued, floats):
    audio, _, _, timeline, _ = run(queued, "SailfishSubtitles", srt=SRT, **NODE_FAST)
    sent = events(queued.server)
    check_stream(sent, take_one(audio, timeline), floats)
    assert sent[1].get("silence") and sent[1]["samples"] == round(0.3 * read_sizes().sample_rate)


@pytest.mark.parametrize("who", ["no client id", "not listening", "not connected", "elsewhere"])
def test_nothing_is_sent_unless_the_queuing_client_listens(queued, monkeypatch, who):
    made = []  # the pack's own copy of the layout: none is made, no job runs live
    layout = sys.modules[queued.pack.__name__ + ".fish_core.speech.layout"].TakeLayout
    monkeypatch.setattr(layout, "__init__", lambda self, *a: made.append(a) or None)
    if who == "no client id":
        queued.server.client_id = None  # API use without a websocket
    elif who == "not listening":
        queued.playback.listeners(queued.server).set(CLIENT, False)
    elif who == "not connected":
        queued.server.client_id = "tab-closed"
        queued.playback.listeners(queued.server).set("tab-closed", True)
    else:  # outside ComfyUI: no PromptServer at all
        monkeypatch.setitem(sys.modules, "server", None)
    audio, _, _ = run(queued, "SailfishTTS", text="Quietly.", **NODE_FAST)
    assert queued.server.sent == [] and made == []  # no live decode either
    monkeypatch.undo()
    queued.playback.listeners(queued.server).set(CLIENT, True)
    queued.server.client_id = CLIENT
    heard, _, _ = run(queued, "SailfishTTS", text="Quietly.", **NODE_FAST)
    assert torch.equal(heard["waveform"], audio["waveform"])  # listening changes nothing
    assert queued.server.sent


def test_cancel_closes_the_stream(queued):
    mm = queued.stubs.mm
    original = queued.server.send_sync

    def press_cancel_after_first_chunk(event, data, sid=None):
        original(event, data, sid)
        if data["state"] == "chunk":
            mm.interrupt_current_processing(True)

    queued.server.send_sync = press_cancel_after_first_chunk
    try:
        with pytest.raises(mm.InterruptProcessingException):
            run(queued, "SailfishTTS", text=" ".join(["Cancel me."] * 20),
                **{**NODE_FAST, "max_new_tokens": 64})
    finally:
        del queued.server.send_sync
    sent = events(queued.server)
    assert [e["state"] for e in sent][-1] == "cancelled"
    assert [e["seq"] for e in sent] == list(range(len(sent)))


def test_a_failing_sender_never_fails_the_node(queued, monkeypatch):
    def broken(event, data, sid=None):
        raise RuntimeError("socket gone")

    monkeypatch.setattr(queued.server, "send_sync", broken)
    audio, _, _ = run(queued, "SailfishTTS", text="Still speaking.", **NODE_FAST)
    monkeypatch.undo()
    queued.playback.listeners(queued.server).set(CLIENT, False)
    plain, _, _ = run(queued, "SailfishTTS", text="Still speaking.", **NODE_FAST)
    assert torch.equal(audio["waveform"], plain["waveform"])


# ---------------------------------------------------------------- the route
def post(handler, body, length=None, headers=None, remote="127.0.0.1"):
    raw = json.dumps(body).encode()

    async def read_json():
        return json.loads(raw)

    request = types.SimpleNamespace(content_length=len(raw) if length is None else length,
                                    json=read_json, headers=headers or {}, remote=remote)
    response = asyncio.run(handler(request))
    return response.status, json.loads(response.text)


def live_route(comfy):
    (handler,) = [r.handler for r in comfy.server.routes
                  if r.method == "POST" and r.path == "/sailfish/live"]
    return handler


class Socket:
    """One of ComfyUI's websockets as aiohttp keeps it: its request knows the peer."""

    def __init__(self, peer: str):
        self._req = types.SimpleNamespace(remote=peer)


def test_the_route_switches_listening(comfy, monkeypatch):
    handler = live_route(comfy)
    monkeypatch.setitem(comfy.server.sockets, "abc-1", Socket("127.0.0.1"))
    monkeypatch.setitem(comfy.server.sockets, "abc", Socket("127.0.0.1"))
    listeners = comfy.playback.listeners(comfy.server)
    assert post(handler, {"client_id": "abc-1", "listen": True}) == (200, {"listen": True})
    assert "abc-1" in listeners
    assert post(handler, {"client_id": "abc-1", "listen": False}) == (200, {"listen": False})
    assert "abc-1" not in listeners
    for bad in ({"client_id": "x" * 65, "listen": True}, {"client_id": "a b", "listen": True},
                {"client_id": "abc", "listen": "yes"}, {"listen": True}, ["abc", True]):
        status, answer = post(handler, bad)
        assert status == 400 and "client_id" in answer["error"]
    status, _ = post(handler, {"client_id": "abc", "listen": True}, length=10_000)
    assert status == 413 and "abc" not in listeners
    for foreign in ({"Host": "127.0.0.1:8188", "Origin": "https://evil.example"},
                    {"Host": "127.0.0.1:8188", "Sec-Fetch-Site": "cross-site"}):
        status, answer = post(handler, {"client_id": "abc", "listen": True}, headers=foreign)
        assert status == 403 and "origin" in answer["error"] and "abc" not in listeners


def test_listeners_are_bounded_and_never_evicted(comfy):
    listeners = comfy.playback.Listeners(limit=4, per_peer=2)
    listeners.set("tab", True, "10.0.0.1")
    for i in range(2):
        listeners.set(f"c{i}", True, "10.0.0.9")
    with pytest.raises(comfy.playback.Refused, match="this peer has 2"):
        listeners.set("c2", True, "10.0.0.9")
    listeners.set("d0", True, "10.0.0.8")
    with pytest.raises(comfy.playback.Refused, match="too many"):
        listeners.set("e0", True, "10.0.0.7")
    assert all(i in listeners for i in ("tab", "c0", "c1", "d0"))  # nobody was evicted
    listeners.set("e0", True, "10.0.0.7", open_ids={"tab", "e0"})  # closed sockets dropped
    assert "tab" in listeners and "e0" in listeners and "c0" not in listeners


def test_registrations_need_an_open_socket_of_the_same_peer(comfy, monkeypatch):
    """A LAN peer (not a browser tab) can neither register ids without a ComfyUI socket, nor
    take over or withdraw a tab's id, nor fill the set (it is bounded per peer)."""
    handler = live_route(comfy)
    listeners = comfy.playback.listeners(comfy.server)
    tab, lan = "127.0.0.1", "192.168.1.50"
    monkeypatch.setitem(comfy.server.sockets, "tab-9", Socket(tab))
    assert post(handler, {"client_id": "tab-9", "listen": True}, remote=tab)[0] == 200
    status, answer = post(handler, {"client_id": "nobody", "listen": True}, remote=lan)
    assert status == 409 and "websocket" in answer["error"] and "nobody" not in listeners
    status, _ = post(handler, {"client_id": "tab-9", "listen": False}, remote=lan)
    assert status == 403 and "tab-9" in listeners
    monkeypatch.setitem(comfy.server.sockets, "tab-8", Socket(tab))
    assert post(handler, {"client_id": "tab-8", "listen": True}, remote=lan)[0] == 403
    for i in range(comfy.playback.MAX_PER_PEER + 5):  # the LAN peer's own sockets
        monkeypatch.setitem(comfy.server.sockets, f"lan-{i}", Socket(lan))
        status, _ = post(handler, {"client_id": f"lan-{i}", "listen": True}, remote=lan)
        assert status == (200 if i < comfy.playback.MAX_PER_PEER else 429)
    assert "tab-9" in listeners  # the tab's registration stays
    for i in range(comfy.playback.MAX_PER_PEER):
        assert post(handler, {"client_id": f"lan-{i}", "listen": False}, remote=lan)[0] == 200
    assert post(handler, {"client_id": "tab-9", "listen": False}, remote=tab)[0] == 200


# ---------------------------------------------------------------- the web extension's contract
def test_the_extension_speaks_the_servers_protocol(comfy):
    """The JS uses the event type, route and setting id the server and locales use."""
    import comfy_stubs

    js = (comfy_stubs.ROOT / "web" / "js" / "sailfish_playback.js").read_text(encoding="utf-8")
    constants = dict(re.findall(r'^const (\w+) = "([^"]*)";', js, flags=re.M))
    assert constants["EVENT"] == comfy.playback.EVENT
    assert constants["ROUTE"] == comfy.playback.ROUTE
    for state in ("start", "chunk", "done", "cancelled", "error"):
        assert f'"{state}"' in js
    for lang in ("en", "zh"):
        settings = json.loads((comfy_stubs.ROOT / "locales" / lang / "settings.json")
                              .read_text(encoding="utf-8"))
        entry = settings[constants["SETTING"].replace(".", "_")]
        assert entry["name"] and entry["tooltip"]
        if lang == "en":
            assert f'name: "{entry["name"]}"' in js
