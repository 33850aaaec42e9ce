"""The local and the remote synthesizer implement one interface (``fish_core.speech.front``):
the same methods, keywords and defaults, and the same error for a keyword neither knows."""

import inspect

import pytest

from fish_core import Synthesizer
from fish_core.params import DEFAULTS, SamplingParams
from fish_core.remote import RemoteSynthesizer
from fish_core.speech.front import SpeechSynthesizer

METHODS = ["tts", "stream", "dialogue", "subtitles", "encode_voice", "release_caches"]


def parameters(cls, name):
    return [(p.name, p.kind, p.default) for p in inspect.signature(getattr(cls,
                                                                           name)).parameters.values()]


@pytest.mark.parametrize("cls", [Synthesizer, RemoteSynthesizer])
@pytest.mark.parametrize("name", METHODS)
def test_signatures_follow_the_protocol(cls, name):
    assert parameters(cls, name) == parameters(SpeechSynthesizer, name)


def test_both_are_speech_synthesizers(tiny_synth):
    remote = RemoteSynthesizer("http://127.0.0.1:9", "sailfish")
    assert isinstance(tiny_synth, SpeechSynthesizer)
    assert isinstance(remote, SpeechSynthesizer)


def test_options_defaults_and_checks_live_in_params():
    assert SamplingParams.from_options({}, "tts") == DEFAULTS
    assert SamplingParams.from_options({"top_k": 5}, "tts").top_k == 5
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams.from_options({"temperature": 0}, "tts")


@pytest.mark.parametrize("name, args", [("tts", ("Hi.",)), ("stream", ("Hi.",)),
                                        ("dialogue", ("A: Hi.",)),
                                        ("subtitles", ("1\n00:00:00,000 --> 00:00:01,000\nHi.\n",
                                                       ))])
def test_a_misspelt_keyword_is_the_same_error_on_both(tiny_synth, name, args):
    """Raised before anything is generated or sent (the remote URL is never reached)."""
    remote = RemoteSynthesizer("http://127.0.0.1:9", "sailfish")
    errors = []
    for synth in (tiny_synth, remote):
        with pytest.raises(TypeError) as info:
            getattr(synth, name)(*args, temprature=0.5)
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    assert "'temprature'" in errors[0] and name in errors[0]
