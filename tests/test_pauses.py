"""Exact pauses (``text/pauses.py``, laid out by ``speech/timeline.py``): tags parsed and
checked, the model never sees them, and the silence between the speech on either side is
exactly the asked length, in tts, dialogue, subtitles, takes, streams and live playback."""

import pytest
import torch

from fish_core.speech.finishing import Finishing
from fish_core.text.pauses import (MAX_PAUSE, PauseError, protect, restore, split_pauses,
                                   strip_pauses)
from fish_core.text.plan import parse_srt

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
