"""The command line's parser: argparse, its flags by group and one parser per command (the usage
text is the package's docstring)."""

from __future__ import annotations

import argparse
import copy
import difflib
import re
import sys

from ..loading import hub
from ..engine.device import PRECISIONS
from ..params import DEFAULTS, FIRST_FRAMES, SAMPLING_RULES
from ..outputs import (AUDIO_SUFFIXES)
from .request import LOUDNESS_HELP, add_finishing_args  # noqa: F401
from ..speech.results import MAX_TAKES
from .transcribe import add_transcribe_command


DEFAULT_MODEL = "s2-pro"
CODEC_FRAME_RATE = 44100 / 2048  # S2's codec, for a progress estimate without one loaded


def shows_default(action: argparse.Action) -> bool:
    default = action.default
    return (bool(action.option_strings) and action.nargs != 0 and default is not None
            and default is not False and default not in ([], "", argparse.SUPPRESS))


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help says its default (an option without help gets one saying it)."""

    def _format_action(self, action):
        if not action.help and shows_default(action):
            action = copy.copy(action)
            action.help = "(default: %(default)s)"
        return super()._format_action(action)

    def _get_help_string(self, action):
        text = action.help or ""
        if shows_default(action) and "default" not in text:
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """argparse that says "did you mean …" for a mistyped command, choice or flag."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    argv: list[str] = []  # what was typed (``parse``), for the flags a "required" error hides

    def error(self, message):
        """The mistake, its "did you mean", and a one-line usage (``--help`` has the rest)."""
        hint = did_you_mean(self, message, Parser.argv)
        self.exit(2, f"usage: {short_usage(self)}   ({self.prog} --help: every option)\n"
                     f"{self.prog}: error: {message}{hint}\n")


def short_usage(parser: argparse.ArgumentParser) -> str:
    """``sailfish say [options] [text]``: the command and its positional arguments only."""
    words = [parser.prog, "[options]"]
    for action in parser._actions:
        if action.option_strings or action.help == argparse.SUPPRESS:
            continue
        name = action.metavar or action.dest
        if isinstance(action, argparse._SubParsersAction):
            name = f"{name} ..."
        words.append(f"[{name}]" if action.nargs in ("?", "*") else name)
    return " ".join(words)


def did_you_mean(parser: argparse.ArgumentParser, message: str, argv: list[str]) -> str:
    """`` (did you mean --temperature?)`` for the closest known name, or ""."""
    choice = re.search(r"invalid choice: '([^']*)'", message)
    known = [o for a in parser._actions for o in a.option_strings]
    if choice:
        wrong = [choice.group(1)]
        known = [str(c) for a in parser._actions if a.choices for c in a.choices]
    elif message.startswith("unrecognized arguments: "):
        wrong = [w.split("=")[0] for w in message.split(": ", 1)[1].split() if w.startswith("-")]
    elif message.startswith("the following arguments are required"):  # a mistyped one?
        wrong = [w.split("=")[0] for w in argv if w.startswith("--")
                 and not any(o.startswith(w.split("=")[0]) for o in known)]
    else:
        return ""
    hints = [m[0] for w in wrong if (m := difflib.get_close_matches(w, known, n=1, cutoff=0.6))]
    return f" (did you mean {' / '.join(dict.fromkeys(hints))}?)" if hints else ""


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 batch``, ``2 batches``, ``1 chapter``, ``3 chapters``."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def prog_name() -> str:
    return "python -m fish_core" if sys.argv[0].endswith("__main__.py") else "sailfish"


def quantization_modes() -> list[str]:
    """The modes ``quant`` offers (the Model Loader node lists the same)."""
    from ..loading.siblings import quant

    return list(quant.MODES)


def add_model_args(p: argparse.ArgumentParser, precision: bool = True, engine: bool = True
                   ) -> None:
    """Where the model is and its device; ``precision`` and the ``engine`` options (quantization,
    compile) only for the commands that use them."""
    g = p.add_argument_group("model")
    g.add_argument("--model", default=DEFAULT_MODEL,
                   help="checkpoint folder, variant (%s) or Hugging Face repo id (owner/name)"
                        % ", ".join(hub.VARIANTS))
    g.add_argument("--models-dir", default=None,
                   help=f"where downloaded models live (default {hub.DEFAULT_MODELS_DIR})")
    g.add_argument("--no-download", action="store_true",
                   help="never download; a model that is not here is an error")
    g.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1 or mps")
    g.add_argument("--threads", default=None, metavar="N",
                   help="CPU threads (default auto: the free physical cores; docs/cpu.md)")
    if precision:
        g.add_argument("--precision", default="auto", choices=PRECISIONS,
                       help="weights' dtype (auto: bf16; fp16 on a GPU without bf16)")
    if engine:
        add_engine_args(g)


def add_engine_args(g) -> None:
    """How the weights are run: quantization and ``torch.compile``."""
    g.add_argument("--quantization", default="none", choices=quantization_modes(),
                   help="quantize the weights while loading (README: requirements)")
    g.add_argument("--compile", nargs="?", const="on", default="off", choices=("off", "on", "auto"),
                   help="torch.compile the decode step (--compile alone: on). On a CPU compiled "
                        "decoding can be slower than eager (it warns), and bf16 weights (packed "
                        "for oneDNN) do not compile: they decode eagerly, the faster there; auto "
                        "compiles on CUDA and, on a CPU, times both on the first frame, keeps "
                        "the faster and says which")
    g.add_argument("--compile-cache", default=None,
                   help="persistent folder for compiled kernels ($SAILFISH_COMPILE_CACHE)")


def add_remote_args(p: argparse.ArgumentParser) -> None:
    """Run on a remote S2 engine instead of a local model (``RemoteSynthesizer``)."""
    from ..remote.dialects import DIALECTS

    g = p.add_argument_group("remote engine")
    g.add_argument("--remote", default=None, metavar="URL",
                   help="speak through this engine (several: space/comma separated) instead "
                        "of loading a model; --model etc. are then ignored")
    g.add_argument("--dialect", default="auto", choices=["auto", *DIALECTS],
                   help="the engine's API (auto: ask /v1/models, /v1/health)")
    g.add_argument("--api-key-file", default=None, help="read the engine's API key from here")
    g.add_argument("--api-key-env", default=None,
                   help="read the API key from this variable (default SAILFISH_REMOTE_API_KEY)")
    g.add_argument("--remote-model", default=None, metavar="NAME",
                   help="the engine's model (s2-pro, drama-3, ...; default: the first its "
                        "/v1/models lists)")
    g.add_argument("--register-voices", action="store_true",
                   help="register reference voices in the engine's voice store once, then "
                        "name them by id (SGLang-Omni/vLLM-Omni need --voice-consent)")
    g.add_argument("--voice-consent", default=None, metavar="TEXT",
                   help="the consent id or statement of the person whose voice is registered; "
                        "never sent unless given here")


def add_sampling_args(p: argparse.ArgumentParser, batches: bool = True, history: bool = True
                      ) -> None:
    """Sampling options; ``batches`` (text batch size) and ``history`` (context turns) only for
    the commands that plan batches."""
    g = p.add_argument_group("sampling")
    g.add_argument("--temperature", type=float, default=DEFAULTS.temperature,
                   help=f"randomness of each frame, in {SAMPLING_RULES['temperature'].interval}")
    g.add_argument("--top-p", type=float, default=DEFAULTS.top_p,
                   help="nucleus sampling: keep the likeliest codes up to this probability")
    g.add_argument("--top-k", type=int, default=DEFAULTS.top_k,
                   help="keep at most this many codes per frame")
    g.add_argument("--max-new-tokens", type=int, default=DEFAULTS.max_new_tokens,
                   help="frames per text batch, at most (~21.5 per second of audio)")
    g.add_argument("--seed", type=int, default=None,
                   help="same seed, same audio (default: a random one, printed)")
    if batches:
        g.add_argument("--max-bytes", type=int, default=300,
                       help="text batch size in UTF-8 bytes (long text is split at sentences)")
    if history:
        g.add_argument("--history-turns", type=int, default=3,
                       help="earlier batches the model hears again as context")


def add_words_args(p: argparse.ArgumentParser, book: bool = False) -> None:
    """Word timing (``speech.words``): the words file, their language, the aligner."""
    g = p.add_argument_group("word timing (docs/word-timing.md)")
    where = ("the whole book, chapters one after another; each chapter's words also go beside "
             "it as NAME.words.json" if book else "times follow the audio file")
    g.add_argument("--words", default=None, metavar="FILE",
                   help=f"write the spoken words with their times ({where}): .json (every "
                        "word), .srt / .vtt (caption lines), .karaoke.vtt (a cue per line, "
                        "each word timed)")
    g.add_argument("--words-language", default="auto", metavar="LANG",
                   help="the words' language: auto (by script; another script is timed per "
                        "sentence) or Chinese, English, Cantonese, French, German, Italian, "
                        "Japanese, Korean, Portuguese, Russian, Spanish")
    g.add_argument("--aligner", default=None, metavar="FOLDER",
                   help="a Qwen3-ForcedAligner-0.6B folder (default: downloaded into "
                        "--models-dir on first use)")


def add_voice_args(p: argparse.ArgumentParser, many: bool) -> None:
    """``--voice``: a saved voice file or a reference clip with ``--voice-text``."""
    if many:
        p.add_argument("--voice", action="append", default=[], metavar="FILE",
                       help="a voice file (.safetensors, from `voice encode`) or a reference "
                            "clip (.wav .flac .mp3 ...) with its --voice-text; repeat for "
                            "several speakers; with --remote, a name that is no file is one of "
                            "the engine's voices")
        p.add_argument("--voice-text", action="append", default=[], metavar="TEXT",
                       help="the words spoken in a --voice clip (one per clip, in order); a "
                            "clip without one is transcribed by Qwen3-ASR (check it)")
        p.add_argument("--ref-audio", action="append", default=[], metavar="CLIP",
                       help="a reference clip (repeatable); the same as --voice CLIP")
        p.add_argument("--ref-text", action="append", default=[], metavar="TEXT",
                       help="its transcript; the same as --voice-text")
    else:
        p.add_argument("--voice", default=None, metavar="FILE",
                       help="a voice file (.safetensors) or a reference clip with --voice-text "
                            "(with --remote, a name that is no file: the engine's voice)")
        p.add_argument("--voice-text", default=None, metavar="TEXT",
                       help="the words spoken in the --voice clip (default: transcribed by "
                            "Qwen3-ASR; check it)")
    add_asr_arg(p)


def add_asr_arg(p: argparse.ArgumentParser) -> None:
    """``--asr FOLDER``: the speech recogniser for a clip without its transcript (and checked
    takes); default Qwen3-ASR-0.6B in --models-dir, downloaded when first needed."""
    p.add_argument("--asr", default=None, metavar="FOLDER",
                   help="a Qwen3-ASR folder, for a clip without its transcript (default: "
                        "Qwen3-ASR-0.6B in --models-dir, downloaded when first needed)")


def debug_flag() -> argparse.ArgumentParser:
    """``--debug``, accepted before the command and after it (SUPPRESS: a sub-command that is
    not given it leaves the value the main parser set)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the traceback of every error")
    return p


def add_say_command(add_command, common: list) -> None:
    p = add_command("say", "text to speech")
    p.add_argument("text", nargs="?", help="the text (or use --text-file / --script)")
    p.add_argument("--text-file", metavar="FILE",
                   help="read the text from this file (- : stdin; piped text needs no flag)")
    p.add_argument("--script", metavar="FILE",
                   help="a multi-speaker script file ([speaker_1]: / Name: lines; - : stdin)")
    add_voice_args(p, many=True)
    p.add_argument("--pause", type=float, default=0.0, help="silence between script turns (s)")
    p.add_argument("-o", "--out", required=True,
                   help=f"output file: {' '.join(AUDIO_SUFFIXES)}")
    add_takes_args(p)
    add_stream_args(p)
    add_model_args(p)
    add_remote_args(p)
    add_sampling_args(p)
    add_finishing_args(p)
    add_words_args(p)


def add_takes_args(p: argparse.ArgumentParser) -> None:
    """``say``'s takes: how many, heard and scored, the best one picked."""
    p.add_argument("--takes", type=int, default=1, metavar="N",
                   help=f"generate N takes at once (1..{MAX_TAKES}; take k seeded seed + k), "
                        "written as NAME-1.wav ... NAME-N.wav")
    p.add_argument("--check", action="store_true",
                   help="hear every take (Qwen3-ASR, --asr FOLDER) and score it against the "
                        "text: word error rate (characters for Chinese, Japanese, Korean) and "
                        "the words that differ")
    p.add_argument("--pick", default="all", choices=["all", "best"],
                   help="with --check: best writes only the take that says most nearly what "
                        "was asked, to -o")


def add_stream_args(p: argparse.ArgumentParser) -> None:
    """``say --stream``: audio written as it is generated."""
    p.add_argument("--stream", action="store_true",
                   help="write audio as it is generated: .wav or .pcm (16-bit), or - for stdout")
    p.add_argument("--stream-format", default="wav", choices=["wav", "pcm"],
                   help="what --stream writes to stdout")
    p.add_argument("--first-frames", type=int, default=FIRST_FRAMES,
                   help="--stream: first audio after this many frames")


def add_plan_command(add_command, common: list) -> None:
    p = add_command("plan", help="print the text batches the model will read (after the "
                                 "lexicon, pauses and speaker tags); loads no model")
    p.add_argument("text", nargs="?", help="the text (or use --text-file / --script)")
    p.add_argument("--text-file", metavar="FILE",
                   help="read the text from this file (- : stdin; piped text needs no flag)")
    p.add_argument("--script", metavar="FILE",
                   help="a multi-speaker script file (- : stdin)")
    p.add_argument("--voice", action="append", default=[],
                   help="voice .safetensors (names the script's speakers; its own lexicon)")
    p.add_argument("--pause", type=float, default=0.0, help="silence between script turns (s)")
    p.add_argument("--turn-by-turn", action="store_true", help="each script turn on its own")
    p.add_argument("--max-bytes", type=int, default=300, help="text batch size in UTF-8 bytes")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_finishing_args(p, rate=False, loudness=False)


def add_book_command(add_command, common: list) -> None:
    p = add_command("book", help="speak a .txt/.md/.epub book, one audio file per chapter "
                                 "(resumes an interrupted run)")
    p.add_argument("book", help="the book: .txt, .md or .epub")
    p.add_argument("-o", "--out", required=True, help="output folder")
    add_voice_args(p, many=False)
    p.add_argument("--format", default="wav", choices=["wav", "flac"], help="chapter files")
    p.add_argument("--check", action="store_true",
                   help="hear every chapter (Qwen3-ASR, --asr FOLDER) and score it against "
                        "its text")
    p.add_argument("--retake-above", type=float, default=None, metavar="RATE",
                   help="with --check: speak a chapter heard more than RATE off (0.1: one "
                        "word in ten) again with the next seeds, keeping the best")
    p.add_argument("--retakes", type=int, default=2, metavar="N",
                   help="--retake-above: at most N retakes a chapter (1..5)")
    add_model_args(p)
    add_remote_args(p)
    add_sampling_args(p)
    add_finishing_args(p)
    add_words_args(p, book=True)


def add_codes_command(add_command, common: list) -> None:
    p = add_command("codes", "the semantic codes say would speak (.npy or .safetensors)")
    p.add_argument("text")
    p.add_argument("-o", "--out", required=True, help="output .npy or .safetensors")
    add_model_args(p)
    add_sampling_args(p, batches=False, history=False)


def add_voice_command(add_command, common: list) -> None:
    p = add_command("voice", "make a reusable voice from a reference clip or a generated take")
    vs = p.add_subparsers(dest="voice_command", metavar="voice_command", required=True,
                          parser_class=Parser)
    for name, about, audio, text in (
            ("encode", "encode a reference clip into a voice file",
             "the reference clip (5-15 s of one speaker is plenty)",
             "the words spoken in the clip"),
            ("from-take", "keep a generated take as a voice (casting: silence trimmed, tags "
             "taken out of the transcript)", "the take (.wav/.flac, e.g. written by say)",
             "the text the take says (as given to say)")):
        add_voice_maker(vs.add_parser(name, parents=common, help=about), name, audio, text)
    r = vs.add_parser("register", parents=common,
                      help="register a reference clip in a remote engine's voice store")
    r.add_argument("audio", help="the reference clip")
    r.add_argument("--text", required=True, help="the words spoken in the clip")
    r.add_argument("--name", required=True, help="the voice's name on the engine")
    add_remote_args(r)


def add_voice_maker(e: argparse.ArgumentParser, name: str, audio: str, text: str) -> None:
    """``voice encode`` / ``voice from-take``: the clip, its words, the voice file."""
    e.add_argument("audio", help=audio)
    if name == "encode":
        e.add_argument("--text", default=None,
                       help=text + " (default: transcribed by Qwen3-ASR, printed and kept "
                            "in the voice; a recognised transcript can be wrong: to correct "
                            "it, encode again with --text)")
        add_asr_arg(e)
    else:
        e.add_argument("--text", required=True, help=text)
    e.add_argument("--name", default=None,
                   help="the voice's name, as scripts address it (default: the file's stem)")
    e.add_argument("-o", "--out", required=True, help="output .safetensors")
    e.add_argument("--lexicon", default=None, metavar="FILE",
                   help="keep this pronunciation lexicon in the voice (used wherever it "
                        "speaks; for a take: the one it was made with)")
    add_model_args(e, engine=False)


def add_srt_command(add_command, common: list) -> None:
    p = add_command("srt", "speak an SRT subtitle file on its timeline")
    p.add_argument("srt", help="the .srt file")
    add_voice_args(p, many=False)
    p.add_argument("-o", "--out", required=True, help=f"output file: {' '.join(AUDIO_SUFFIXES)}")
    p.add_argument("--srt-out", default=None, help="write the SRT of what was generated")
    add_model_args(p)
    add_remote_args(p)
    add_sampling_args(p, batches=False)
    add_finishing_args(p)
    add_words_args(p)


def add_encode_command(add_command, common: list) -> None:
    p = add_command("encode", "codec: audio file to codes")
    p.add_argument("audio", help="the audio file")
    p.add_argument("-o", "--out", required=True, help="output .npy or .safetensors")
    add_model_args(p, precision=False, engine=False)


def add_decode_command(add_command, common: list) -> None:
    p = add_command("decode", "codec: codes to audio")
    p.add_argument("codes", help=".npy or .safetensors codes [10, frames]")
    p.add_argument("-o", "--out", required=True, help=f"output file: {' '.join(AUDIO_SUFFIXES)}")
    add_model_args(p, precision=False, engine=False)


def add_serve_command(add_command, common: list) -> None:
    p = add_command("serve", "HTTP API: OpenAI /v1/audio/speech, fish-speech /v1/tts")
    add_model_args(p)
    from ..serve.main import add_serve_args

    add_serve_args(p)


def add_download_command(add_command, common: list) -> None:
    p = add_command("download", "download a model variant (or a Hugging Face repo you trust)")
    p.add_argument("variant", nargs="?", default=DEFAULT_MODEL,
                   help=" / ".join(f"{v.name}: {v.note}, pinned to commit {v.revision[:8]}"
                                   for v in hub.VARIANTS.values() if v.revision)
                   + "; or a repo id owner/name, at its latest revision")
    p.add_argument("--models-dir", default=None,
                   help=f"where downloaded models live (default {hub.DEFAULT_MODELS_DIR})")


COMMAND_PARSERS = (  # in the order --help lists them
    add_say_command, add_plan_command, add_book_command, add_codes_command, add_voice_command,
    add_srt_command, add_encode_command, add_decode_command, add_serve_command,
    add_download_command, add_transcribe_command,
)


def build_parser() -> Parser:
    common = [debug_flag()]
    doc = sys.modules[__package__].__doc__.replace("``", "`")  # the usage in cli/__init__.py
    ap = Parser(prog=prog_name(), description=doc, parents=common)
    version = sys.modules["fish_core"].__version__  # imported before its cli
    ap.add_argument("--version", action="version", version=f"Sailfish TTS {version}")
    sub = ap.add_subparsers(dest="command", metavar="command", required=True,
                            parser_class=Parser)

    def add_command(name: str, help: str, **kwargs) -> Parser:
        return sub.add_parser(name, parents=common, help=help, description=help, **kwargs)

    for add in COMMAND_PARSERS:
        add(add_command, common)
    return ap


def subparser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The parser of the (sub-)command ``args`` chose."""
    for name in ("command", "voice_command"):
        value = getattr(args, name, None)
        action = next((a for a in parser._actions
                       if isinstance(a, argparse._SubParsersAction)), None)
        if value is None or action is None:
            break
        parser = action.choices[value]
    return parser


def parse(argv=None) -> argparse.Namespace:
    """The arguments; an unknown flag is reported by its command's parser (its usage, and the
    closest flag it has), not the top-level one."""
    parser = build_parser()
    Parser.argv = list(sys.argv[1:] if argv is None else argv)
    if not Parser.argv:  # `sailfish` alone: what it does, not an error
        parser.print_help()
        raise SystemExit(0)
    args, extra = parser.parse_known_args(argv)
    if extra:
        subparser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


