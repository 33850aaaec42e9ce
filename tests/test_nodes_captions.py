"""The speaking nodes' words output and the Captions node (``nodes/captions.py``), in the
stand-in ComfyUI, on the tiny S2 checkpoint and the tiny aligner (found as
``qwen3-forced-aligner-0.6b`` in the model folder, as a user would put the real one)."""

from __future__ import annotations

import json

import pytest

from fish_core.text.srt import parse_srt
from node_env import FAST, run_v1, run_v3


@pytest.fixture(scope="module")
def aligned(env, aligner_fixtures):
    target = env.models / "qwen3-forced-aligner-0.6b"
    if not target.exists():
        target.symlink_to(aligner_fixtures / "tiny-aligner", target_is_directory=True)
    return target


def test_words_off_by_default_and_captions_say_how_to_turn_them_on(env, model, aligned):
    audio, timeline, words = run_v3(env, "SailfishTTS", model=model, text="No words.", **FAST)
    assert words == {"takes": []} and "words" not in json.loads(timeline)["takes"][0]
    with pytest.raises(ValueError, match="set its 'words' input to auto"):
        run_v3(env, "SailfishCaptions", words=words)


def test_tts_words_become_captions_on_the_audios_timeline(env, model, aligned):
    audio, timeline, words = run_v3(env, "SailfishTTS", model=model, words="English",
                                    text="Hello there. [pause:400ms] Goodbye now.", **FAST)
    duration = audio["waveform"].shape[-1] / audio["sample_rate"]
    took = words["takes"][0]
    assert [w["text"] for w in took["words"]] == ["Hello", "there", "Goodbye", "now"]
    segments = json.loads(timeline)["takes"][0]["segments"]
    for w in took["words"]:
        segment = segments[w["segment"]]
        assert segment["start"] - 1e-6 <= w["start"] <= w["end"] <= segment["end"] + 1e-6
    srt, = run_v3(env, "SailfishCaptions", words=words, format="srt")
    cues = parse_srt(srt)
    assert cues and cues[0].text.startswith("Hello") and cues[-1].text.endswith("now.")
    assert all(0 <= c.start <= c.end <= duration + 2e-3 for c in cues)
    vtt, = run_v1(env, "SailfishCaptions", words=words, format="karaoke", max_chars=42,
                  max_seconds=7.0, line_pause=0.5, take=1)
    assert vtt.startswith("WEBVTT")
    with pytest.raises(ValueError, match="take"):
        run_v3(env, "SailfishCaptions", words=words, take=2)


def test_multi_speaker_words_keep_their_speakers(env, model, voice, aligned):
    *_, words = run_v3(env, "SailfishMultiSpeaker", model=model, pause=0.2, words="auto",
                       script="[speaker_1]: Hi there.\n[speaker_2]: Hello you.", speaker_1=voice,
                       speaker_2=voice, **FAST)
    assert [(w["text"], w["speaker"]) for w in words["takes"][0]["words"]] == [
        ("Hi", 0), ("there", 0), ("Hello", 1), ("you", 1)]
    text, = run_v3(env, "SailfishCaptions", words=words, format="json")
    assert json.loads(text)[2]["speaker"] == 1


def test_a_language_the_aligner_lacks_is_named_before_the_model_runs(env, model):
    with pytest.raises(Exception, match="Spanish"):
        run_v3(env, "SailfishTTS", model=model, text="Hola.", words="Klingon", **FAST)


def test_the_aligner_is_freed_with_the_model(env, model, aligned):
    run_v3(env, "SailfishTTS", model=model, text="Timed.", words="English", **FAST)
    synth = env.manager.get(model)
    assert synth.timer.is_loaded
    env.manager.unload()
    assert not synth.timer.is_loaded
