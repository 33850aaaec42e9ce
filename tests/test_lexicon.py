"""The pronunciation lexicon (``text/lexicon.py``): file format, whole-word and case rules,
longest match first, global + per voice, applied before tokenisation (the ``plan`` command
shows it), and the phoneme markers of S2's tokenizer (present in the vocabulary, never
produced from text, so refused in respellings)."""

import json

import pytest
import torch

from fish_core.cli import main
from fish_core.speech.finishing import Finishing
from fish_core.speech.voices import Voice
from fish_core.text.lexicon import Lexicon, LexiconError
from fish_core.text.prompt import Reference
from fish_core.text.tokenizer import FishTokenizer

LEXICON = """# words S2 gets wrong
SQL\tsequel
Dr.\tDoctor
New York\tNoo Yawk
York\tYork-shire
nginx\tengine x
"""


def test_whole_words_any_case_longest_first():
    lex = Lexicon.parse(LEXICON)
    assert (lex.apply("sql, SQL and Sql; not SQLite nor mySQL.") ==
            "sequel, sequel and sequel; not SQLite nor mySQL.")
    assert lex.apply("From new  york to York.") == "From Noo Yawk to York-shire."
    assert lex.apply("Ask dr. Who about NGINX.") == "Ask Doctor Who about engine x."
    assert lex.apply("[sql] <|speaker:0|>SQL") == "[sql] <|speaker:0|>sequel"  # tags untouched


def test_file_errors_name_the_line():
    with pytest.raises(LexiconError, match="line 2: expected 'word<TAB>respelling'"):
        Lexicon.parse("a\tb\nno tab here\n")
    with pytest.raises(LexiconError, match="line 3: 'sql' is respelled 'squeal' here but "
                                           "'sequel' on line 1"):
        Lexicon.parse("SQL\tsequel\n\nsql\tsqueal\n")
    with pytest.raises(LexiconError, match="empty respelling"):
        Lexicon.parse("word\t \n")
    assert Lexicon.parse("# only comments\n\n").entries == ()


def test_phoneme_markers_exist_in_the_vocabulary_but_are_never_read_from_text(ckpt_dir):
    """The investigation the issue asks for: the fixture's tokenizer lists the markers, but
    text is never encoded to special tokens, and no official prompt uses them, so a lexicon
    may not hold them (it says why)."""
    tok = FishTokenizer.from_dir(ckpt_dir)
    start = tok._tok.token_to_id("<|phoneme_start|>")
    end = tok._tok.token_to_id("<|phoneme_end|>")
    assert start is not None and end is not None
    ids = tok.encode_text("<|phoneme_start|>s i k w ə l<|phoneme_end|>")
    assert start not in ids and end not in ids
    with pytest.raises(LexiconError, match="phoneme markers"):
        Lexicon.parse("SQL\t<|phoneme_start|>sikwəl<|phoneme_end|>\n")


def test_a_voice_lexicon_goes_over_the_global_one_and_is_kept_in_its_file(tmp_path):
    codes = torch.zeros(2, 3, dtype=torch.long)
    alice = Voice("Alice", [Reference("hi", codes)], lexicon=Lexicon.parse("SQL\tess queue ell\n"))
    bob = Voice("Bob", [Reference("hi", codes)])
    finish = Finishing.of(lexicon=Lexicon.parse(LEXICON))
    batches = finish.batches("<|speaker:0|>SQL in New York.<|speaker:1|>SQL too.",
                             [alice, bob], 300)
    assert batches[0].text == "<|speaker:0|>ess queue ell in Noo Yawk.\n<|speaker:1|>sequel too."
    loaded = Voice.load(alice.save(tmp_path / "alice.safetensors"))
    assert loaded.lexicon == alice.lexicon


def test_plan_prints_what_the_model_reads(tmp_path, capsys):
    words = tmp_path / "words.tsv"
    words.write_text(LEXICON)
    script = tmp_path / "play.txt"
    script.write_text("Alice: Meet me in New York. [pause:1s]\nBob: At the SQL bar?\n")
    assert main(["plan", "--script", str(script), "--lexicon", str(words), "--turn-by-turn",
                 "--json"]) == 0
    batches = json.loads(capsys.readouterr().out)["batches"]
    assert [(b["text"], b["silence_before"]) for b in batches] == [
        ("<|speaker:0|>Meet me in Noo Yawk.", 0.0), ("<|speaker:1|>At the sequel bar?", 1.0)]
    assert main(["plan", "Hi [pause:2]"]) == 2
    assert "[pause:2] is not a duration" in capsys.readouterr().err
    assert main(["plan", "SQL rocks. [pause:250ms] Yes.", "--lexicon", str(words)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "batch 1: sequel rocks.", "        [silence 0.25 s]", "batch 2: Yes."]


def test_the_lexicon_reaches_the_model(tiny_synth):
    """Applied before tokenisation: the prompt holds the respelling's ids, not the word's
    (the spy sits on the runtime, where every job encodes its prompts)."""
    seen = []
    runtime = tiny_synth.runtime
    original = runtime.prompt

    def spy(text, *args, **kwargs):
        seen.append(text)
        return original(text, *args, **kwargs)

    runtime.prompt = spy
    try:
        tiny_synth.tts("I love SQL.", seed=1, lexicon=Lexicon.parse(LEXICON), max_new_tokens=4)
    finally:
        del runtime.prompt
    assert seen == ["I love sequel."]
