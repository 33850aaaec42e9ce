"""The remote backend against our own ``serve`` on the tiny checkpoint, over real loopback
sockets: tts, dialogue and subtitles through ``RemoteSynthesizer`` sound exactly as the local
engine does for the same seed (after the wire's 16-bit rounding), in every dialect that
carries the seed; voices as references, registered once, or named from the server's library."""


import numpy as np
import pytest
import torch

pytest.importorskip("aiohttp")

from conftest import served, tone  # noqa: E402
from fish_core.params import batch_seed  # noqa: E402
from fish_core.remote.engine import Reply  # noqa: E402
from fish_core.remote import RemoteError, RemoteSynthesizer, RemoteUserError  # noqa: E402
from fish_core.serve.http import formats  # noqa: E402
from fish_core.serve.limits import Limits  # noqa: E402
from fish_core.speech.results import Batch  # noqa: E402
from fish_core.speech.timeline import join_pieces  # noqa: E402

KEY = "remote-key-42"
FAST = dict(max_new_tokens=12, temperature=0.8, top_p=0.8, top_k=30)
LIMITS = Limits(max_new_tokens=64, max_reference_seconds=5.0, timeout_seconds=120.0)


def wire(wave: torch.Tensor) -> torch.Tensor:
    """``wave`` as our server sends it: 16-bit PCM, read back as float."""
    return torch.from_numpy(np.frombuffer(formats.pcm16(wave), dtype="<i2") / 32768.0).float()


@pytest.fixture(scope="module")
def synth(tiny_synth):
    return tiny_synth


@pytest.fixture(scope="module")
def server(synth, voices_dir):
    with served(synth, voices_dir, api_key=KEY, limits=LIMITS) as running:
        yield running


def remote(server, synth, dialect="sailfish", **options) -> RemoteSynthesizer:
    return RemoteSynthesizer(server.url, dialect=dialect, api_key=KEY,
                              sample_rate=synth.sample_rate, read_timeout=120, **options)


def test_detects_our_server(server, synth):
    assert remote(server, synth, "auto").dialect.name == "sailfish"


@pytest.mark.parametrize("dialect", ["sailfish", "fish-speech"])
def test_tts_equals_local(server, synth, dialect):
    text = "Hello from far away."
    local = synth.tts(text, seed=5, **FAST)
    got = remote(server, synth, dialect).tts(text, seed=5, **FAST)
    assert got.sample_rate == local.sample_rate and got.seed == 5
    assert torch.equal(got.waveform, wire(local.waveform))


def test_takes_equal_local_takes(server, synth):
    local = synth.tts("Two takes.", seed=9, takes=2, **FAST)
    got = remote(server, synth).tts("Two takes.", seed=9, takes=2, **FAST)
    assert [s.seed for s in got] == [s.seed for s in local]
    for g, t in zip(got, local):
        assert torch.equal(g.waveform, wire(t.waveform))


def test_on_chunk_is_live_and_concatenates_to_the_result(server, synth):
    """As locally: ``on_chunk`` gets take 1's waveform (the timeline for subtitles) in pieces as
    the engine's audio arrives, laid out by the shared layout, concatenating to the result."""
    client, pieces = remote(server, synth), {"tts": [], "srt": []}

    def record(call):
        return lambda samples, rate: pieces[call].append((samples, rate))

    takes = client.tts("Two takes. [pause:300ms] And a pause.", seed=9, takes=2,
                       on_chunk=record("tts"), **FAST)
    srt = "1\n00:00:00,500 --> 00:00:01,000\nA cue.\n"
    cues = client.subtitles(srt, seed=4, on_chunk=record("srt"), **FAST)
    for call, result in (("tts", takes[0]), ("srt", cues)):
        assert len(pieces[call]) > 1  # the silences and the audio as they come
        assert {rate for _, rate in pieces[call]} == {synth.sample_rate}
        assert torch.equal(torch.cat([p for p, _ in pieces[call]]), result.waveform)


def test_voice_clone_equals_local(server, synth):
    ref = tone(synth.sample_rate, 0.6, 330.0)
    local = synth.tts("In my voice.", synth.encode_voice(ref, "Reference words.",
                                                         sample_rate=synth.sample_rate),
                      seed=3, **FAST)
    client = remote(server, synth)
    voice = client.encode_voice(ref, "Reference words.", sample_rate=synth.sample_rate)
    assert torch.equal(client.tts("In my voice.", voice, seed=3, **FAST).waveform,
                       wire(local.waveform))


def test_a_clip_is_written_once_however_often_it_is_sent(server, synth, monkeypatch):
    """The reference WAV of a voice made here is written once per clip, and the same bytes go
    with every request (three takes, then a dialogue turn)."""
    from fish_core.audio import files

    writes = []
    soundfile = files.import_soundfile()

    class Counting:  # soundfile, its writes counted (the server here reads the uploads)
        def __getattr__(self, name):
            return getattr(soundfile, name)

        def write(self, *args, **kwargs):
            writes.append(1)
            return soundfile.write(*args, **kwargs)

    monkeypatch.setattr(files, "import_soundfile", Counting)
    client = remote(server, synth)
    voice = client.encode_voice(tone(synth.sample_rate), "A short reference.", name="me",
                                sample_rate=synth.sample_rate)
    sent = []
    body = client.dialect.body
    monkeypatch.setattr(client.dialect, "body",
                        lambda *a: sent.append(body(*a)) or sent[-1])
    client.tts("Written once.", voice, seed=4, takes=3, **FAST)
    client.dialogue("A: Sent again.", {"A": voice}, seed=4, **FAST)
    assert len(writes) == 1 and len(sent) == 4
    assert len({b["references"][0]["audio"] for b in sent}) == 1


def test_registered_voice_is_reused_by_id(server, synth):
    ref = tone(synth.sample_rate, 0.6, 440.0)
    local = synth.tts("Registered.", synth.encode_voice(ref, "Words.",
                                                        sample_rate=synth.sample_rate),
                      seed=4, **FAST)
    client = remote(server, synth, register_voices=True)
    voice = client.encode_voice(ref, "Words.", sample_rate=synth.sample_rate)
    first = client.tts("Registered.", voice, seed=4, **FAST)
    again = client.tts("Registered.", voice, seed=4, **FAST)
    names = client.dialect.voice_names(client.transport)
    assert sum(n.startswith("sailfish-") for n in names) == 1, names
    assert torch.equal(first.waveform, wire(local.waveform))
    assert torch.equal(again.waveform, first.waveform)


def test_saved_voice_is_named_from_the_library(server, synth, voices_dir):
    from fish_core.speech.voices import Voice

    saved = Voice.load(voices_dir / "alice.safetensors")
    local = synth.tts("Alice speaks.", saved, seed=6, **FAST)
    got = remote(server, synth).tts("Alice speaks.", saved, seed=6, **FAST)
    assert torch.equal(got.waveform, wire(local.waveform))
    with pytest.raises(ValueError, match="'nobody'.*alice"):
        remote(server, synth).tts("Hi.", Voice("nobody", saved.clips), seed=1, **FAST)


def test_dialogue_is_one_local_tts_per_turn(server, synth):
    script = "Ann: Good morning.\nBen: Hello there.\nAnn: Bye."
    a = synth.encode_voice(tone(synth.sample_rate, 0.5, 200.0), "Ann talks.", name="Ann",
                           sample_rate=synth.sample_rate)
    client = remote(server, synth)
    ra = client.encode_voice(tone(synth.sample_rate, 0.5, 200.0), "Ann talks.", name="Ann",
                             sample_rate=synth.sample_rate)
    rb = client.encode_voice(tone(synth.sample_rate, 0.5, 300.0), "Ben talks.", name="Ben",
                             sample_rate=synth.sample_rate)
    b = synth.encode_voice(tone(synth.sample_rate, 0.5, 300.0), "Ben talks.", name="Ben",
                           sample_rate=synth.sample_rate)
    got = client.dialogue(script, [ra, rb], pause=0.1, seed=11, **FAST)
    turns = [("Good morning.", a), ("Hello there.", b), ("Bye.", a)]
    locals_ = [synth.tts(text, v, seed=batch_seed(11, i), **FAST) for i, (text, v) in
               enumerate(turns)]
    results = [client._result(Reply(wire(s.waveform), 0.0), Batch(f"<|speaker:{k}|>{t}", k))
               for s, (t, _), k in zip(locals_, turns, [0, 1, 0])]
    expected = join_pieces([wire(s.waveform) for s in locals_], results, synth.sample_rate, 0.1)
    assert torch.equal(got.waveform, expected.waveform)
    assert [s.speaker for s in got.segments] == [0, 1, 0]
    tracks = got.tracks(2)
    assert torch.equal(tracks.sum(0), got.waveform)


def test_subtitles_are_one_local_tts_per_cue(server, synth):
    srt = ("1\n00:00:00,000 --> 00:00:01,000\nFirst cue.\n\n2\n00:00:02,000 --> 00:00:03,000\n"
           "Second cue.\n")
    got = remote(server, synth).subtitles(srt, seed=21, **FAST)
    rate = synth.sample_rate
    for i, (cue, text) in enumerate(zip(got.cues, ["First cue.", "Second cue."])):
        local = wire(synth.tts(text, seed=batch_seed(21, i), **FAST).waveform)
        start = round(cue.start * rate)
        assert torch.equal(got.waveform[start:start + local.shape[0]], local)
    assert got.waveform.shape[0] >= round(3.0 * rate)


def test_stream_concatenates_to_tts(server, synth):
    client = remote(server, synth)
    whole = client.tts("A streamed sentence.", seed=8, **FAST).waveform
    with client.stream("A streamed sentence.", seed=8, **FAST) as stream:
        chunks = list(stream)
    assert len(chunks) >= 1 and torch.equal(torch.cat(chunks), whole)


def test_progress_and_cancel(server, synth):
    seen = []
    remote(server, synth).tts("Progress please.", seed=2, on_progress=lambda d, t:
                              seen.append((d, t)), **FAST)
    assert seen and seen[-1][0] == seen[-1][1] and all(d <= t for d, t in seen)
    from fish_core.params import Cancelled

    with pytest.raises(Cancelled):
        remote(server, synth).tts("Never mind.", seed=2, cancel=lambda: True, **FAST)


def test_errors_name_the_endpoint_and_field(server, synth):
    with pytest.raises(RemoteUserError, match=rf"{server.url}/v1/audio/speech: HTTP 400: "
                                              r"max_new_tokens"):
        remote(server, synth).tts("Too long.", seed=1, max_new_tokens=LIMITS.max_new_tokens + 1)
    with pytest.raises(RemoteError, match="401"):
        RemoteSynthesizer(server.url, dialect="sailfish", api_key="wrong",
                           sample_rate=synth.sample_rate).tts("Hi.", seed=1, **FAST)


def test_cli_say_and_srt_through_remote(server, synth, tmp_path, monkeypatch):
    import soundfile as sf

    from fish_core import cli
    from fish_core.audio.files import save_audio

    monkeypatch.setenv("TEST_ENGINE_KEY", KEY)
    engine = ["--remote", server.url, "--dialect", "auto", "--api-key-env", "TEST_ENGINE_KEY",
              "--max-new-tokens", str(FAST["max_new_tokens"]), "--seed", "13"]
    assert cli.main(["say", "Hello over the wire.", "-o", str(tmp_path / "say.wav"),
                     *engine]) == 0
    api = remote(server, synth).tts("Hello over the wire.", seed=13, **FAST)
    save_audio(tmp_path / "api.wav", api.waveform, api.sample_rate)
    assert np.array_equal(sf.read(tmp_path / "say.wav")[0], sf.read(tmp_path / "api.wav")[0])
    (tmp_path / "key").write_text(KEY + "\n")
    srt = tmp_path / "s.srt"
    srt.write_text("1\n00:00:00,000 --> 00:00:01,000\nHi.\n\n2\n00:00:01,500 --> "
                   "00:00:02,000\nBye.\n")
    key_file = ["--api-key-file", str(tmp_path / "key")]
    assert cli.main(["srt", str(srt), "-o", str(tmp_path / "s.wav"), "--remote", server.url,
                     *key_file, "--max-new-tokens", "8", "--seed", "2"]) == 0
    assert sf.info(tmp_path / "s.wav").duration >= 2.0
    assert cli.main(["say", "No key.", "-o", str(tmp_path / "x.wav"), "--remote", server.url,
                     "--dialect", "sailfish"]) == 2  # the server's 401, one line


# ---------------------------------------------------------------- ComfyUI nodes, remote loader
@pytest.fixture(scope="module")
def nodes_env(tmp_path_factory):
    import comfy_stubs

    with (comfy_stubs.pack_in_comfy(tmp_path_factory.mktemp("comfy"), "sailfish_remote")
            as (pack, stubs)):
        yield pack, stubs
        pack.nodes.remote.forget()


def run_node(pack, node_id, **inputs):
    node = next(n for n in pack.nodes.NODES if n.id == node_id)
    return node.execute(**inputs)


def endpoints_file(stubs, endpoints: dict) -> None:
    """The operator's endpoints file in ComfyUI's user directory (of the stand-in)."""
    import json
    from pathlib import Path

    path = Path(stubs.folder_paths.get_user_directory()) / "sailfish" / "endpoints.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"endpoints": endpoints}))


LOADER = dict(model="unused", precision="auto", quantization="none", device="auto",
              compile=False, context_length=0, unload_after_minutes=0)


def test_nodes_through_the_remote_loader(nodes_env, server, synth, monkeypatch):
    pack, stubs = nodes_env
    monkeypatch.setenv("NODE_ENGINE_KEY", KEY)
    endpoints_file(stubs, {"engine": {"urls": [server.url], "dialect": "auto",
                                      "api_key_env": "NODE_ENGINE_KEY"}})
    (handle,) = run_node(pack, "SailfishModelLoader", **LOADER, remote="engine")
    assert KEY not in repr(handle) and server.url not in repr(handle)  # the name only
    sampling = dict(seed=7, **FAST)
    audio, timeline = run_node(pack, "SailfishTTS", model=handle, text="Node on a remote.",
                               **sampling)
    local = synth.tts("Node on a remote.", **sampling)
    assert audio["sample_rate"] == synth.sample_rate
    assert torch.equal(audio["waveform"][0, 0], wire(local.waveform))
    reference = {"waveform": tone(synth.sample_rate, 0.6)[None, None], "sample_rate":
                 synth.sample_rate}
    cloned = run_node(pack, "SailfishVoiceClone", model=handle, reference_audio=reference,
                      reference_text="Reference words.", text="Cloned.", **sampling)[0]
    local = synth.tts("Cloned.", synth.encode_voice(reference, "Reference words."), **sampling)
    assert torch.equal(cloned["waveform"][0, 0], wire(local.waveform))
    (voice,) = run_node(pack, "SailfishVoiceEncode", model=handle, audio=reference,
                        transcript="Reference words.", name="Ann")
    with pytest.raises(ValueError, match="cannot be saved"):
        run_node(pack, "SailfishVoiceSave", voice=voice, filename_prefix="x/ann")
    outputs = run_node(pack, "SailfishMultiSpeaker", model=handle, script="Ann: One.\nAnn: Two.",
                       pause=0.0, speaker_1=voice, **sampling)
    assert outputs[0]["waveform"].shape[2] == outputs[1]["waveform"].shape[2] > 0
    srt = "1\n00:00:00,000 --> 00:00:01,000\nCue.\n"
    sub = run_node(pack, "SailfishSubtitles", model=handle, srt=srt, voice=voice, **sampling)
    assert sub[0]["waveform"].shape[2] >= synth.sample_rate and "-->" in sub[1]


def test_remote_loader_errors_name_the_field(nodes_env, server, monkeypatch):
    pack, stubs = nodes_env
    monkeypatch.delenv("NOT_SET_KEY_VAR", raising=False)
    endpoints_file(stubs, {"unset": {"urls": server.url, "api_key_env": "NOT_SET_KEY_VAR"},
                           "keyless": {"urls": server.url, "dialect": "auto"}})
    with pytest.raises(ValueError, match="'unset'.*NOT_SET_KEY_VAR"):
        run_node(pack, "SailfishModelLoader", **LOADER, remote="unset")
    with pytest.raises(ValueError, match="endpoint 'keyless'/v1/models: HTTP 401: missing or "
                                         "wrong API key"):  # named by its configured name
        run_node(pack, "SailfishModelLoader", **LOADER, remote="keyless")


def test_finishing_happens_locally_and_pauses_split_the_requests(server, synth):
    """The remote synthesizer takes the finishing keywords: each piece between pause tags is
    a request of its own (seeded like a local batch), laid out with the exact silence, at the
    speaking rate and loudness, on the audio the engine returned."""
    client, sent = remote(server, synth), []
    original = client._request

    def spy(text, *args, **kwargs):
        sent.append(text)
        return original(text, *args, **kwargs)

    client._request = spy
    sr = synth.sample_rate
    got = client.tts("Hello there. [pause:600ms] Goodbye now.", seed=5, **FAST)
    assert sent == ["Hello there.", "Goodbye now."]
    a, b = got.segments
    assert b.start_sample - a.end_sample == round(0.6 * sr)
    assert not got.waveform[a.end_sample:b.start_sample].any()
    first = wire(synth.tts("Hello there.", seed=5, **FAST).waveform)
    assert torch.equal(got.waveform[:first.shape[0] - round(0.01 * sr)],
                       first[:first.shape[0] - round(0.01 * sr)])  # before its fade-out
    lexicon = __import__("fish_core.text.lexicon", fromlist=["Lexicon"]).Lexicon.parse(
        "there\tthair\n")
    sent.clear()
    finished = client.tts("Hello there.", seed=5, lexicon=lexicon, speed=1.25,
                          loudness=-30, **FAST)
    assert sent == ["Hello thair."]
    assert finished.finishing["speed"] == 1.25 and "loudness" in finished.finishing
    with client.stream("One. [pause:250ms] Two.", seed=2, **FAST) as stream:
        streamed = torch.cat(list(stream))
    whole = client.tts("One. [pause:250ms] Two.", seed=2, **FAST)
    assert torch.equal(streamed, whole.waveform)
