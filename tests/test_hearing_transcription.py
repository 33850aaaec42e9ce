"""hearing/transcription.py: a clip's transcript with word times, as the reference's
``transcribe(..., return_time_stamps=True)`` (golden/e2e/transcribe_with_timestamps.json), and
the times of a long clip's pieces placed at their offsets."""

import json

import numpy as np
import pytest
import torch
from conftest import fixtures_dir

from fish_core.hearing import split
from fish_core.hearing.aligner import ForcedAligner
from fish_core.hearing.asr import AsrInputError, SpeechRecognizer
from fish_core.hearing.transcription import transcribe_clip


def aligner_dir():
    root = fixtures_dir() / "aligner"
    if not (root / "tiny-asr").is_dir() or not (root / "tiny-aligner").is_dir():
        pytest.skip("fixture set without the tiny Qwen3-ASR / ForcedAligner checkpoints")
    return root


@pytest.fixture(scope="module")
def models():
    root = aligner_dir()
    return (SpeechRecognizer.from_pretrained(root / "tiny-asr"),
            ForcedAligner.from_pretrained(root / "tiny-aligner"))


def speechlike(seconds: float, seed: int = 0) -> np.ndarray:
    """Noise bursts with quiet gaps, 16 kHz (a stand-in clip where the set has no audio)."""
    rng = np.random.default_rng(seed)
    n = int(seconds * 16000)
    envelope = (np.sin(np.arange(n) / 16000 * 2 * np.pi * 1.3) > -0.3).astype(np.float32)
    return (0.3 * rng.standard_normal(n) * envelope).astype(np.float32)


def test_words_match_reference(models):
    path = aligner_dir() / "golden" / "e2e" / "transcribe_with_timestamps.json"
    if not path.is_file():
        pytest.skip("fixture set without the ASR goldens")
    from safetensors.torch import load_file
    expected = json.loads(path.read_text(encoding="utf-8"))
    assert expected["return_time_stamps"]
    clip = load_file(str(aligner_dir() / "audio.safetensors"))[expected["case"]]
    heard = transcribe_clip(models[0], clip, 16000, language=expected["language_arg"],
                            aligner=models[1])
    assert (heard.language, heard.text) == (expected["result"]["language"],
                                            expected["result"]["text"])
    assert [dict(text=w.text, start_time=w.start, end_time=w.end) for w in heard.words] == (
        expected["result"]["time_stamps"])


def test_without_aligner_no_words(models):
    heard = transcribe_clip(models[0], speechlike(1.5), 16000, language="English",
                            max_new_tokens=6)
    assert heard.words is None and isinstance(heard.text, str)


def test_pieces_are_timed_at_their_offsets(models, monkeypatch):
    recognizer, aligner = models
    clip = speechlike(25.0, seed=3)
    monkeypatch.setattr(split, "MAX_ALIGN_SECONDS", 10.0)
    pieces = split.split(split.prepare(clip, 16000), 16000, 10.0)  # the clip as the ASR hears it
    assert len(pieces) >= 3
    heard = transcribe_clip(recognizer, clip, 16000, language="English", aligner=aligner,
                            max_new_tokens=6)
    texts = [recognizer.transcribe(p.wave, 16000, "English", max_new_tokens=6).text
             for p in pieces]
    timed = [(p, t) for p, t in zip(pieces, texts) if t.strip()]
    assert len(timed) >= 2, "too few pieces were transcribed: the test proves nothing"
    # The pieces are aligned in one batch, as transcribe_clip does (a batch may keep one more
    # feature frame per clip than single calls: the reference's rule).
    aligned = aligner.align([torch.from_numpy(p.wave) for p, _ in timed], [t for _, t in timed],
                            ["English"] * len(timed))
    expected = [(w.text, round(w.start + p.offset, 3), round(w.end + p.offset, 3))
                for (p, _), result in zip(timed, aligned) for w in result.words]
    assert any(w[1] >= pieces[1].offset for w in expected)
    assert [(w.text, w.start, w.end) for w in heard.words] == expected
    assert heard.text == "".join(texts)


def test_word_times_need_a_language_the_aligner_knows(models, monkeypatch):
    recognizer, aligner = models
    monkeypatch.setattr(aligner, "align", lambda *a, **k: pytest.fail("aligned anyway"))
    monkeypatch.setattr(recognizer, "hear", lambda *a, **k: pytest.fail("heard anyway"))
    with pytest.raises(AsrInputError, match="word times: .*Thai.*English"):
        transcribe_clip(recognizer, speechlike(1.0), 16000, language="Thai", aligner=aligner,
                        max_new_tokens=4)


def test_a_piece_heard_in_a_language_the_aligner_lacks_keeps_its_text(models, monkeypatch):
    from fish_core.hearing.asr import HeardPiece

    recognizer, aligner = models
    clip = split.prepare(speechlike(1.0), 16000)
    pieces = [HeardPiece(clip, 0.0, "English", "hello there", True),
              HeardPiece(clip, 1.0, "Thai", "sawasdee", True)]
    monkeypatch.setattr(recognizer, "hear", lambda *a, **k: [pieces])
    heard = transcribe_clip(recognizer, clip, 16000, aligner=aligner)
    assert heard.text == "hello theresawasdee" and heard.language == "English,Thai"
    assert [w.text for w in heard.words] == ["hello", "there"]  # the English piece, timed
    assert "1 of 2 pieces" in heard.note and "Thai" in heard.note


def test_the_door_checks_before_loading_anything(tmp_path, monkeypatch):
    from fish_core import hearing
    from fish_core.hearing import transcription

    monkeypatch.setattr(transcription, "load_recognizer",
                        lambda *a, **k: pytest.fail("a model was loaded for a bad request"))
    clip = np.zeros(16000, dtype=np.float32)
    with pytest.raises(AsrInputError, match="Klingon"):
        hearing.transcribe(clip, 16000, language="Klingon", models_dir=tmp_path)
    with pytest.raises(AsrInputError, match="sample_rate"):
        hearing.transcribe(clip, models_dir=tmp_path)
    with pytest.raises(AsrInputError, match="audio is empty"):
        hearing.transcribe(clip[:0], 16000, models_dir=tmp_path)
    with pytest.raises(AsrInputError, match="word times: .*Thai.*English"):
        hearing.transcribe(clip, 16000, language="Thai", words=True, models_dir=tmp_path)


def test_the_door_offline_names_the_way_out(tmp_path, monkeypatch):
    from fish_core import hearing
    from fish_core.loading.hub import ModelNotFound

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFound, match="--asr FOLDER"):
        hearing.transcribe(np.zeros(16000, dtype=np.float32), 16000, models_dir=tmp_path)


def test_the_door_with_folders_and_words(models):
    from fish_core import hearing

    root = aligner_dir()
    clip = {"waveform": torch.from_numpy(speechlike(2.0))[None, None], "sample_rate": 16000}
    heard = hearing.transcribe(clip, language="English", words=True, asr=root / "tiny-asr",
                               aligner=root / "tiny-aligner", max_new_tokens=6)
    direct = transcribe_clip(models[0], speechlike(2.0), 16000, language="English",
                             aligner=models[1], max_new_tokens=6)
    assert heard == direct and heard.words is not None
    again = hearing.transcribe(speechlike(2.0), 16000, language="English", asr=models[0],
                               max_new_tokens=6)
    assert again.words is None and again.text == heard.text
