"""nodes/hearing.py: the Transcribe node on the tiny Qwen3-ASR and ForcedAligner checkpoints
(placed in the models folder as the first-use download would): the same transcript, language
and word times as the Python door, with or without a model connected."""

import json

import pytest
import torch
from conftest import fixtures_dir
from node_env import run_v1, run_v3

from fish_core.hearing.transcription import transcribe


@pytest.fixture(scope="module")
def placed(env):
    root = fixtures_dir() / "aligner"
    if not (root / "tiny-asr").is_dir():
        pytest.skip("fixture set without the tiny Qwen3-ASR checkpoint")
    for name, tiny in (("qwen3-asr-0.6b", "tiny-asr"), ("qwen3-forced-aligner-0.6b",
                                                         "tiny-aligner")):
        target = env.models / name
        if not target.exists():
            target.symlink_to(root / tiny, target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def clip():
    rng = torch.Generator().manual_seed(11)
    n = int(2.5 * 22050)
    envelope = (torch.sin(torch.arange(n) / 22050 * 2 * torch.pi * 1.1) > -0.2).float()
    wave = 0.25 * torch.randn(n, generator=rng) * envelope
    return {"waveform": wave.expand(1, 2, -1).clone(), "sample_rate": 22050}


def test_transcribe_node_hears_what_the_door_hears(env, placed, clip):
    direct = transcribe(clip["waveform"][0], 22050, asr=placed / "tiny-asr")
    text, language, words = run_v3(env, "SailfishTranscribe", audio=clip, language="",
                                   words=False)
    assert (text, language, json.loads(words)) == (direct.text, direct.language, [])


def test_word_times_through_the_models_own_listener(env, placed, clip, model):
    direct = transcribe(clip["waveform"][0], 22050, language="English", words=True,
                        asr=placed / "tiny-asr", aligner=placed / "tiny-aligner")
    assert direct.words, "no word was heard: the test proves nothing"
    text, _, words = run_v1(env, "SailfishTranscribe", audio=clip, language="English",
                            words=True, model=model)
    assert text == direct.text
    assert json.loads(words) == [{"text": w.text, "start": w.start, "end": w.end}
                                 for w in direct.words]


def test_a_wrong_language_names_the_field(env, placed, clip):
    with pytest.raises(ValueError, match="language"):
        run_v3(env, "SailfishTranscribe", audio=clip, language="Klingon", words=False)
