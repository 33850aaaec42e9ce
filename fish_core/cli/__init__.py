"""Command line: ``sailfish <command>`` (the same as ``python -m fish_core <command>``).

    say "Hello there!" -o hello.wav                       text (or --text-file, - for stdin)
    say "Hi." --voice me.safetensors -o hi.mp3            ... in a saved voice (wav flac mp3 opus)
    say "Hi." --voice me.wav --voice-text "..." -o hi.wav ... cloning a clip directly
    say "Hi." --takes 3 -o hi.wav                         three takes: hi-1.wav hi-2.wav hi-3.wav
    say --script dialogue.txt --voice alice.safetensors --voice bob.safetensors -o talk.wav
    voice encode me.wav --text "What I say." --name me -o me.safetensors
    voice register me.wav --text "What I say." --name me --remote URL --voice-consent ID
    say --script play.txt --remote URL --remote-model drama-3 -o play.wav   Drama 3 on an engine
    srt film.srt -o film.wav [--srt-out generated.srt] [--voice me.safetensors]
    say "Hi. [pause:700ms] Bye." --loudness -16 --speed 1.1 --lexicon words.tsv -o hi.wav
    plan --text-file story.txt --lexicon words.tsv        what the model will read, by batch
    book novel.epub -o novel/ --voice me.safetensors --seed 7 --loudness -18   one file per chapter
    voice from-take take2.wav --text "What the take says." -o cast.safetensors
    codes "Hello" -o codes.npy                            the semantic codes say would speak
    encode ref.wav -o ref.npy  /  decode codes.npy -o out.wav
    download s2-pro                                       fetch a model into --models-dir
    serve --port 8080 [--api-key-file F] [--voices DIR]   HTTP API (OpenAI and fish-speech)

``--model`` takes a checkpoint folder, a variant (s2-pro) or a Hugging Face repo id; downloads
go to --models-dir (default $SAILFISH_MODELS_DIR or ~/.cache/sailfish/models) and honour
HF_HUB_OFFLINE. A mistake in what was asked (a bad value, a missing file) is one ``error:``
line, checked before a model loads where it can be; ``--debug`` adds its traceback. Anything
else (a bug, out of memory) keeps its traceback.
"""

from __future__ import annotations

import sys
import traceback

try:
    import torch  # noqa: F401
except ImportError:  # `pip install .` leaves torch to you (ComfyUI owns it in its environment)
    raise SystemExit("error: Sailfish TTS needs PyTorch, which `pip install .` does not install: "
                     "pip install torch (https://pytorch.org/get-started/locally/ picks the "
                     "build for your GPU)") from None

from ..engine import threads
from ..engine.device import resolve_device
from ..params import Cancelled
from ..remote.http import RemoteError
from .commands import COMMANDS  # noqa: F401
from .progress import Bar  # noqa: F401
from .inputs import check_request, long_text_note, read_text  # noqa: F401
from .parser import (DEFAULT_MODEL, LOUDNESS_HELP, Parser, build_parser, parse, plural,  # noqa: F401
                     prog_name, shows_default, subparser)


# What a user's mistake raises: every error class of ours is a ValueError (GenerationError,
# CheckpointError, ScriptError, AudioError …) or a FileNotFoundError (ModelNotFound), and
# Ctrl-C in the progress bar is Cancelled; a remote engine's failure is a RemoteError. Anything
# else is unexpected and keeps its traceback.
USER_ERRORS = (ValueError, FileNotFoundError, Cancelled, RemoteError)


def apply_threads(args) -> int:
    """The thread policy (``engine/threads.py``), applied; on a CPU the automatic choice is
    shown (stderr), and more threads than cores warned about (by ``threads.apply``)."""
    n, why = threads.choose(args.threads)
    threads.apply(n)
    local = not getattr(args, "remote", None)
    automatic = not why.startswith(("asked", "$"))
    if local and automatic and resolve_device(args.device).type == "cpu":
        print(f"{n} CPU thread{'' if n == 1 else 's'} (auto: {why}; --threads N to choose)",
              file=sys.stderr)
    return n


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A Python warning on the command line: ``warning: ...``, not a source path and line."""
    print(f"warning: {message}", file=sys.stderr)


def main(argv=None) -> int:
    if argv is None:  # the real command line (a test calling main keeps Python's warnings)
        import warnings

        warnings.showwarning = show_warning
    args = parse(argv)
    try:
        run(args)
    except USER_ERRORS as e:
        if getattr(args, "debug", False):
            traceback.print_exc()
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # on its own line (the bar's, or the terminal's ^C, may hold the cursor)
        print(f"\nstopped (Ctrl-C): {stopped_note(args)}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `sailfish plan ... | head -3`: the reader had enough
        quiet_stdout()
        return 141  # 128 + SIGPIPE, as a shell reports it
    return 0


def run(args) -> None:
    """The command checked, run and its report printed."""
    check_request(args)
    if hasattr(args, "threads"):  # before any model runs (serve: before its scheduler)
        args.threads = apply_threads(args)
    message = COMMANDS[args.command](args)
    # With audio on stdout (say --stream -o -), the report goes to stderr.
    print(message, file=sys.stderr if getattr(args, "out", None) == "-" else sys.stdout)
    sys.stdout.flush()  # a closed pipe fails here, where it is caught, not at exit


def stopped_note(args) -> str:
    """What an interrupted command leaves behind."""
    if args.command == "book":
        return (f"the chapters finished so far are in {args.out}; the same command resumes "
                "with the next one")
    if getattr(args, "stream", False) and args.out != "-":
        from ..outputs import partial_path

        return (f"{partial_path(args.out)} holds the audio streamed so far (a partial answer; "
                f"{args.out} was not written)")
    if args.command == "serve":
        return "server stopped"
    if args.command == "download":
        return "the files downloaded so far are kept; the same command resumes"
    return "nothing was written"


def quiet_stdout() -> None:
    """Point stdout at devnull, so that Python's flush at exit finds no broken pipe (which
    would print a second traceback)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
