"""hearing/scoring.py on hand-made pairs: word error rate, character error rate for CJK, the
same normalisation on both sides, the words that differ."""

import pytest

from fish_core.hearing.scoring import Difference, normalise, score


def test_same_words_score_zero_whatever_the_case_and_punctuation():
    s = score("The quick brown fox — jumps!", "the quick, brown fox jumps")
    assert (s.rate, s.errors, s.length, s.unit, s.differences) == (0.0, 0, 5, "word", ())
    assert score("Don’t stop.", "dont stop").rate == 0.0
    assert normalise("ＡＢＣ  Hello,World") == "abc hello world"


def test_substitution_deletion_insertion():
    s = score("The quick brown fox jumps over the dog.", "The quack brown fox over the the dog")
    assert s.unit == "word" and s.length == 8 and s.errors == 3
    assert s.rate == pytest.approx(3 / 8)
    assert s.differences == (Difference("quick", "quack"), Difference("jumps", ""),
                             Difference("", "the"))


def test_whole_phrase_differs():
    s = score("a b c", "x y z")
    assert s.rate == 1.0 and s.differences == (Difference("a b c", "x y z"),)


def test_chinese_by_character_latin_word_inside_is_one_unit():
    s = score("我今天用 iPhone 拍了三张照片，效果非常好。", "我今天用iPhone拍了三张照片效果很好")
    assert s.unit == "char" and s.length == 16  # 15 characters + "iphone"
    assert s.errors == 2 and s.differences == (Difference("非常", "很"),)
    assert (score("我用 iPhone 拍照", "我用 android 拍照").differences
            == (Difference("iphone", "android"),))


def test_japanese_and_korean_by_character():
    s = score("今日はとても良い天気ですね。", "今日はとても良い天気です")
    assert (s.unit, s.errors, s.length) == ("char", 1, 13)
    assert s.differences == (Difference("ね", ""),)
    k = score("안녕하세요 반갑습니다", "안녕하세요 반갑니다")
    assert (k.unit, k.errors, k.length, k.differences) == ("char", 1, 10, (Difference("습", ""),))


def test_empty_sides():
    assert score("", "").rate == 0.0
    nothing_heard = score("two words", "")
    assert nothing_heard.rate == 1.0 and nothing_heard.differences == (Difference("two words", ""),)
    assert score("", "hello there").rate == 2.0
