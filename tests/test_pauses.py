"""Exact pauses (``text/pauses.py``, laid out by ``speech/timeline.py``): tags parsed and
checked, the model never sees them, and the silence between the speech on either side is
exactly the asked length, in tts, dialogue, subtitles, takes, streams and live playback."""

import pytest
import torch

from fish_core.speech.finishing import Finishing
from fish_core.text.pauses import (MAX_PAUSE, PauseError, protect, restore, split_pauses,
                                   strip_pauses)
from fish_core.text.srt import parse_srt

FAST = dict(max_new_tokens=8, temperature=0.8, top_p=0.8, top_k=30)


# ---------------------------------------------------------------- parsing
def test_tags_split_the_text_and_carry_their_seconds():
    spoken = split_pauses("[pause:250ms]Hello there. [PAUSE: 1.5 s] How are you?"
                          "[pause:700ms][pause:300ms]")
    assert spoken.lead == 0.25
    assert [(p.text, p.after) for p in spoken.pieces] == [("Hello there.", 1.5),
                                                         ("How are you?", 1.0)]
    assert split_pauses("No tags here.").pieces[0].after is None
    assert (split_pauses("S2's own [pause] cue stays.").pieces[0].text ==
            "S2's own [pause] cue stays.")


def test_a_piece_after_a_pause_keeps_its_speaker():
    spoken = split_pauses("<|speaker:1|>Hi [pause:1s] there<|speaker:0|>Yo [pause:2s] again")
    assert [p.text for p in spoken.pieces] == ["<|speaker:1|>Hi",
                                              "<|speaker:1|>there<|speaker:0|>Yo",
                                              "<|speaker:0|>again"]


@pytest.mark.parametrize("text, words", [
    ("Hi [pause:-1s] there", "negative"),
    ("Hi [pause:2] there", "not a duration"),
    ("Hi [pause:fast] there", "not a duration"),
    ("Hi [pause:61s] there", "at most 60 s"),
    ("Hi [pause:61000ms] there", "at most 60 s"),
    ("Hi [pause:1s there", "not closed"),
    ("Hi " + "[pause:59s] " * 11 + "there", "add up"),
])
def test_malformed_or_absurd_pauses_are_clear_errors(text, words):
    with pytest.raises(PauseError, match=words) as e:
        split_pauses(text)
    assert "[pause" in str(e.value) or "add up" in words or "closed" in words


def test_the_model_never_sees_a_tag():
    batches = Finishing().batches("One. [pause:1s] Two. [pause:500ms]", max_bytes=300)
    assert [b.text for b in batches] == ["One.", "Two."]
    assert (batches[0].before, batches[0].after, batches[1].after) == (None, 1.0, 0.5)
    assert strip_pauses("One. [pause:1s] Two.") == "One. Two."
    with pytest.raises(ValueError, match="nothing to say"):
        Finishing().batches("[pause:1s]")
    assert MAX_PAUSE == 60


def test_script_lines_keep_pause_tags_out_of_speaker_labels():
    from fish_core.text.script import check_script

    turns = check_script("Alice: Hi.\n[pause:2s]\nBob: Yo.", ["Alice", "Bob"])
    assert [(t.text, t.speaker) for t in turns] == [("Hi. [pause:2s]", 0), ("Yo.", 1)]
    text, tags = protect("[pause:1s] a [pause:2s]")
    assert "[" not in text and restore(text, tags) == "[pause:1s] a [pause:2s]"


# ---------------------------------------------------------------- exact silence, end to end
def gap_between(speech, i):
    """The samples between segment i and i + 1, and that they are all zero."""
    a, b = speech.segments[i], speech.segments[i + 1]
    window = speech.waveform[a.end_sample:b.start_sample]
    return b.start_sample - a.end_sample, bool(window.any())


def test_tts_pauses_are_exact_digital_silence(tiny_synth):
    sr = tiny_synth.sample_rate
    speech = tiny_synth.tts("[pause:200ms]Hello there. [pause:700ms] How are you? "
                            "[pause:1.5s]", seed=3, **FAST)
    assert gap_between(speech, 0) == (round(0.7 * sr), False)
    assert speech.segments[0].start_sample == round(0.2 * sr)
    assert not speech.waveform[:round(0.2 * sr)].any()
    tail = speech.waveform[speech.segments[-1].end_sample:]
    assert tail.shape[0] == round(1.5 * sr) and not tail.any()
    assert [s.text for s in speech.segments] == ["Hello there.", "How are you?"]


def test_takes_stream_and_live_lay_out_the_same_pauses(tiny_synth):
    text = "One two. [pause:300ms] Three four."
    takes = tiny_synth.tts(text, seed=4, takes=2, **FAST)
    for take in takes:
        assert gap_between(take, 0) == (round(0.3 * tiny_synth.sample_rate), False)
    pieces = []
    live = tiny_synth.tts(text, seed=4, on_chunk=lambda s, r: pieces.append(s), **FAST)
    assert torch.equal(torch.cat(pieces), live.waveform)
    assert torch.equal(live.waveform, takes[0].waveform)
    with tiny_synth.stream(text, seed=4, **FAST) as stream:
        streamed = torch.cat(list(stream))
    assert torch.equal(streamed, live.waveform)


def test_dialogue_pause_tags_replace_the_turn_pause(tiny_synth):
    sr = tiny_synth.sample_rate
    speech = tiny_synth.dialogue("A: Hi there. [pause:800ms]\nB: Hello.\nA: Bye.", pause=0.2,
                                 seed=2, **FAST)
    assert gap_between(speech, 0) == (round(0.8 * sr), False)
    assert gap_between(speech, 1) == (round(0.2 * sr), False)
    first, second, third = [s.speaker for s in speech.segments]
    assert first == third != second
    tracks = speech.tracks(2)
    assert torch.equal(tracks.sum(0), speech.waveform)


def test_subtitle_cues_hold_exact_pauses(tiny_synth):
    sr = tiny_synth.sample_rate
    srt = ("1\n00:00:00,500 --> 00:00:03,000\nHello. [pause:400ms] Again.\n\n"
           "2\n00:00:05,000 --> 00:00:06,000\nLast one.\n")
    pieces = []
    result = tiny_synth.subtitles(srt, seed=6, on_chunk=lambda s, r: pieces.append(s), **FAST)
    assert torch.equal(torch.cat(pieces), result.waveform)
    assert len(result.segments) == 3
    assert result.segments[0].start_sample == round(0.5 * sr)
    assert gap_between(result, 0) == (round(0.4 * sr), False)
    assert result.segments[2].start_sample >= round(5.0 * sr)
    with pytest.raises(ValueError, match="cue 1 holds only pauses"):
        tiny_synth.subtitles("1\n00:00:00,000 --> 00:00:01,000\n[pause:1s]\n", **FAST)
    assert parse_srt(srt)[0].text == "Hello. [pause:400ms] Again."


# ---------------------------------------------------------------- the budget of one request
def many_turns_of_pauses(turns=3, seconds=300):
    """A script whose every turn stays within the pause budget, together far over it."""
    tags = "[pause:60s]" * (seconds // 60)
    return "\n".join(f"{'AB'[i % 2]}: Hi. {tags}" for i in range(turns))


def test_the_pause_budget_is_the_whole_scripts_and_the_whole_subtitle_files():
    """600 s of pause tags per request: a text, a whole script (every turn), a whole subtitle
    file (every cue), whichever way the turns are planned."""
    from fish_core.budgets import MAX_PAUSE_TOTAL_SECONDS
    from fish_core.speech.request import Request

    from fish_core.speech.front import plan

    for turn_by_turn in (True, False):  # refused when the request is made
        with pytest.raises(PauseError, match=r"script: .* more than 600 s"):
            Request.dialogue(many_turns_of_pauses(), require_voices=False,
                             turn_by_turn=turn_by_turn)
    fine = Request.dialogue(many_turns_of_pauses(turns=2), require_voices=False,
                            turn_by_turn=True)
    assert len(plan(fine).batches) == 2
    srt = "".join(f"{i}\n00:00:0{i},000 --> 00:00:0{i},500\nHi. {'[pause:60s]' * 5}\n\n"
                  for i in range(1, 4))
    with pytest.raises(PauseError, match=r"subtitles: .* more than 600 s"):
        Request.subtitles(srt)
    two = srt[:srt.index("3\n")]
    assert len(plan(Request.subtitles(two)).batches) == 2
    assert MAX_PAUSE_TOTAL_SECONDS == 600.0


def test_the_pause_budget_is_the_same_in_python_cli_and_nodes(tiny_synth, tmp_path, capsys):
    """Refused before anything is generated, naming the field and the limit."""
    from fish_core.cli import main

    script = many_turns_of_pauses()
    with pytest.raises(PauseError, match=r"script: .* more than 600 s"):
        tiny_synth.dialogue(script, pause=0.2, **FAST)
    with pytest.raises(PauseError, match=r"script: .* more than 600 s"):
        tiny_synth.dialogue(script, turn_by_turn=False, **FAST)
    path = tmp_path / "script.txt"
    path.write_text(script, encoding="utf-8")
    assert main(["plan", "--script", str(path), "--turn-by-turn"]) != 0
    assert "script: its [pause:…] tags add up to more than 600 s" in capsys.readouterr().err


def test_a_served_answer_stays_within_its_budget(tiny_synth, voices_dir):
    """``Limits.max_answer_seconds``: a whole answer past it is a 422 naming the text field; a
    stream ends there (SSE says why); within it the answer is whole."""
    pytest.importorskip("aiohttp")
    try:  # the HTTP client the openai SDK depends on (httpx2 in newer releases)
        import httpx2 as httpx
    except ImportError:
        httpx = pytest.importorskip("httpx")
    from conftest import served
    from fish_core.budgets import MAX_ANSWER_SECONDS
    from fish_core.serve.limits import Limits

    assert Limits().max_answer_seconds == MAX_ANSWER_SECONDS
    sr = tiny_synth.sample_rate
    long = {"text": "[pause:6s] Hi.", "seed": 1, "max_new_tokens": 8, "format": "pcm"}
    with served(tiny_synth, voices_dir, limits=Limits(max_answer_seconds=5.0)) as server:
        def post(path, body, **kw):
            return httpx.post(server.url + path, json=body, timeout=120, **kw)

        whole = post("/v1/tts", long)
        assert whole.status_code == 422
        error = whole.json()["error"]
        assert error["param"] == "text" and "past 5 s of audio" in error["message"]
        openai = post("/v1/audio/speech", {"input": long["text"], "response_format": "pcm",
                                           "seed": 1, "max_new_tokens": 8})
        assert openai.status_code == 422 and openai.json()["error"]["param"] == "input"
        streamed = post("/v1/tts", {**long, "streaming": True})
        assert streamed.status_code == 200 and len(streamed.content) < 2 * 5 * sr
        sse = post("/v1/audio/speech", {"input": long["text"], "response_format": "pcm",
                                        "stream_format": "sse", "seed": 1, "max_new_tokens": 8})
        assert '"type": "error"' in sse.text and "past 5 s of audio" in sse.text
        short = post("/v1/tts", {**long, "text": "[pause:2s] Hi."})
        assert short.status_code == 200 and len(short.content) > 2 * 2 * sr
