"""The speech request as a dialect reads it from the wire (``SpeechRequest``, its ``Reference``
items: what ``api.openai.parse_openai``, ``api.fish.parse_fish`` and the speech stream's sessions
build) and the checked speech ``Request`` it carries.

A dialect reads the JSON types of its fields (``http.fields``) into ``settings``, named as
``speech.request.Request.tts`` names them; ``to_request`` builds the ``Request`` from them once,
at parse time (as vLLM's ``to_sampling_params``), so a setting out of its range is a 400 before
the request is queued, said in the dialect's field names (``names``). The ranges are the
``Request``'s rules, nothing here repeats them; the operator's cap on ``max_new_tokens``
(``Limits``) is this door's own policy.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..audio.stretch import SpeedError, import_pedalboard
from ..params import DEFAULTS, SAMPLING_RULES, FieldError, RequestError, Rule
from ..speech.request import Request, spoken_text
from .http.errors import ApiError, bad, detail
from .http.fields import audio_bytes, decode_reference, integer, number, outside, text_field
from .limits import Limits

if TYPE_CHECKING:  # the loaded model's: imported with the model, not with the service
    from ..local.runtime import Runtime

REPETITION_PENALTY = Rule(0.9, 2.0)  # both dialects accept it and check it; S2 samples with RAS


@dataclass
class Reference:
    audio: bytes  # an encoded audio file (wav, flac, ogg …)
    text: str
    param: str = "references[0].audio"  # the field that sent the audio, for errors
    # The clips encoded from it, and the model that encoded them: a WebSocket session speaks
    # every sentence with the same Reference objects, so each is encoded once per session.
    _encoded: tuple = field(default=(), repr=False, compare=False)

    def clips(self, runtime: Runtime, limits: Limits) -> list:
        """The reference encoded by ``runtime``'s codec (on the scheduler's thread), once per
        model: a model loaded again (ComfyUI's Free memory) encodes it again."""
        if self._encoded and self._encoded[0]() is runtime:
            return self._encoded[1]
        wave, sample_rate = decode_reference(self.audio, self.param, limits)
        clips = runtime.encode_voice(wave, self.text, sample_rate=sample_rate).clips
        self._encoded = (weakref.ref(runtime), clips)
        return clips


@dataclass
class SpeechRequest:
    text: str
    voice: str | None = None  # a saved voice's name
    voice_param: str = "voice"  # the field that named it
    references: list[Reference] = field(default_factory=list)
    format: str = "wav"
    stream: str | None = None  # None, "audio" or "sse"
    # Word timing (``speech.words``): the answer made whole, then sent as server-sent events
    # a text batch at a time with its words' alignment: "fish" (``/v1/tts/stream/with-
    # timestamp``'s events) or "openai" (``speech.audio.delta`` + ``speech.audio.alignment``).
    timed: str | None = None
    text_param: str = "text"  # the field that held the text ("input" in OpenAI's dialect)
    prefix: str = ""  # a style cue's tag said before the text (OpenAI's ``instructions``)
    # The wire's settings under ``Request.tts``'s keywords (JSON types checked), and the wire
    # name of each keyword the dialect names otherwise (fish-speech's ``chunk_length``).
    settings: dict = field(default_factory=dict)
    names: dict = field(default_factory=dict)
    speech: Request | None = None  # the checked request: ``to_request``

    def to_request(self, limits: Limits | None = None) -> Request:
        """The speech ``Request`` of this wire request, checked by its rules (the text's too:
        the wire checked its JSON type only; its pause tags taken apart once, here) and
        ``limits``' text cap (this door's); an error is a 4xx naming the wire field. Speed
        needs pedalboard (a 422 naming ``speed`` without it)."""
        if limits is not None and len(self.text) > limits.max_text_chars:
            raise bad(self.text_param, f"is {len(self.text)} characters; the limit is "
                                       f"{limits.max_text_chars}")
        try:
            if self.prefix:  # the text must have words of its own, not only the cue's tag
                spoken_text(self.text, "text")
            speech = Request.tts(self.prefix + self.text, **self.settings)
        except RequestError as e:
            raise wire_error(e, {"text": self.text_param, **self.names}) from None
        if speech.settings.check and self.stream is not None:
            raise bad("check", "a streamed answer cannot be checked (it is heard whole): "
                               "leave out check or stream")
        if speech.finishing.stretches:
            try:  # a speed this server cannot make: 422 naming the field, before any work
                import_pedalboard("speed")
            except SpeedError as e:
                raise ApiError(422, detail(e), "speed") from None
        return speech

    def checked(self, limits: Limits | None = None) -> "SpeechRequest":
        """This request with its speech ``Request`` (``to_request``), as a dialect hands it on."""
        self.speech = self.to_request(limits)
        return self


def wire_error(error: RequestError, names: dict) -> ApiError:
    """A ``Request``'s error in the wire's words: the field as the dialect names it, a range
    as ``must lie in <interval>``."""
    param = names.get(error.field, error.field)
    if error.rule is not None and not isinstance(error, FieldError):  # not in its own words
        return outside(param, error.rule, error.value)
    return bad(param, detail(str(error).removeprefix(error.field).lstrip(": ")))


# ---------------------------------------------------------------- both dialects
def references(body: dict, name: str, limits: Limits) -> list[Reference]:
    """``[{audio, text}]`` (fish-speech, ours) or ``[{audio_path, text}]`` (SGLang-Omni, with
    ``audio_path`` a ``data:`` URL); errors name the key the item used."""
    items = body.get(name)
    if items is None:
        return []
    if not isinstance(items, list):
        raise bad(name, f"must be a list of {{audio, text}}, got {type(items).__name__}")
    if len(items) > limits.max_references:
        raise bad(name, f"has {len(items)} items; the limit is {limits.max_references}")
    return [reference(item, f"{name}[{i}]", limits) for i, item in enumerate(items)]


def reference(item, where: str, limits: Limits) -> Reference:
    """One ``{audio, text}`` or ``{audio_path, text}`` item of a references list."""
    if not isinstance(item, dict):
        raise bad(where, "must be an object {audio, text}")
    unknown = sorted(set(item) - {"audio", "audio_path", "text"})
    if unknown:
        raise bad(f"{where}.{unknown[0]}", "unrecognized reference field (send audio or "
                                           "audio_path, and text)")
    if "audio" in item and "audio_path" in item:
        raise bad(f"{where}.audio_path", "send either audio or audio_path, not both")
    key = "audio_path" if "audio_path" in item else "audio"
    audio = audio_bytes(item.get(key), f"{where}.{key}")
    return Reference(audio, text_field(item, "text", limits, param=f"{where}.text"),
                     f"{where}.{key}")


SETTINGS = {"seed", "temperature", "top_p", "top_k", "max_new_tokens", "speed", "loudness",
            "check"}


def settings(body: dict, limits: Limits) -> dict:
    """The settings both dialects take (``Request.tts``'s keywords; JSON types checked here,
    ranges by the ``Request``): seed, sampling, and the finishing extensions speed and
    loudness (LUFS): the fields ``SETTINGS`` every dialect declares. ``max_new_tokens`` is
    capped by the operator (``Limits``)."""
    cap = limits.max_new_tokens
    max_new_tokens = integer(body, "max_new_tokens", min(DEFAULTS.max_new_tokens, cap))
    allowed = Rule(1, min(cap, SAMPLING_RULES["max_new_tokens"].high), integer=True)
    if not allowed.holds(max_new_tokens):  # the rule, under the operator's cap (this door's)
        raise outside("max_new_tokens", allowed, max_new_tokens)
    return dict(seed=integer(body, "seed"),
                temperature=number(body, "temperature", DEFAULTS.temperature),
                top_p=number(body, "top_p", DEFAULTS.top_p),
                top_k=integer(body, "top_k", DEFAULTS.top_k),
                max_new_tokens=max_new_tokens,
                speed=number(body, "speed", 1.0), loudness=number(body, "loudness"),
                check=False if body.get("check") is None else body["check"])
