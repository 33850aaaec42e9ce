"""The generating nodes (``nodes/speech.py``): TTS, Voice Clone, Multi-Speaker, Subtitles and
takes, with stand-ins for ComfyUI (tests/comfy_stubs.py) and the tiny checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import read_sizes
from node_env import FAST, check_audio, loaded, run_v1, run_v3


# ---------------------------------------------------------------- the nodes
def test_tts_v3_and_v1_agree(env, model):
    a = run_v3(env, "SailfishTTS", model=model, text="Hello there. How are you?", **FAST)[0]
    b = run_v1(env, "SailfishTTS", model=model, text="Hello there. How are you?", **FAST)[0]
    check_audio(a)
    assert torch.equal(a["waveform"], b["waveform"])  # same seed, same audio


def test_tts_with_voice(env, model, voice):
    assert voice.name == "Alice" and voice.frames > 0
    check_audio(run_v1(env, "SailfishTTS", model=model, text="Speak as Alice.", voice=voice,
                       **FAST)[0])


def test_voice_clone(env, model, reference):
    audio, _, _ = run_v3(env, "SailfishVoiceClone", model=model, reference_audio=reference,
                      reference_text="A short test sentence.", text="Now in that voice.",
                      **FAST)
    check_audio(audio)


def test_multi_speaker_maps_names_to_voices(env, model, voice, reference):
    bob = run_v1(env, "SailfishVoiceEncode", model=model, audio=reference,
                 transcript="Another sentence.", name="Bob")[0]
    script = "Alice: Hi Bob!\nBob: Hello Alice.\nAlice: Bye."
    audio, *tracks, timeline, _ = run_v3(env, "SailfishMultiSpeaker", model=model, script=script,
                                      pause=0.0, speaker_1=voice, speaker_2=bob, **FAST)
    check_audio(audio)
    assert len(tracks) == 4 and all(t["waveform"].shape == audio["waveform"].shape for t in tracks)
    assert torch.equal(sum(t["waveform"] for t in tracks), audio["waveform"])
    assert tracks[0]["waveform"].abs().max() > 0 and tracks[1]["waveform"].abs().max() > 0
    assert [s["speaker"] for s in json.loads(timeline)["takes"][0]["segments"]] == [0, 1, 0]
    paused, *_ = run_v1(env, "SailfishMultiSpeaker", model=model, script=script, pause=0.25,
                       speaker_1=voice, speaker_2=bob, **FAST)
    length = check_audio(paused, frames=False)
    gap = round(0.25 * read_sizes().sample_rate)
    assert any((length - k * gap) % read_sizes().frame_length == 0
               for k in range(1, 4))  # 3 turns: 2 pauses


def test_multi_speaker_errors_name_the_field(env, model, voice):
    with pytest.raises(ValueError, match="script: .*Carol"):
        run_v1(env, "SailfishMultiSpeaker", model=model, script="Alice: Hi.\nCarol: Hey.",
               pause=0.0, speaker_1=voice, **FAST)
    with pytest.raises(ValueError, match="speaker_1 is not connected"):
        run_v1(env, "SailfishMultiSpeaker", model=model, script="Alice: Hi.", pause=0.0,
               speaker_2=voice, **FAST)
    with pytest.raises(ValueError, match="speaker_1 and speaker_2 are both named 'alice'"):
        run_v1(env, "SailfishMultiSpeaker", model=model, script="Alice: Hi.\nAlice: Again.",
               pause=0.0, speaker_1=voice, speaker_2=voice, **FAST)
    with pytest.raises(ValueError, match="script is empty"):
        run_v1(env, "SailfishMultiSpeaker", model=model, script="  ", pause=0.0, **FAST)
    # The pause budget is the script's (every turn together), not each turn's: 383 characters
    # once asked for 30 minutes of silence.
    many = "\n".join(f"Alice: Hi. {'[pause:60s]' * 5}" for _ in range(3))
    with pytest.raises(ValueError, match=r"script: its \[pause:…\] tags add up to more than 600"):
        run_v1(env, "SailfishMultiSpeaker", model=model, script=many, pause=0.5,
               speaker_1=voice, **FAST)
    cues = "".join(f"{i}\n00:00:0{i},000 --> 00:00:0{i},500\nHi. {'[pause:60s]' * 5}\n\n"
                   for i in range(1, 4))
    with pytest.raises(ValueError, match=r"subtitles: its \[pause:…\] tags add up to more "):
        run_v1(env, "SailfishSubtitles", model=model, srt=cues, **FAST)


def test_multi_speaker_script_error_comes_before_the_model_loads(env, manager, voice,
                                                                 monkeypatch):
    stand_in = manager(memory=None)  # loading it would evict nothing, but it counts loads
    monkeypatch.setattr(env.pack.nodes.runner, "MANAGER", stand_in)
    with pytest.raises(ValueError, match=r"script: speaker\(s\) Carol have no reference voice; "
                       r"voices given: Alice \(connected: speaker_1 = Alice\)"):
        run_v1(env, "SailfishMultiSpeaker", model=manager.handle,
               script="Alice: Hi.\nCarol: Hey.", pause=0.0, speaker_1=voice, **FAST)
    assert manager.loader.loads == [] and loaded(stand_in) == []
    with pytest.raises(AttributeError, match="speak"):  # a good script does reach it
        run_v1(env, "SailfishMultiSpeaker", model=manager.handle, script="Alice: Hi.",
               pause=0.0, speaker_1=voice, **FAST)
    assert len(manager.loader.loads) == 1


def test_subtitles_follow_the_timeline(env, model, voice):
    srt = ("1\n00:00:00,500 --> 00:00:02,000\nFirst line.\n\n"
           "2\n00:00:02,500 --> 00:00:04,000\nSecond line.\n")
    audio, generated, report, timeline, _ = run_v3(env, "SailfishSubtitles", model=model, srt=srt,
                                      voice=voice, **{**FAST, "max_new_tokens": 8})
    # 8 frames (0.37 s) always fit their slot, so the audio ends where the last cue ends.
    assert check_audio(audio, frames=False) == round(4.0 * read_sizes().sample_rate)
    assert "00:00:00,500 -->" in generated and "Second line." in generated
    assert report == "Every cue fits its slot."
    (take,) = json.loads(timeline)["takes"]
    assert take["samples"] == round(4.0 * read_sizes().sample_rate) and len(take["segments"]) == 2
    with pytest.raises(ValueError, match="srt: "):
        run_v1(env, "SailfishSubtitles", model=model, srt="not subtitles", **FAST)


def test_takes_are_a_padded_batch_with_exact_lengths(env, model, voice):
    audio, timeline, _ = run_v3(env, "SailfishTTS", model=model, text="Three takes, please.",
                             voice=voice, takes=3, **FAST)
    wave = audio["waveform"]
    assert wave.shape[:2] == (3, 1) and wave.dtype == torch.float32
    takes = json.loads(timeline)["takes"]
    assert [t["seed"] for t in takes] == [FAST["seed"] + k for k in range(3)]
    assert wave.shape[2] == max(t["samples"] for t in takes)
    for k, take in enumerate(takes):
        assert not wave[k, 0, take["samples"]:].any()  # the padding is silence
        single, _, _ = run_v1(env, "SailfishTTS", model=model, text="Three takes, please.",
                           voice=voice, **{**FAST, "seed": FAST["seed"] + k})
        assert torch.equal(wave[k, :, :take["samples"]], single["waveform"][0])
    with pytest.raises(ValueError, match="takes must be"):
        run_v1(env, "SailfishTTS", model=model, text="Hi.", takes=9, **FAST)


def test_bad_inputs_name_the_field(env, model, reference):
    with pytest.raises(ValueError, match="text is empty"):
        run_v1(env, "SailfishTTS", model=model, text=" \n", **FAST)
    with pytest.raises(ValueError, match="reference_text is empty"):
        run_v1(env, "SailfishVoiceClone", model=model, reference_audio=reference,
               reference_text="", text="Hi.", **FAST)
    silent = {"waveform": torch.zeros(1, 1, 44100), "sample_rate": 44100}
    with pytest.raises(ValueError, match="reference audio: audio is silent"):
        run_v1(env, "SailfishVoiceClone", model=model, reference_audio=silent,
               reference_text="Words.", text="Hi.", **FAST)
    with pytest.raises(ValueError, match="name is empty"):  # (an empty transcript is heard)
        run_v1(env, "SailfishVoiceEncode", model=model, audio=reference, transcript="",
               name=" ")
