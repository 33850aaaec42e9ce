"""Long-text planning, speaker scripts and SRT parsing."""

import pytest

from fish_core.text.plan import (SPEAKER_TAG, Cue, ScriptError, SubtitleError, assign_speakers,
                            format_srt, group_turns, nbytes, parse_script, parse_srt, plan_batches,
                            split_sentences, split_turns)


def reference_batches(text: str, chunk_length: int) -> list[str]:
    """fish-speech ``generate_long`` batching, quirks included: untagged text is never split and
    text before the first speaker tag is dropped (the oracle our planner is compared with)."""
    turns = [t.tagged for t in split_turns(text) if t.speaker is not None]
    if not SPEAKER_TAG.search(text) or not turns:
        return [text]
    return group_turns(turns, chunk_length, max_speakers=5)


def test_reference_batching_is_reproduced(golden):
    """fish-speech's own batching (quirks included) gives exactly the golden batch texts."""
    for name, value in golden.json("prompts").items():
        if not isinstance(value, dict) or "batches" not in value:
            continue
        chunk = value["generate_long_kwargs"].get("chunk_length", 512)
        assert reference_batches(value["text"], chunk) == [b["batch_text"] for b in value["batches"]]


def test_untagged_long_text_is_split_at_sentences():
    text = " ".join(f"Sentence number {i} ends here." for i in range(40))
    batches = plan_batches(text, max_bytes=120)
    assert len(batches) > 5
    assert all(nbytes(b) <= 120 for b in batches)
    assert all(b.endswith(".") for b in batches)  # sentence-bounded
    assert " ".join(batches) == text  # nothing lost or reordered
    assert reference_batches(text, 120) == [text]  # the reference never splits it


def test_preamble_before_the_first_tag_is_kept():
    text = "Preamble words. <|speaker:0|>First.<|speaker:1|>Second."
    batches = plan_batches(text, max_bytes=300)
    assert batches == ["Preamble words.\n<|speaker:0|>First.\n<|speaker:1|>Second."]
    assert "Preamble" not in "".join(reference_batches(text, 300))


def test_long_turn_keeps_its_tag_on_every_piece():
    text = "<|speaker:1|>" + " ".join(f"Part {i} of a long turn." for i in range(30))
    batches = plan_batches(text, max_bytes=100)
    assert len(batches) > 3
    for b in batches:
        for line in b.split("\n"):
            assert line.startswith("<|speaker:1|>")
        assert nbytes(b) <= 100


def test_overlong_sentences_are_cut_at_clauses_words_then_bytes():
    clause = "one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve."
    assert all(nbytes(b) <= 30 for b in plan_batches(clause, 30))
    cjk = "你好世界" * 40  # no punctuation, no spaces
    pieces = plan_batches(cjk, 48)
    assert "".join(pieces) == cjk and all(nbytes(p) <= 48 for p in pieces)
    cjk_sentences = "今日はいい天気ですね。明日も晴れるでしょう。" * 10
    assert all(p.endswith("。") for p in plan_batches(cjk_sentences, 70))


def test_sentence_splitter_and_turns():
    assert split_sentences('He said "Hi." Then left!  Why?\n\nNew paragraph') == [
        'He said "Hi."', "Then left!", "Why?", "New paragraph"]
    turns = split_turns("intro <|speaker:0|> a <|speaker:2|>b")
    assert [(t.speaker, t.text) for t in turns] == [(None, "intro"), (0, "a"), (2, "b")]


def test_empty_text_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        plan_batches("   ")


@pytest.mark.parametrize("script, names, want", [
    ("[speaker_1]: Hello.\n[speaker_2]: Hi.\n[speaker_1]: Bye.", ["A", "B"], [0, 1, 0]),
    ("[speaker_0]: Hello.\n[speaker_1]: Hi.", ["A", "B"], [0, 1]),
    ("Alice: Hello.\nBob: Hi there,\nhow are you?\nAlice: Fine.", ["Bob", "Alice"], [1, 0, 1]),
    ("<|speaker:1|>Hi<|speaker:0|>Yo", ["A", "B"], [1, 0]),
    ("Carol: Hi.\nDave: Yo.", [], [0, 1]),
])
def test_script_forms_map_to_voices(script, names, want):
    turns = assign_speakers(parse_script(script, names), names, require_voice=bool(names))
    assert [t.speaker for t in turns] == want


def test_continuation_lines_join_the_previous_turn():
    turns = parse_script("Alice: Hi there,\nhow are you?\nBob: Good.")
    assert [(t.label, t.text) for t in turns] == [("Alice", "Hi there, how are you?"), ("Bob", "Good.")]


def test_prose_with_a_colon_is_not_a_script():
    assert [t.label for t in parse_script("Note: this is just prose.")] == [""]


def test_speaker_without_voice_is_named():
    turns = parse_script("Alice: Hi.\nBob: Hello.\nEve: Psst.", ["Alice", "Bob"])
    with pytest.raises(ScriptError, match="Eve.*voices given: Alice, Bob"):
        assign_speakers(turns, ["Alice", "Bob"], require_voice=True)


SRT = """\ufeff1
00:00:01,000 --> 00:00:02,500
Hello <i>there</i>.

2
00:00:03,000 --> 00:00:04,000
Second line
continues here.

"""


def test_srt_round_trip():
    cues = parse_srt(SRT.replace("\n", "\r\n"))
    assert cues == [Cue(1, 1.0, 2.5, "Hello there."), Cue(2, 3.0, 4.0, "Second line continues here.")]
    assert parse_srt(format_srt(cues)) == cues


@pytest.mark.parametrize("bad, message", [
    ("1\nno timing\nText", "without a 'start --> end'"),
    ("1\n00:00:02,000 --> 00:00:01,000\nText", "ends before it starts"),
    ("1\n00:00:xx --> 00:00:01,000\nText", "bad SRT timing"),
    ("", "no cues"),
])
def test_bad_srt_is_explained(bad, message):
    with pytest.raises(SubtitleError, match=message):
        parse_srt(bad)
