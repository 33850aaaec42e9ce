"""The CLI's door: a command's flags → one checked ``speech.request.Request``, its errors said in
the flags' names (``NAMES``). Built once the voices are read (a reference clip is encoded by the
model), with the backend's ``Accepts`` (a remote engine's seed range and speakers)."""

from __future__ import annotations

from ..speech.request import Request

NAMES = {"seed": "--seed", "temperature": "--temperature", "top_p": "--top-p",
         "top_k": "--top-k", "max_new_tokens": "--max-new-tokens",
         "history_turns": "--history-turns", "max_bytes": "--max-bytes", "takes": "--takes",
         "speed": "--speed", "loudness": "--loudness", "lexicon": "--lexicon",
         "pause": "--pause", "first_frames": "--first-frames", "voice": "--voice"}


def in_flag_names(error: ValueError) -> ValueError:
    """``error`` with the flag of the field it starts with before it (``--top-k: top_k must
    be …``)."""
    text = str(error)
    for field, flag in NAMES.items():
        if text.startswith((field + " ", field + ":")):
            return ValueError(f"{flag}: {text}")
    return error


def sampling(args) -> dict:
    return dict(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                max_new_tokens=args.max_new_tokens, seed=args.seed,
                history_turns=args.history_turns)


def build(kind: str, args, synth, text: str, voices: list, finishing: dict) -> Request:
    """``say`` (tts, or dialogue with ``--script``), ``say --stream`` (``stream``) or ``srt``
    (``subtitles``) as one Request."""
    common = dict(accepts=synth.accepts, **sampling(args), **finishing)
    try:
        if kind == "subtitles":
            return Request.subtitles(text, voices[0] if voices else None, **common)
        takes = args.takes if args.takes > 1 else None
        if kind == "dialogue":
            return Request.dialogue(text, voices, pause=args.pause, max_bytes=args.max_bytes,
                                    takes=takes, **common)
        if kind == "stream":
            return Request.tts(text, voices, max_bytes=args.max_bytes,
                               first_frames=args.first_frames, where="stream", **common)
        return Request.tts(text, voices, max_bytes=args.max_bytes, takes=takes, **common)
    except ValueError as e:
        raise in_flag_names(e) from None
