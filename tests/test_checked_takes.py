"""Checked takes (``Settings.check``): on the tiny checkpoints every take is heard by the tiny
Qwen3-ASR and carries exactly the score a direct call of the scorer gives its transcript
against the text it was asked to say; a bad ``check`` is refused before anything runs."""

import pytest
from conftest import fixtures_dir

from fish_core.hearing.checking import best_take
from fish_core.hearing.scoring import score
from fish_core.hearing.transcription import transcribe
from fish_core.params import RequestError
from fish_core.remote import RemoteSynthesizer
from fish_core.speech.request import Request
from fish_core.speech.settings import Settings

FAST = dict(max_new_tokens=12, temperature=0.8, top_p=0.8, top_k=30, seed=5)


@pytest.fixture(scope="module")
def asr_dir():
    folder = fixtures_dir() / "aligner" / "tiny-asr"
    if not folder.is_dir():
        pytest.skip("fixture set without the tiny Qwen3-ASR checkpoint")
    return folder


@pytest.fixture
def listening(tiny_synth, asr_dir):
    tiny_synth.listener.configure(asr_dir, download=False)
    yield tiny_synth
    tiny_synth.listener.configure(None)


def test_every_take_carries_the_scorers_own_numbers(listening, asr_dir):
    text = "Hello there, [pause:200ms] how are you?"
    speeches = listening.tts(text, takes=3, check=True, **FAST)
    assert len(speeches) == 3
    for speech in speeches:
        checked = speech.check
        direct = transcribe(speech.waveform, speech.sample_rate, asr=asr_dir)
        assert checked.heard.text == direct.text
        assert checked.score == score("Hello there, how are you?", direct.text)
    assert best_take([s.check for s in speeches]) in range(3)


def test_a_dialogue_is_scored_against_its_turns(listening):
    [speech] = listening.dialogue("A: One two.\nB: Three four.", takes=1, check=True, **FAST)
    assert speech.check.score == score("One two. Three four.", speech.check.heard.text)


def test_unchecked_takes_carry_nothing(tiny_synth):
    assert tiny_synth.tts("Hi.", **FAST).check is None


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_check_must_be_a_bool(value):
    with pytest.raises(RequestError, match="check must be true or false") as e:
        Settings.of(check=value)
    assert e.value.field == "check"


def test_check_is_refused_where_it_cannot_be_done():
    with pytest.raises(TypeError, match="check"):
        Request.tts("Hi.", None, where="stream", check=True)
    with pytest.raises(TypeError, match="check"):
        Request.subtitles("1\n00:00:00,000 --> 00:00:01,000\nHi.\n", check=True)
    remote = RemoteSynthesizer("http://127.0.0.1:9", "sailfish")
    with pytest.raises(RequestError, match="cannot hear its takes"):
        Request.tts("Hi.", None, accepts=type("A", (), {"hears": False, "model": "x",
                                                           "max_speakers": None,
                                                           "voices": lambda s, v: v,
                                                           "max_seed": 2**31})(), check=True)
    assert remote.accepts.hears is False


def test_cli_check_and_pick_best(ckpt_dir, asr_dir, tmp_path, capsys):
    import soundfile as sf

    from fish_core import cli

    out = tmp_path / "t.wav"
    flags = ["say", "One two three.", "--model", str(ckpt_dir), "--asr", str(asr_dir),
             "--takes", "2", "--check", "--max-new-tokens", "8", "--seed", "4",
             "--precision", "fp32", "--threads", "1", "-o", str(out)]
    assert cli.main(flags) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all("off (" in line for line in lines)
    for line, path in zip(lines, (tmp_path / "t-1.wav", tmp_path / "t-2.wav")):
        data, rate = sf.read(str(path), dtype="float32")
        heard = transcribe(data, rate, asr=asr_dir).text
        s = score("One two three.", heard)
        assert f"heard {s.rate:.1%} off ({s.errors} of " in line
    assert cli.main([*flags[:-1], str(tmp_path / "best.wav"), "--pick", "best"]) == 0
    assert "take " in capsys.readouterr().out and (tmp_path / "best.wav").is_file()
    assert not (tmp_path / "best-1.wav").exists()


def test_cli_pick_needs_check_and_check_needs_the_recogniser(ckpt_dir, tmp_path, capsys):
    from fish_core import cli

    base = ["say", "Hi.", "--model", str(ckpt_dir), "-o", str(tmp_path / "x.wav")]
    assert cli.main([*base, "--pick", "best"]) == 2
    assert "add --check" in capsys.readouterr().err
    assert cli.main([*base, "--check", "--no-download", "--models-dir",
                     str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--check hears every take" in err and "--asr" in err
    assert cli.main([*base, "--check", "--stream"]) == 2


def test_the_tts_node_checks_its_takes(env, model, asr_dir):
    import json

    from node_env import run_v3

    target = env.models / "qwen3-asr-0.6b"  # where the node's recogniser is downloaded to
    if not target.exists():
        target.symlink_to(asr_dir, target_is_directory=True)
    text = "One two three."
    audio, timeline, words = run_v3(env, "SailfishTTS", model=model, text=text, takes=2,
                                    check=True, **FAST)
    assert words == {"takes": []}  # words off: checking times none
    takes = json.loads(timeline)["takes"]
    assert len(takes) == 2
    for take in takes:
        checked = take["check"]
        s = score(text, checked["heard"])
        assert (checked["rate"], checked["errors"], checked["length"]) == (s.rate, s.errors,
                                                                           s.length)
        assert checked["differences"] == [[d.expected, d.heard] for d in s.differences]


def test_http_check_field(listening, tmp_path):
    import json

    try:  # the HTTP client the openai SDK depends on (httpx2 in newer releases)
        import httpx2 as httpx
    except ImportError:
        httpx = pytest.importorskip("httpx")
    from conftest import served

    body = {"model": "s2-pro", "input": "One two three.", "max_new_tokens": 8, "seed": 2}
    with served(listening, tmp_path) as server:
        url = server.url + "/v1/audio/speech"
        answer = httpx.post(url, json={**body, "check": True}, timeout=120)
        plain = httpx.post(url, json=body, timeout=120)
        wrong = httpx.post(url, json={**body, "check": "yes"}, timeout=120)
        streamed = httpx.post(url, json={**body, "check": True, "stream_format": "audio"},
                              timeout=120)
    assert answer.status_code == 200, answer.text
    checked = json.loads(answer.headers["X-Sailfish-Check"])
    s = score("One two three.", checked["heard"])
    assert (checked["rate"], checked["errors"], checked["length"]) == (s.rate, s.errors,
                                                                       s.length)
    assert "X-Sailfish-Check" not in plain.headers and plain.content == answer.content
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "check"
    assert streamed.status_code == 400 and streamed.json()["error"]["param"] == "check"


def test_words_and_check_together_on_the_tts_node(env, model, asr_dir, aligner_fixtures):
    """Both new inputs at once: every take is checked and its words timed on its own audio."""
    import json

    from node_env import run_v3

    for name, folder in (("qwen3-asr-0.6b", asr_dir),
                         ("qwen3-forced-aligner-0.6b", aligner_fixtures / "tiny-aligner")):
        target = env.models / name
        if not target.exists():
            target.symlink_to(folder, target_is_directory=True)
    audio, timeline, words = run_v3(env, "SailfishTTS", model=model, text="One two three.",
                                    takes=2, words="English", check=True, **FAST)
    takes = json.loads(timeline)["takes"]
    assert len(takes) == 2 == len(words["takes"])
    for take, timed in zip(takes, words["takes"]):
        assert 0 <= take["check"]["rate"] and take["check"]["heard"] is not None
        assert [w["text"] for w in timed["words"]] == ["One", "two", "three"]


def test_a_book_retakes_a_chapter_heard_past_the_threshold(listening, tmp_path):
    import re

    from fish_core.cli.audiobook import render_book

    book = tmp_path / "b.md"
    book.write_text("# One\n\nHello there, friend.\n\n# Two\n\nGood night, moon.\n")
    lines = []
    result = render_book(listening, book, tmp_path / "out", check=True, retake_above=0.0,
                         retakes=2, log=lines.append, **{**FAST, "seed": 3})
    assert len(result.chapters) == 2
    for index in (1, 2):
        mine = [line for line in lines if line.startswith(f"chapter {index}:")]
        assert len(mine) <= 2
        assert all(re.search(r"retake \d of 2 with seed \d+: [\d.]+% off", line)
                   for line in mine)
    # the first take of chapter 1, spoken alone, says whether it was retaken
    first = listening.tts("Hello there, friend.", check=True, **{**FAST, "seed": 3})
    retook = any(line.startswith("chapter 1:") for line in lines)
    assert retook == (first.check.rate > 0.0)


def test_book_retakes_are_checked_before_any_work(tiny_synth, tmp_path):
    from fish_core.cli.audiobook import render_book

    book = tmp_path / "b.md"
    book.write_text("# One\n\nHello.\n")
    with pytest.raises(ValueError, match="needs check=True"):
        render_book(tiny_synth, book, tmp_path / "o", retake_above=0.1)
    with pytest.raises(ValueError, match="retakes must be"):
        render_book(tiny_synth, book, tmp_path / "o", check=True, retake_above=0.1, retakes=9)
    with pytest.raises(ValueError, match="retake_above must be"):
        render_book(tiny_synth, book, tmp_path / "o", check=True, retake_above=-1)
    assert not (tmp_path / "o").exists()
