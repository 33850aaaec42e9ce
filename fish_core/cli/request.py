"""The CLI's door: a command's flags → one checked ``speech.request.Request``, its errors said in
the flags' names (``NAMES``). Built once the voices are read (a reference clip is encoded by the
model), with the backend's ``Accepts`` (a remote engine's seed range and speakers)."""

from __future__ import annotations

import argparse

from ..speech.request import Request

LOUDNESS_HELP = "normalise to this integrated loudness, LUFS (-16 podcast, -23 broadcast)"
NAMES = {"seed": "--seed", "temperature": "--temperature", "top_p": "--top-p",
         "top_k": "--top-k", "max_new_tokens": "--max-new-tokens",
         "history_turns": "--history-turns", "max_bytes": "--max-bytes", "takes": "--takes",
         "speed": "--speed", "loudness": "--loudness", "lexicon": "--lexicon",
         "pause": "--pause", "first_frames": "--first-frames", "voice": "--voice",
         "words": "--words-language"}


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
    if getattr(args, "words", None) and kind != "stream":
        common["words"] = args.words_language
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


# ---------------------------------------------------------------- finishing: flags → keywords
def add_finishing_args(p: argparse.ArgumentParser, rate: bool = True, loudness: bool = True
                       ) -> None:
    """Finished audio (``speech.finishing``): loudness, speaking rate, lexicon."""
    g = p.add_argument_group("finished audio (docs/finished-audio.md)")
    g.add_argument("--lexicon", default=None, metavar="FILE",
                   help="pronunciation lexicon: word<TAB>respelling lines (# comments)")
    if rate:
        g.add_argument("--speed", type=float, default=1.0,
                       help="speaking rate 0.5-2.0, pitch kept (needs pedalboard)")
    if loudness:
        g.add_argument("--loudness", type=float, default=None, metavar="LUFS", help=LOUDNESS_HELP)
        g.add_argument("--loudness-per", default="mix", choices=["mix", "track", "line"],
                       help="normalise the mix, each speaker's track or each line")
        g.add_argument("--ceiling", type=float, default=-1.0, metavar="DB",
                       help="highest peak after --loudness, dB")
        g.add_argument("--sample-peak", action="store_true",
                       help="hold the ceiling as sample peak (dBFS), not true peak (dBTP)")


def finishing(args) -> dict:
    """The finishing keywords of ``tts``/``dialogue``/``subtitles``/``stream``."""
    from ..audio.loudness import Loudness, check_target
    from ..text.lexicon import Lexicon

    found: dict = {}
    if getattr(args, "lexicon", None):
        found["lexicon"] = Lexicon.load(args.lexicon, "--lexicon")
    if getattr(args, "speed", 1.0) != 1.0:
        found["speed"] = args.speed
    if getattr(args, "loudness", None) is not None:
        found["loudness"] = Loudness(check_target(args.loudness, "--loudness"), args.ceiling,
                                     not args.sample_peak, args.loudness_per)
    return found
