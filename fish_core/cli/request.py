"""The CLI's door: a command's flags → one checked ``speech.settings.Settings``, made before the
model loads (``settings``; with the text checked too: ``check``), then one ``Request`` once the
voices are read (``build``: a reference clip is encoded by the model), with the backend's
``Accepts`` (a remote engine's seed range and speakers). Errors are said in the flags' names
(``NAMES``)."""

from __future__ import annotations

import argparse

from ..audio.stretch import SPEED
from ..params import RequestError
from ..speech.request import Request
from ..speech.settings import Settings

LOUDNESS_HELP = "normalise to this integrated loudness, LUFS (-16 podcast, -23 broadcast)"
NAMES = {"seed": "--seed", "temperature": "--temperature", "top_p": "--top-p",
         "top_k": "--top-k", "max_new_tokens": "--max-new-tokens",
         "history_turns": "--history-turns", "max_bytes": "--max-bytes", "takes": "--takes",
         "speed": "--speed", "loudness": "--loudness", "lexicon": "--lexicon",
         "ceiling": "--ceiling", "loudness_per": "--loudness-per",
         "pause": "--pause", "first_frames": "--first-frames", "voice": "--voice",
         "words": "--words-language", "check": "--check"}
# The settings each flag gives (``Settings.of``'s keywords), when the command has the flag.
FLAGS = ("seed", "temperature", "top_p", "top_k", "max_new_tokens", "history_turns",
         "max_bytes", "first_frames")


def in_flag_names(error: ValueError) -> ValueError:
    """``error`` led by the flag of its field (``--top-k: top_k must be …``)."""
    text = str(error)
    flag = NAMES.get(error.field) if isinstance(error, RequestError) else None
    if flag is None or text.startswith(flag):
        return error
    return RequestError(flag, error.rule, error.value, f"{flag}: {text}")


def settings(args, where: str) -> Settings:
    """The command's settings from its flags, checked (before any model loads): ``where`` is
    the kind of call (``tts``, ``stream``, ``dialogue``, ``subtitles``)."""
    options = {name: getattr(args, name) for name in FLAGS if hasattr(args, name)}
    if where == "subtitles":
        options.pop("max_bytes", None)
    if where != "stream":
        options.pop("first_frames", None)
    if where in ("tts", "dialogue") and getattr(args, "takes", 1) > 1:
        options["takes"] = args.takes
    if where != "stream" and getattr(args, "words", None):
        options["words"] = args.words_language
    if getattr(args, "check", False):
        if where not in ("tts", "dialogue"):
            raise ValueError(f"--check hears whole takes; {where_flag(where)} cannot be checked")
        options["check"] = True
    try:
        return Settings.of(where=where, **options, **finishing(args))
    except ValueError as e:
        raise in_flag_names(e) from None


def where_flag(where: str) -> str:
    return {"stream": "--stream", "subtitles": "srt"}.get(where, where)


def check(kind: str, args, text: str) -> Settings:
    """The settings of ``say`` (tts, dialogue with ``--script``, ``--stream``) or ``srt``
    (subtitles) and its text, script or subtitles (pause tags, cues, speaker lines), checked
    before the model loads; the voices are checked when the request is built (``build``)."""
    found = settings(args, kind)
    try:
        if kind == "dialogue":
            Request.dialogue(text, (), found, pause=args.pause, require_voices=False)
        elif kind == "subtitles":
            Request.subtitles(text, None, found)
        else:
            Request.tts(text, None, found, where=kind)
    except ValueError as e:
        raise in_flag_names(e) from None
    return found


def build(kind: str, args, synth, text: str, voices: list, settings: Settings) -> Request:
    """``say`` (tts, or dialogue with ``--script``), ``say --stream`` (``stream``) or ``srt``
    (``subtitles``) as one Request, on the checked ``settings``."""
    try:
        if kind == "subtitles":
            return Request.subtitles(text, voices[0] if voices else None, settings,
                                     accepts=synth.accepts)
        if kind == "dialogue":
            return Request.dialogue(text, voices, settings, pause=args.pause,
                                    accepts=synth.accepts)
        return Request.tts(text, voices, settings, accepts=synth.accepts, where=kind)
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
                       help=f"speaking rate {SPEED.interval}, pitch kept (needs pedalboard)")
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
        try:
            found["loudness"] = Loudness(check_target(args.loudness), args.ceiling,
                                         not args.sample_peak, args.loudness_per)
        except ValueError as e:
            raise in_flag_names(e) from None
    return found
