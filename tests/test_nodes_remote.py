"""The nodes on remote models (issue 23), on the ComfyUI stand-in with stand-in engines
(engine_standins.py): the Model Loader picks the engine's model by name, Voice Encode
registers a voice only with the consent typed into it, Multi-Speaker follows Drama 3's rules
(16 speakers, voices for those connected, the model inventing the rest) while S2 keeps its
own, what a remote model cannot do is an error naming it, vLLM-Omni takes the seed and the
sampling settings per request, and Engine Voice names one of the engine's own voices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("aiohttp")

import comfy_stubs  # noqa: E402
from engine_standins import StandIn, pcm, sglang_app, tone, vllm_app  # noqa: E402
from fish_core.remote import endpoints  # noqa: E402

RATE = 44100  # S2's and Drama 3's wire rate: what a client made from an endpoint expects
LOADER = dict(model="unused", precision="auto", quantization="none", device="auto",
              compile=False, context_length=0, unload_after_minutes=0)
SAMPLING = dict(seed=3, temperature=0.8, top_p=0.8, top_k=30, max_new_tokens=8)
BOTH = ("s2-pro", "drama-3")


@pytest.fixture
def comfy(tmp_path, monkeypatch):
    """The pack on the ComfyUI stand-in, no endpoints file yet."""
    monkeypatch.delenv(endpoints.ENV_VAR, raising=False)
    stubs = comfy_stubs.install(tmp_path / "comfy")
    pack = comfy_stubs.load_pack("sailfish_nodes_remote")
    yield pack, stubs
    pack.nodes.remote.forget()
    comfy_stubs.unload_pack("sailfish_nodes_remote")
    comfy_stubs.uninstall()


def configure(stubs, **entries) -> None:
    """The operator's endpoints file (in ComfyUI's user directory)."""
    path = Path(stubs.folder_paths.get_user_directory()) / endpoints.FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"endpoints": entries}))


def run(pack, node_id, **inputs):
    return next(n for n in pack.nodes.NODES if n.id == node_id).execute(**inputs)


def load(pack, endpoint="engine", remote_model=""):
    (handle,) = run(pack, "SailfishModelLoader", **LOADER, remote=endpoint,
                    remote_model=remote_model)
    return handle


def clip(seconds: float = 0.3) -> dict:
    return {"waveform": torch.from_numpy(tone(RATE, int(RATE * seconds)))[None, None],
            "sample_rate": RATE}


def encode(pack, handle, name, consent=""):
    (voice,) = run(pack, "SailfishVoiceEncode", model=handle, audio=clip(),
                   transcript=f"{name}'s words.", name=name, consent=consent)
    return voice


# ---------------------------------------------------------------- model choice
def test_the_loader_picks_the_engines_model_by_name(comfy):
    pack, stubs = comfy
    with StandIn(sglang_app(RATE, [tone(RATE, 300)], model_ids=BOTH)) as engine:
        configure(stubs, engine={"urls": engine.url, "dialect": "sglang-omni"},
                  preset={"urls": engine.url, "dialect": "sglang-omni", "model": "drama-3"})
        first, drama = load(pack), load(pack, remote_model=" drama-3 ")
        assert drama.model == "drama-3" and first.model is None  # the handle keeps the name
        preset, chosen = load(pack, "preset"), load(pack, "preset", "s2-pro")
        for handle in (first, drama, preset, chosen):
            run(pack, "SailfishTTS", model=handle, text="Hi.", **SAMPLING)
        assert [b["model"] for b in engine.requests] == ["s2-pro", "drama-3", "drama-3",
                                                         "s2-pro"]
        sent = len(engine.requests)
        with pytest.raises(ValueError, match=r"^remote_model: model 'nope' is not served by "
                                             r"endpoint 'engine'; it serves 's2-pro', "
                                             r"'drama-3'$"):
            load(pack, remote_model="nope")
        with pytest.raises(ValueError, match="remote_model: expected a model name"):
            load(pack, remote_model=3)
        with pytest.raises(ValueError, match="remote_model: expected a model name of at most"):
            load(pack, remote_model="x" * 300)
        assert len(engine.requests) == sent  # nothing spoken


def test_a_workflow_chooses_only_a_model_name(comfy):
    """The loader has no input for where an engine is or which key it gets: remote_model is a
    name sent to the operator's endpoint, nothing else."""
    pack, _ = comfy
    loader = next(n for n in pack.nodes.NODES if n.id == "SailfishModelLoader")
    remote = [i.id for i in loader.inputs if i.id.startswith("remote")]
    assert remote == ["remote", "remote_model"]
    handle = pack.nodes.remote.RemoteHandle("engine", "drama-3")
    assert repr(handle) == "RemoteHandle(endpoint='engine', model='drama-3')"


# ---------------------------------------------------------------- consent
@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_voice_encode_registers_only_with_the_consent_typed_in(comfy, kind):
    pack, stubs = comfy
    app = (sglang_app(RATE, [tone(RATE, 300)], model_ids=BOTH) if kind == "sglang" else
           vllm_app(RATE, pcm(tone(RATE, 300)), stream=True))
    dialect = {"sglang": "sglang-omni", "vllm": "vllm-omni"}[kind]
    with StandIn(app) as engine:
        configure(stubs, engine={"urls": engine.url, "dialect": dialect})
        handle = load(pack)
        inline = encode(pack, handle, "Ann")  # no consent: the clip goes with each request
        assert app["registered"] == [] and inline.references
        run(pack, "SailfishTTS", model=handle, text="Inline.", voice=inline, **SAMPLING)
        body = engine.requests[-1]
        assert ("references" in body or "ref_audio" in body) and body.get("voice") != "Ann"
        stored = encode(pack, handle, "Ben", consent="  consent-rec-42 ")
        (fields,) = app["registered"]
        assert fields["consent"] == "consent-rec-42" and fields["name"] == "Ben"
        assert fields["ref_text"] == "Ben's words." and fields["audio_sample"][:4] == b"RIFF"
        assert stored.name == "Ben" and not stored.references
        run(pack, "SailfishTTS", model=handle, text="Stored.", voice=stored, **SAMPLING)
        body = engine.requests[-1]
        assert body["voice"] == "Ben" and "references" not in body and "ref_audio" not in body
        with pytest.raises(ValueError, match="letters, digits"):
            encode(pack, handle, "Ann Lee", consent="consent-rec-42")  # the engine's rule
        with pytest.raises(ValueError, match="consent: expected a text of at most 1000"):
            encode(pack, handle, "Cy", consent="x" * 1001)
        assert len(app["registered"]) == 1  # nothing more sent


def test_consent_is_ignored_where_no_store_checks_it(comfy):
    """A dialect whose voice store takes no consent (our serve, fish-speech): the consent is
    not used and the clip goes inline, as without it."""
    pack, stubs = comfy
    with StandIn(sglang_app(RATE, [tone(RATE, 300)])) as engine:
        configure(stubs, engine={"urls": engine.url, "dialect": "sailfish"})
        voice = encode(pack, load(pack), "Ann", consent="consent-rec-42")
        assert voice.references and engine.requests == []


# ---------------------------------------------------------------- Drama 3 in Multi-Speaker
SIX = ("Ann: [whispering] Did you hear that?\nBen: [laughs] Only the wind.\nCy: Not again.\n"
       "Dee: [shouting] Over here!\nEve: Quiet, all of you.\nFay: [sighs] Fine.")


def multi(pack, handle, script, voices, **options):
    speakers = {f"speaker_{i + 1}": v for i, v in enumerate(voices)}
    return run(pack, "SailfishMultiSpeaker", model=handle, script=script, pause=0.0,
               **SAMPLING, **speakers, **options)


def test_multi_speaker_on_drama3_takes_sixteen_speakers_and_invents_voices(comfy):
    pack, stubs = comfy
    with StandIn(sglang_app(RATE, [tone(RATE, 300)], model_ids=BOTH)) as engine:
        configure(stubs, engine={"urls": engine.url, "dialect": "sglang-omni"})
        drama = load(pack, remote_model="drama-3")
        voices = [encode(pack, drama, "Ann"), encode(pack, drama, "Ben")]
        mix, *tracks, timeline, _ = multi(pack, drama, SIX, voices)  # turn by turn (default)
        assert len(engine.requests) == 6
        assert [b["input"] for b in engine.requests][:2] == ["[whispering] Did you hear that?",
                                                             "[laughs] Only the wind."]
        assert ["references" in b for b in engine.requests] == [True, True] + [False] * 4
        assert mix["waveform"].shape[-1] == 6 * 300 and len(tracks) == 4
        assert torch.equal(sum(t["waveform"] for t in tracks), mix["waveform"][..., :]
                           * (torch.arange(6 * 300) < 4 * 300))  # speakers 5, 6: mix only
        segments = json.loads(timeline)["takes"][0]["segments"]
        assert [s["speaker"] for s in segments] == list(range(6))
        engine.requests.clear()
        multi(pack, drama, SIX, voices, turn_by_turn=False)  # the whole script at once
        (body,) = engine.requests
        assert body["input"].count("<|speaker:") == 6 and "[shouting] Over here!" in body["input"]
        assert len(body["references"]) == 2
        sixteen = "".join(f"<|speaker:{i}|>Line {i}." for i in range(16))
        engine.requests.clear()
        multi(pack, drama, sixteen, [])  # no voice at all: the model invents every one
        assert len(engine.requests) == 16
        with pytest.raises(ValueError, match=r"script: speaker 16 is past drama-3's 16 "
                                             r"speakers.*the model invents voices"):
            multi(pack, drama, sixteen + "<|speaker:16|>One too many.", voices)
        with pytest.raises(ValueError, match="speaker_2 is not connected"):
            multi(pack, drama, SIX, [voices[0], None, voices[1]])
        assert len(engine.requests) == 16  # refused before sending
        s2 = load(pack, remote_model="s2-pro")  # S2 keeps its rule: a voice for every speaker
        with pytest.raises(ValueError, match=r"script: speaker\(s\) Cy, Dee, Eve, Fay have no "
                                             r"reference voice.*Connect a voice for every"):
            multi(pack, s2, SIX, [encode(pack, s2, "Ann"), encode(pack, s2, "Ben")])
        assert len(engine.requests) == 16


def test_what_a_remote_model_cannot_do_names_it(comfy):
    """Voice Save needs codes: of an inline or a registered remote voice it is an error naming
    the model; a whole-script Drama 3 request needs every voice's clips; a saved voice file's
    codes cannot be sent (the engine's store must have its name)."""
    pack, stubs = comfy
    with StandIn(sglang_app(RATE, [tone(RATE, 300)], model_ids=BOTH)) as engine:
        configure(stubs, engine={"urls": engine.url, "dialect": "sglang-omni"})
        drama = load(pack, remote_model="drama-3")
        inline, stored = encode(pack, drama, "Ann"), encode(pack, drama, "Ben", "consent-7")
        for voice in (inline, stored):
            with pytest.raises(ValueError, match=rf"voice '{voice.name}' was made by the remote "
                                                 r"model drama-3.*cannot be saved"):
                run(pack, "SailfishVoiceSave", voice=voice, filename_prefix="x/v")
        assert not list(Path(stubs.folder_paths.models_dir).rglob("*.safetensors"))
        with pytest.raises(ValueError, match="voice 'Ben' is named from the engine's voice "
                                             "library; a whole-script drama-3 request"):
            multi(pack, drama, SIX, [inline, stored], turn_by_turn=False)
        assert engine.requests == []
        from fish_core.speech.voices import Voice
        from fish_core.text.prompt import Reference

        folder = Path(stubs.folder_paths.models_dir) / "fish_speech_voices"
        Voice("Saved", [Reference("Words.", torch.zeros(10, 4, dtype=torch.long))]).save(
            folder / "saved.safetensors")
        (codes,) = run(pack, "SailfishVoiceLoad", voice="saved.safetensors")
        with pytest.raises(ValueError, match="voice 'Saved' holds codes only .* which the "
                                             "remote model drama-3 cannot take"):
            run(pack, "SailfishTTS", model=drama, text="Hi.", voice=codes, **SAMPLING)
        assert engine.requests == []


# ---------------------------------------------------------------- vLLM-Omni sampling
@pytest.mark.parametrize("field,value", [("temperature", 0.7), ("top_p", 0.95), ("top_k", 20)])
def test_vllm_takes_sampling_and_the_seed_per_request(comfy, field, value):
    """vLLM-Omni 0.30 takes ``seed`` and ``extra_params: {temperature, top_p, top_k}`` per
    request: a node's settings reach it (they were refused before sending, once)."""
    pack, stubs = comfy
    with StandIn(vllm_app(RATE, pcm(tone(RATE, 300)), stream=True)) as engine:
        configure(stubs, engine={"urls": engine.url, "dialect": "vllm-omni"})
        handle = load(pack)
        changed = {**SAMPLING, field: value, "seed": 99}
        audio, _, _ = run(pack, "SailfishTTS", model=handle, text="Hi.", **changed)
        run(pack, "SailfishSubtitles", model=handle, voice=None, **changed,
            srt="1\n00:00:00,000 --> 00:00:01,000\nCue.\n")
        tts, cue = engine.requests
        assert audio["waveform"].shape[-1] == 300
        for body in (tts, cue):
            assert body["seed"] == 99 and body["extra_params"][field] == value
            assert set(body["extra_params"]) == {"temperature", "top_p", "top_k"}


def test_a_prompt_parses_the_endpoints_file_once(comfy):
    """The loader's check, the model load, the speaker rules and the model manager each look
    the endpoint up: the file (settled, as an operator's file is) is parsed once for them all,
    and again only once it changed."""
    import importlib
    import os
    import time

    pack, stubs = comfy
    found = importlib.import_module(pack.__name__ + ".fish_core.remote.endpoints")
    with StandIn(sglang_app(RATE, [tone(RATE, 300)])) as engine:
        configure(stubs, engine={"urls": engine.url, "dialect": "sglang-omni"})
        path = Path(stubs.folder_paths.get_user_directory()) / endpoints.FILE_NAME
        past = time.time() - 60
        os.utime(path, (past, past))
        before = found.parses
        handle = load(pack)
        run(pack, "SailfishTTS", model=handle, text="Hi.", **SAMPLING)
        run(pack, "SailfishTTS", model=handle, text="Hello.", **SAMPLING)
        assert found.parses - before == 1 and len(engine.requests) == 2


# ---------------------------------------------------------------- engine voices by name
def test_engine_voice_offers_the_engines_voices_and_names_one(comfy):
    pack, stubs = comfy
    app = vllm_app(RATE, pcm(tone(RATE, 300)), stream=True)
    app["voices"] += ["me", "narrator"]
    node = next(n for n in pack.nodes.NODES if n.id == "SailfishEngineVoice")
    [choices] = [i.options for i in node.inputs if i.id == "voice"]
    with StandIn(app) as engine:
        configure(stubs, engine={"urls": engine.url, "dialect": "vllm-omni"},
                  gone={"urls": "http://127.0.0.1:1", "dialect": "vllm-omni"})
        assert choices() == ["me", "narrator"]  # the engine that is down adds none
        handle = load(pack)
        (voice,) = run(pack, "SailfishEngineVoice", model=handle, voice="me")
        run(pack, "SailfishTTS", model=handle, text="Hi.", voice=voice, **SAMPLING)
        assert engine.requests[-1]["voice"] == "me" and "ref_audio" not in engine.requests[-1]
        with pytest.raises(ValueError, match=r"voice 'you' is not one of the voices of "
                                             r"endpoint 'engine'; it has 'me', 'narrator'"):
            run(pack, "SailfishEngineVoice", model=handle, voice="you")
    assert node.validate(voice="typed-by-hand") is True  # checked against the engine at run
    local = pack.nodes.manager.ModelHandle("tiny-s2")  # what the loader gives in local mode
    with pytest.raises(ValueError, match="^model: Engine Voice names a voice kept by a remote"):
        run(pack, "SailfishEngineVoice", model=local, voice="me")
