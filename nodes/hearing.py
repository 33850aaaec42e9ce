"""Transcribe: what a clip says (Qwen3-ASR) and, when asked, when each word is said
(Qwen3-ForcedAligner): the models of ``fish_core.hearing``, downloaded on first use into the
first ``fish_speech`` models folder. With a model connected they are that model's (loaded with
it, freed with it by the model manager); without one, the pack keeps one set loaded."""

from __future__ import annotations

import json

from .audio import from_audio
from .remote import RemoteHandle
from .runner import loaded
from .schema import MODEL, Boolean, Node, Output, Socket, String

MAX_CONTEXT = 2000  # characters of the context hint typed into the node
_own = None  # the pack's listener when no model is connected


def own_listener():
    """The pack's one listener (a model's own is freed with it; this one stays loaded)."""
    global _own
    if _own is None:
        from ..fish_core.local.listener import Listener
        from .paths import MODELS, roots

        _own = Listener(models_dir=roots(MODELS)[0], download=True)
    return _own


def transcribe(audio, language="", words=False, context="", model=None):
    given = from_audio(audio, "audio")
    language = language.strip() if isinstance(language, str) and language.strip() else None
    if not isinstance(context, str) or len(context) > MAX_CONTEXT:
        raise ValueError(f"context: expected a text of at most {MAX_CONTEXT} characters")
    if isinstance(model, RemoteHandle):
        raise ValueError("model: a remote engine has no speech recogniser; connect a local "
                         "model or none")
    wave = given["audio"]
    wave = wave[0] if getattr(wave, "ndim", 0) == 3 else wave  # item 0 of an AUDIO batch

    def hear(listener):
        return listener.hear(wave, int(given["sample_rate"]), language, context, bool(words))

    if model is None:
        heard = hear(own_listener())
    else:
        with loaded(model) as synth:
            heard = hear(synth.listener)
    if not heard.complete:
        print("[Sailfish] Transcribe: a piece ran out of tokens before it ended; the "
              "transcript is cut short")
    timed = [{"text": w.text, "start": w.start, "end": w.end} for w in heard.words or ()]
    return heard.text, heard.language, json.dumps(timed, ensure_ascii=False)


TRANSCRIBE = Node(
    "SailfishTranscribe", "Sailfish Transcribe",
    "What a clip says (Qwen3-ASR-0.6B: 30 languages and 22 Chinese dialects), and with words "
    "on, when each word is said (Qwen3-ForcedAligner-0.6B, 11 languages). Both are downloaded "
    "on first use into the fish_speech models folder. A recognised transcript can be wrong: "
    "read it before you use it.",
    inputs=[Socket("audio", "AUDIO", "The clip (any sample rate, mono or stereo; item 0 of a "
                   "batch)."),
            String("language", "The language spoken (e.g. English, Chinese); empty: detected."),
            Boolean("words", False, "Also time every word (the aligner; the clip is heard in "
                    "pieces of at most 3 minutes)."),
            String("context", "Words to expect (names, terms): a hint to the recogniser.",
                   multiline=True, optional=True, advanced=True),
            Socket("model", MODEL, "A Sailfish model whose recogniser to use (loaded and "
                   "freed with it). Unconnected: the pack keeps one loaded.", optional=True)],
    outputs=[Output("STRING", "text", "The transcript."),
             Output("STRING", "language", "The language heard (several: comma separated)."),
             Output("STRING", "words", "JSON: [{text, start, end}] in seconds (empty list "
                    "without words).")],
    execute=transcribe,
)
