"""local/listener.py and the doors that use it: a reference clip given without its transcript
is heard by the tiny Qwen3-ASR, and the voice carries exactly what a direct ``transcribe`` of
the same clip says; a given text always wins (no recogniser is loaded)."""

import numpy as np
import pytest
import soundfile as sf
from conftest import fixtures_dir

from fish_core import cli
from fish_core.hearing.transcription import transcribe
from fish_core.speech.voices import Voice


@pytest.fixture(scope="module")
def asr_dir():
    folder = fixtures_dir() / "aligner" / "tiny-asr"
    if not folder.is_dir():
        pytest.skip("fixture set without the tiny Qwen3-ASR checkpoint")
    return folder


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A mono 22.05 kHz clip of shaped noise (the tiny random recogniser hears words in it)."""
    rng = np.random.default_rng(11)
    n = int(2.5 * 22050)
    envelope = np.sin(np.arange(n) / 22050 * 2 * np.pi * 1.1) > -0.2
    path = tmp_path_factory.mktemp("clips") / "me.wav"
    sf.write(str(path), (0.25 * rng.standard_normal(n) * envelope).astype(np.float32), 22050)
    return path


def heard(clip, asr_dir) -> str:
    """The direct call: the Python door on the clip's samples."""
    data, rate = sf.read(str(clip), dtype="float32", always_2d=True)
    text = transcribe(data.T, rate, asr=asr_dir).text.strip()
    assert text, "the tiny recogniser heard nothing: the test proves nothing"
    return text


@pytest.fixture
def listening(tiny_synth, asr_dir):
    tiny_synth.listener.configure(asr_dir, download=False)
    yield tiny_synth
    tiny_synth.listener.configure(None)


def test_a_voice_without_its_transcript_carries_what_the_recogniser_hears(listening, clip,
                                                                           asr_dir):
    voice = listening.encode_voice(str(clip), name="me")
    assert voice.clips[0].text == heard(clip, asr_dir)
    data, rate = sf.read(str(clip), dtype="float32")
    from_samples = listening.encode_voice(data, "  ", sample_rate=rate)  # blank: heard too
    assert from_samples.clips[0].text == voice.clips[0].text


def test_a_given_text_wins_and_loads_no_recogniser(tiny_synth, clip):
    listener = tiny_synth.listener
    listener.configure("/nonexistent/asr")  # would fail if it were loaded
    try:
        voice = tiny_synth.encode_voice(str(clip), "What I say.")
    finally:
        listener.configure(None)
    assert voice.clips[0].text == "What I say." and listener.recognizer is None


def test_an_unusable_asr_folder_is_an_error_naming_it(tiny_synth, clip, tmp_path):
    tiny_synth.listener.configure(tmp_path, download=False)
    try:
        with pytest.raises(Exception, match="ASR folder"):
            tiny_synth.encode_voice(str(clip))
    finally:
        tiny_synth.listener.configure(None)


def test_voice_encode_without_text_keeps_and_shows_the_transcript(ckpt_dir, clip, asr_dir,
                                                                   tmp_path, capsys):
    out = tmp_path / "me.safetensors"
    assert cli.main(["voice", "encode", str(clip), "--model", str(ckpt_dir), "--asr",
                     str(asr_dir), "--no-download", "--threads", "1", "-o", str(out)]) == 0
    expected = heard(clip, asr_dir)
    assert Voice.load(out).clips[0].text == expected
    assert expected in capsys.readouterr().err
    # the transcript is corrected by encoding again with --text
    assert cli.main(["voice", "encode", str(clip), "--model", str(ckpt_dir), "--text",
                     "The right words.", "--threads", "1", "-o", str(out)]) == 0
    assert Voice.load(out).clips[0].text == "The right words."


def test_say_with_a_clip_and_no_voice_text(ckpt_dir, clip, asr_dir, tmp_path, capsys):
    out = tmp_path / "hi.wav"
    assert cli.main(["say", "Hi.", "--voice", str(clip), "--asr", str(asr_dir), "--model",
                     str(ckpt_dir), "--max-new-tokens", "4", "--seed", "1", "--precision",
                     "fp32", "--threads", "1", "-o", str(out)]) == 0
    assert out.is_file() and heard(clip, asr_dir) in capsys.readouterr().err


def test_http_voice_without_text_is_heard_and_answered(listening, clip, asr_dir, tmp_path):
    try:  # the HTTP client the openai SDK depends on (httpx2 in newer releases)
        import httpx2 as httpx
    except ImportError:
        httpx = pytest.importorskip("httpx")
    from conftest import served

    with served(listening, tmp_path) as server:
        added = httpx.post(server.url + "/v1/audio/voices", data={"name": "me"},
                           files={"audio": ("me.wav", clip.read_bytes(), "audio/wav")},
                           timeout=120)
    assert added.status_code == 201, added.text
    expected = heard(clip, asr_dir)
    assert added.json()["text"] == expected
    assert Voice.load(tmp_path / "me.safetensors").clips[0].text == expected
