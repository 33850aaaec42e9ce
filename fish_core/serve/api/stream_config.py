"""The messages of ``WS /v1/audio/speech/stream`` (``speech_stream``: the protocol): their size
limits, one message parsed, ``session.config`` read into a ``StreamConfig`` (the speech route's
fields, checked by its parser into one checked request, and the session fields of SGLang-Omni and
vLLM-Omni), a sentence's request, and sentences cut from text."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...params import Rule, batch_seed
from ...text.plan import SentenceCutter
from ..http.bodies import check_size, parse_json
from ..http.errors import bad
from ..http.fields import choice, integer, reject_unknown
from ..limits import Limits
from ..request import SpeechRequest
from ..service import Service
from .openai import default_voice, instructions_prefix, parse_openai

SPLITS = ("sentence", "clause", "none")
OPENAI_CONFIG = {"model", "voice", "references", "ref_audio", "ref_text", "response_format",
                 "seed", "temperature", "top_p", "top_k", "max_new_tokens",
                 "repetition_penalty", "instructions", "speed"}
PEER_CONFIG = {"speaker", "stream_audio", "split_granularity", "task_type", "language",
               "initial_codec_chunk_frames", "non_streaming_mode", "x_vector_only_mode",
               "speaker_embedding", "word_timestamps"}  # SGLang-Omni's / vLLM-Omni's
CONFIG_FIELDS = {"type"} | OPENAI_CONFIG | PEER_CONFIG
CODEC_CHUNK_FRAMES = Rule(0, 1 << 20, integer=True)  # accepted and checked; no effect on S2


def message_limit(limits: Limits) -> int:
    """Bytes of the largest client message: a config with its inline references."""
    return max(limits.max_body_bytes, text_message_limit(limits))


def text_message_limit(limits: Limits) -> int:
    """Bytes of any message after ``session.config`` (a text piece at JSON's worst)."""
    return 12 * limits.max_text_chars + 1024


# ---------------------------------------------------------------- messages
def parse_message(data: bytes, limits: Limits) -> dict:
    """One client message (the JSON checks of request bodies: structure budget, depth, lone
    surrogates), errors naming ``message`` or the field."""
    message = parse_json(data, limits, "message")
    if not isinstance(message, dict):
        raise bad("message", f"must be a JSON object, got {type(message).__name__}")
    kind = message.get("type")
    if not isinstance(kind, str):
        raise bad("type", "every message needs a type: session.config, input.text or "
                          "input.done")
    check_size(message, len(data), limits, "message")
    return message


@dataclass
class StreamConfig:
    request: SpeechRequest  # every sentence's request but its text
    prefix: str = ""  # the instructions tag, before each sentence
    split: str = "sentence"
    stream_audio: bool = True
    format: str = "pcm"
    word_timestamps: bool = False  # each sentence's words, timed once its audio is out


def parse_config(message: dict, service: Service) -> StreamConfig:
    """``session.config`` → what every sentence is spoken with: the speech route's fields
    (checked by its parser, errors naming them) and the session fields (module docstring)."""
    reject_unknown(message, CONFIG_FIELDS)
    fields = {k: v for k, v in message.items() if k in OPENAI_CONFIG}
    speaker_as_voice(message.get("speaker"), fields)
    stream_audio = message.get("stream_audio", True)
    if not isinstance(stream_audio, bool):
        raise bad("stream_audio", f"must be true or false, got {stream_audio!r}")
    split = choice(message, "split_granularity", "sentence", SPLITS)
    peer_fields(message)
    fmt = sentence_format(fields.get("response_format", "pcm"), stream_audio)
    prefix = instructions_prefix(fields, service.limits)
    fields.pop("instructions", None)
    request = parse_openai({**fields, "response_format": fmt, "input": "-"}, service.limits,
                           service.model_names)
    check_task(message.get("task_type"), request)
    word_timestamps = message.get("word_timestamps", False)
    if not isinstance(word_timestamps, bool):
        raise bad("word_timestamps", f"must be true or false, got {word_timestamps!r}")
    return StreamConfig(default_voice(request, service), prefix, split, stream_audio,
                        request.format, word_timestamps)


def speaker_as_voice(speaker, fields: dict) -> None:
    """SGLang-Omni's ``speaker``: another name for ``voice`` (in ``fields``)."""
    if speaker is not None:
        if fields.get("voice") not in (None, speaker):
            raise bad("speaker", "is another name for voice; send one of them")
        fields["voice"] = speaker


def sentence_format(fmt: str, stream_audio: bool) -> str:
    """``response_format``: raw PCM with ``stream_audio``, else one file per sentence."""
    if stream_audio and fmt != "pcm":
        raise bad("response_format", f"stream_audio sends raw PCM (s16le, mono) as it is "
                                     f"decoded; send pcm, or stream_audio false for one "
                                     f"{fmt!r} file per sentence, got {fmt!r}")
    return fmt


def check_task(task: str | None, request: SpeechRequest) -> None:
    """``task_type``: ``Base`` clones references, ``CustomVoice`` speaks a saved voice."""
    if request.references and task == "CustomVoice":
        raise bad("task_type", "CustomVoice names a saved voice; with references send Base "
                               "(or no task_type)")
    if not request.references and task == "Base":
        raise bad("task_type", "Base clones the references (ref_audio or references); send "
                               "them, or CustomVoice with a voice")


def peer_fields(message: dict) -> None:
    """SGLang-Omni's / vLLM-Omni's session fields that S2 has no use for: accepted where they
    ask for nothing S2 cannot do, refused (naming the field) where they do."""
    language = message.get("language")
    if language is not None and (not isinstance(language, str) or len(language) > 64):
        raise bad("language", "must be a language name (S2 reads the language from the text)")
    integer(message, "initial_codec_chunk_frames", None, CODEC_CHUNK_FRAMES)
    task = choice(message, "task_type", None, ("Base", "CustomVoice", "VoiceDesign"))
    if task == "VoiceDesign":
        raise bad("task_type", "S2 does not design voices from a description; send a voice or "
                               "references (instructions take a style cue)")
    refused = {
        "x_vector_only_mode": "S2 clones a voice from the reference audio and its transcript, "
                              "never from a speaker vector alone",
        "non_streaming_mode": "is a Qwen3-TTS prompt setting; S2 has one prompt form",
    }
    for name, why in refused.items():
        value = message.get(name)
        if value is not None and not isinstance(value, bool):
            raise bad(name, f"must be true or false, got {value!r}")
        if value:
            raise bad(name, f"{why}; send false or leave it out")
    if message.get("speaker_embedding") is not None:
        raise bad("speaker_embedding", "S2 takes reference audio (ref_audio, references) or a "
                                       "saved voice, not speaker embeddings")


def sentence_request(config: StreamConfig, text: str, index: int) -> SpeechRequest:
    """Sentence ``index`` of the session: its checked settings (seed ``batch_seed(seed,
    index)``: nothing checked again), voice and references (the same objects: encoded once per
    session), PCM streamed, stretched on its own (docs/finished-audio.md); no loudness (refused
    in ``session.config``: a session's sentences are not one mix)."""
    request, text = config.request, config.prefix + text
    seed = batch_seed(request.speech.seed, index)
    return replace(request, text=text, format="pcm", stream="audio",
                   settings={**request.settings, "seed": seed}).checked()


def cut_sentences(buffer: str) -> tuple[list[str], str]:
    """The complete sentences at the start of ``buffer`` and the text left (``text.plan``'s
    sentence rule; a sentence that reaches the end of the buffer may still grow)."""
    cutter = SentenceCutter()
    done = cutter.feed(buffer)
    return done, cutter.pending
