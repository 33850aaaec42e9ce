"""cli/transcribe.py: ``sailfish transcribe clip.wav [--words] [-o …]`` on the tiny Qwen3-ASR
and ForcedAligner checkpoints: the same transcript and word times as the Python door, files
written, and every mistake one error line before a model loads."""

import json

import numpy as np
import pytest
import soundfile as sf
from conftest import fixtures_dir

from fish_core import cli
from fish_core.hearing import transcription
from fish_core.hearing.transcription import transcribe


@pytest.fixture(scope="module")
def folders():
    root = fixtures_dir() / "aligner"
    if not (root / "tiny-asr").is_dir():
        pytest.skip("fixture set without the tiny Qwen3-ASR checkpoint")
    return ["--asr", str(root / "tiny-asr"), "--aligner", str(root / "tiny-aligner"),
            "--threads", "1"]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A stereo 22.05 kHz clip (resampled and mixed down on the way in)."""
    rng = np.random.default_rng(11)
    n = int(2.5 * 22050)
    envelope = (np.sin(np.arange(n) / 22050 * 2 * np.pi * 1.1) > -0.2)
    mono = 0.25 * rng.standard_normal(n) * envelope
    path = tmp_path_factory.mktemp("clips") / "clip.flac"
    sf.write(str(path), np.stack([mono, 0.5 * mono], 1).astype(np.float32), 22050)
    return path


def the_door(clip, folders, **options):
    data, rate = sf.read(str(clip), dtype="float32", always_2d=True)
    return transcribe(data.T, rate, asr=folders[1], aligner=folders[3], **options)


def test_prints_what_the_door_hears(clip, folders, capsys):
    assert cli.main(["transcribe", str(clip), *folders]) == 0
    out = capsys.readouterr().out
    assert out == the_door(clip, folders).text + "\n"


def test_words_are_printed_with_their_times(clip, folders, capsys):
    assert cli.main(["transcribe", str(clip), "--words", "--language", "english", *folders]) == 0
    heard = the_door(clip, folders, language="English", words=True)
    assert heard.words, "no word was heard: the test proves nothing"
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{w.start:.3f}\t{w.end:.3f}\t{w.text}" for w in heard.words]


def test_json_and_captions_files(clip, folders, tmp_path):
    out = tmp_path / "deep" / "t.json"
    assert cli.main(["transcribe", str(clip), "--language", "English", "--words", "-o", str(out),
                     *folders]) == 0
    heard = the_door(clip, folders, language="English", words=True)
    got = json.loads(out.read_text(encoding="utf-8"))
    assert got == {"language": heard.language, "text": heard.text,
                   "words": [{"text": w.text, "start": w.start, "end": w.end}
                             for w in heard.words]}
    srt = tmp_path / "t.srt"  # captions imply --words
    assert cli.main(["transcribe", str(clip), "--language", "English", "-o", str(srt),
                     *folders]) == 0
    assert srt.read_text(encoding="utf-8").startswith("1\n00:00:")
    txt = tmp_path / "t.txt"
    assert cli.main(["transcribe", str(clip), "-o", str(txt), *folders]) == 0
    assert txt.read_bytes().decode("utf-8") == the_door(clip, folders).text + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "t.srt", "t.txt"]  # no temp


@pytest.mark.parametrize("extra, message", [
    (["--language", "Klingon"], "--language 'Klingon'"),
    (["-o", "x.mp3"], "--out: 'x.mp3'"),
    (["--context", "x" * 10_001], "--context is 10001 characters"),
    (["--device", "cuda:7"], "--device"),
])
def test_mistakes_are_one_line_before_a_model_loads(clip, folders, monkeypatch, capsys, extra,
                                                    message):
    monkeypatch.setattr(transcription, "load_recognizer",
                        lambda *a, **k: pytest.fail("a model was loaded"))
    assert cli.main(["transcribe", str(clip), *extra, *folders]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1]


def test_a_missing_or_bad_clip_is_named(tmp_path, folders, capsys):
    assert cli.main(["transcribe", str(tmp_path / "nope.wav"), *folders]) == 2
    assert "audio: file not found" in capsys.readouterr().err
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio at all")
    assert cli.main(["transcribe", str(bad), *folders]) == 2
    assert "error: audio:" in capsys.readouterr().err


def test_offline_without_the_model_names_the_way_out(clip, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli.main(["transcribe", str(clip), "--models-dir", str(tmp_path), "--threads", "1"]) == 2
    assert "--asr FOLDER" in capsys.readouterr().err
