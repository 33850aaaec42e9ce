"""Casting (``speech/casting.py``): a generated take kept as a voice, by ``voice from-take``
(accepted by ``say --voice``) and by the Voice From Take node (takes in, voice out, usable by
TTS); the finishing inputs of the generating nodes."""

import pytest
import torch

from fish_core.cli import main
from fish_core.speech.casting import take_clip, transcript, trim
from fish_core.speech.voices import Voice
from node_env import FAST, run_v1, run_v3


def test_a_take_is_trimmed_and_its_tags_taken_out():
    sr = 1000
    wave = torch.cat([torch.zeros(500), 0.5 * torch.ones(2000), torch.zeros(700)])
    clip = trim(wave, sr)
    assert clip.shape[0] == 2000 + 2 * 100  # the speech and a 0.1 s margin each side
    assert transcript("<|speaker:0|>Hello [pause:1s] there.") == "Hello there."
    with pytest.raises(ValueError, match="silent"):
        take_clip(torch.zeros(3000), sr, "Hi.")
    with pytest.raises(ValueError, match="at least 0.5 s"):
        take_clip(torch.cat([torch.ones(300), torch.zeros(100)]), sr, "Hi.")
    with pytest.raises(ValueError, match="transcript"):
        transcript("[pause:1s]")


def test_voice_from_take_is_accepted_by_say(ckpt_dir, tmp_path, capsys):
    take, voice = tmp_path / "take.wav", tmp_path / "cast.safetensors"
    words = tmp_path / "words.tsv"
    words.write_text("there\tthair\n")
    text = ("[pause:300ms]Hello there, this is my best take. It goes on. And on. "
            "Until the end. [pause:500ms]")
    model = ["--model", str(ckpt_dir), "--device", "cpu"]
    assert main(["say", text, "-o", str(take), "--seed", "3", "--max-new-tokens", "30",
                 "--max-bytes", "16", *model]) == 0
    assert main(["voice", "from-take", str(take), "--text", text, "-o", str(voice),
                 "--lexicon", str(words), *model]) == 0
    cast = Voice.load(voice)
    assert cast.name == "cast"
    assert cast.clips[0].text == ("Hello thair, this is my best take. It goes on. And on. "
                                  "Until the end.")
    assert cast.lexicon.apply("over there") == "over thair"
    out = tmp_path / "again.wav"
    assert main(["say", "Now in the cast voice.", "--voice", str(voice), "-o", str(out),
                 "--seed", "4", "--max-new-tokens", "8", *model]) == 0
    assert out.is_file() and "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("rate", [0, -44100, 0.5, 1e9, "44100", None, True])
def test_voice_from_take_refuses_a_sample_rate_of_zero_naming_the_audio(env, model, rate):
    """An AUDIO whose sample rate is 0 (or no rate at all) is a clear error naming the input,
    never a ZeroDivisionError."""
    audio = {"waveform": 0.5 * torch.ones(1, 1, 4000), "sample_rate": rate}
    with pytest.raises(ValueError, match="audio: the sample rate must be a whole number of Hz"):
        run_v1(env, "SailfishVoiceFromTake", model=model, audio=audio, text="Hi there.",
               name="Cast")
    with pytest.raises(ValueError, match="audio: the sample rate must be a whole number of Hz"):
        take_clip(0.5 * torch.ones(4000), rate, "Hi there.")


def test_voice_from_take_node_casts_a_take_of_a_batch(env, model):
    # Pieces between pauses are batches of their own: enough speech from the tiny model.
    text = " [pause:20ms] ".join(f"Line {n} of the take." for n in range(12))
    (audio, _timeline, _words) = run_v3(env, "SailfishTTS", model=model, text=text,
                                **{**FAST, "max_new_tokens": 30}, takes=2)
    voice, report = run_v1(env, "SailfishVoiceFromTake", model=model, audio=audio, text=text,
                           name="Cast", take=2)
    said = " ".join(f"Line {n} of the take." for n in range(12))
    assert voice.name == "Cast" and voice.clips[0].text == said and "Cast:" in report
    (again, _, _) = run_v3(env, "SailfishTTS", model=model, text="Reuse it.", **FAST, voice=voice)
    assert again["waveform"].shape[0] == 1
    with pytest.raises(ValueError, match="take: the audio holds 2 take"):
        run_v1(env, "SailfishVoiceFromTake", model=model, audio=audio, text=text, name="Cast",
               take=3)


def test_generating_nodes_take_loudness_speed_and_a_lexicon(env, model):
    pytest.importorskip("pedalboard")
    base = dict(model=model, text="One two three. [pause:400ms] Four.", **FAST)
    (plain, _, _) = run_v3(env, "SailfishTTS", **base)
    (fast, timeline, _) = run_v3(env, "SailfishTTS", **base, speed=1.5, loudness=-30.0,
                              lexicon="four\tfore\n")
    assert '"finishing"' in timeline and '"speed": 1.5' in timeline
    assert fast["waveform"].shape[-1] < plain["waveform"].shape[-1]
    with pytest.raises(ValueError, match="lexicon line 1"):
        run_v1(env, "SailfishTTS", **base, lexicon="no tab")
    with pytest.raises(ValueError, match="loudness must be a target"):
        run_v1(env, "SailfishTTS", **base, loudness=-90.0)
