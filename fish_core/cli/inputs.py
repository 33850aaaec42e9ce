"""What a command reads, checked before any work where it can be: outputs and inputs
(``check_request``), voices (files, clips, an engine's names), texts, codes; the model
(``load_synth``)."""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import torch

from ..loading import hub
from ..engine.device import codec_dtypes_for, resolve_device
from ..outputs import (AUDIO_SUFFIXES, CODES_SUFFIXES, VOICE_SUFFIXES, check_audio_output,
                       check_output, take_paths)
from ..text.plan import read_text_file
from .parser import plural, prog_name


# ---------------------------------------------------------------- loading
def load_synth(args):
    from ..local.synthesizer import Synthesizer

    aligner = getattr(args, "aligner", None)
    if getattr(args, "remote", None):
        from ..local.timing import AlignerTimer
        from ..remote import RemoteSynthesizer
        from ..remote.keys import read_api_key

        synth = RemoteSynthesizer(args.remote, args.dialect,
                                  read_api_key(args.api_key_file, args.api_key_env),
                                  model=args.remote_model, voice_consent=args.voice_consent,
                                  register_voices=args.register_voices)
        if getattr(args, "words", None):  # the engine's audio timed here
            device = args.device if args.device != "auto" else "cpu"
            synth.timer = AlignerTimer(aligner, args.models_dir, device,
                                       download=not args.no_download)
        return synth
    return Synthesizer.from_pretrained(
        args.model, device=args.device, dtype=args.precision, compile=args.compile,
        compile_cache=args.compile_cache,
        quantization=args.quantization, models_dir=args.models_dir, download=not args.no_download,
        threads=args.threads, aligner=aligner,  # the count main() applied
        asr=getattr(args, "asr", None))


def words_paths(path: str, takes: int) -> list[str]:
    """Where each take's words go: ``path``, or ``NAME-1.srt`` … (``NAME-1.karaoke.vtt``)."""
    if takes <= 1:
        return [str(path)]
    p = Path(path)
    suffix = ".karaoke.vtt" if p.name.lower().endswith(".karaoke.vtt") else p.suffix
    stem = p.name[:len(p.name) - len(suffix)]
    return [str(p.with_name(f"{stem}-{k}{suffix}")) for k in range(1, takes + 1)]


def check_words_flags(args) -> None:
    """``--words`` and ``--aligner``, before any work (``--words-language`` is a setting:
    ``cli.request``)."""
    from ..hearing.hub import resolve_aligner
    from ..speech.words import caption_format

    try:
        caption_format(args.words)
    except ValueError as e:
        raise ValueError(f"--words: {e}") from None
    takes = 1 if getattr(args, "pick", "all") == "best" else getattr(args, "takes", 1)
    for path in words_paths(args.words, takes):
        check_output(path, "--words", (".json", ".srt", ".vtt"))
    if getattr(args, "stream", False):
        raise ValueError("--words times a whole result: leave out --stream")
    if args.aligner is not None:
        resolve_aligner(args.aligner, download=False)


def load_codec(args):
    """Only the codec of ``--model``, in its default precisions (``codec_dtypes_for``)."""
    from ..codec.model import Codec

    folder = hub.resolve(args.model, models_dir=args.models_dir, download=not args.no_download)
    device = resolve_device(args.device)
    encode, decode = codec_dtypes_for(device)
    return Codec.from_file(folder, device, encode, decode_dtype=decode)


# ---------------------------------------------------------------- checks before any work
# What each command writes to -o, checked (with the other options below) before a model loads.
OUTPUTS = {"codes": CODES_SUFFIXES, "voice": VOICE_SUFFIXES, "encode": CODES_SUFFIXES}


AUDIO_OUTPUTS = ("say", "srt", "decode")
WORDS_FILES = ("say", "srt", "book")  # --words FILE (transcribe's --words is a switch)


STREAM_SUFFIXES = (".wav", ".pcm")


def check_request(args) -> None:
    """Every option that can be checked before any work: outputs, inputs, device, what the
    finishing needs (the settings themselves: ``cli.request.check``, also before the model)."""
    check_outputs(args)
    check_hearing_flags(args)
    if getattr(args, "device", None) is not None:
        resolve_device(args.device, "--device")
    check_audio_inputs(args)
    check_finishing_needs(args)
    if args.command == "book":
        check_book_folder(args.out)


def check_hearing_flags(args) -> None:
    """``--check`` and ``--pick best``: a local speech recogniser to hear the takes."""
    if getattr(args, "pick", "all") != "all" and not args.check:
        raise ValueError("--pick best picks the take heard nearest the text: add --check")
    if getattr(args, "check", False):
        if args.remote:
            raise ValueError("--check hears the takes with a local speech recogniser; a "
                             "--remote engine's takes cannot be checked")
        check_recognizer(args, "--check hears every take", "no --check")


def check_audio_inputs(args) -> None:
    """Every voice file or clip exists and is what it claims; a clip without its transcript
    has a speech recogniser to hear it."""
    if args.command in ("say", "srt", "book"):
        unheard = [path for path, text in voice_sources(args)
                   if text is None and not is_voice_file(Path(path).expanduser())]
        if unheard:
            check_recognizer(args, f"--voice {unheard[0]} has no --voice-text", "--voice-text")
    if args.command == "encode" or getattr(args, "voice_command", None):
        from ..audio.files import check_audio_file

        check_audio_file(args.audio, "audio")
        if getattr(args, "voice_command", None) == "encode" and not (args.text or "").strip():
            check_recognizer(args, f"{args.audio} has no --text", "--text")


def check_finishing_needs(args) -> None:
    """What a speed or a loudness needs is there before a model loads (their values are the
    Request's to check, ``cli.request``)."""
    if getattr(args, "speed", 1.0) != 1.0:
        from ..audio.stretch import import_pedalboard

        import_pedalboard("--speed")
    if getattr(args, "loudness", None) is not None:
        from ..audio.loudness import import_pyloudnorm

        import_pyloudnorm()


def check_recognizer(args, missing: str, flag: str) -> None:
    """The speech recogniser that will hear a clip given without its transcript is there (or
    is downloaded now, before any other model loads); if not, an error that says how to give
    the transcript instead."""
    from ..hearing.asr_hub import resolve_asr

    try:
        resolve_asr(args.asr, args.models_dir, download=not args.no_download)
    except hub.ModelNotFound as e:
        instead = (f"Or give {flag} \"the words spoken in it\"" if flag.startswith("--")
                   else f"Or leave out {flag.removeprefix('no ')}")
        raise hub.ModelNotFound(f"{missing}, and the speech recogniser that would hear it is "
                                f"not here: {e}. {instead}") from None


def check_outputs(args) -> None:
    """Where the command writes: a file of a kind it can write, in a folder that exists."""
    if getattr(args, "stream", False):  # say --stream: a .wav/.pcm file, or - for stdout
        if args.out != "-" and Path(args.out).suffix.lower() not in STREAM_SUFFIXES:
            raise ValueError(f"--stream writes .wav or .pcm (or - for stdout), got {args.out!r}")
        if args.out != "-":
            check_output(args.out, "--out", STREAM_SUFFIXES)
        if args.takes != 1:
            raise ValueError("--stream speaks one take; leave out --takes")
    elif args.command in AUDIO_OUTPUTS:
        for path in take_paths(args.out, getattr(args, "takes", 1)):
            check_audio_output(path, "--out")
    elif args.command in OUTPUTS and getattr(args, "voice_command", None) != "register":
        check_output(args.out, "--out", OUTPUTS[args.command])
    if getattr(args, "srt_out", None):
        check_output(args.srt_out, "--srt-out", (".srt",))
    if args.command in WORDS_FILES and getattr(args, "words", None):
        check_words_flags(args)


def is_voice_file(path: Path) -> bool:
    """A safetensors file (a length, then its JSON header) rather than an audio clip."""
    with open(path, "rb") as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{"


ENGINE_VOICE = "\0engine"  # voice_sources: this --voice names one of the remote engine's voices


def is_voice_name(value: str) -> bool:
    """Whether a ``--voice`` that is no file can be a remote engine's voice name (no folder, no
    voice or audio file suffix)."""
    suffix = Path(value).suffix.lower()
    return ("/" not in value and "\\" not in value
            and suffix not in (*VOICE_SUFFIXES, *AUDIO_SUFFIXES, ".aiff", ".aif", ".m4a"))


def voice_sources(args) -> list[tuple[str, str | None]]:
    """``--voice``/``--ref-audio`` as ``(path, None)`` for a voice file and ``(path, text)`` for a
    clip with its transcript, in order; every file is checked (it exists, a clip is audio) and a
    clip without its ``--voice-text`` is an error that says how to use it."""
    from ..audio.files import check_audio_file

    voices = args.voice if isinstance(args.voice, list) else [args.voice] * bool(args.voice)
    texts = (args.voice_text if isinstance(args.voice_text, list) else
             [args.voice_text] * (args.voice_text is not None))
    sources = [voice_source(path, args) for path in voices]
    clips = [i for i, (_, kind) in enumerate(sources) if kind == CLIP]
    if len(texts) < len(clips) and not getattr(args, "remote", None):
        texts = [*texts, *[None] * (len(clips) - len(texts))]  # heard by the speech recogniser
    check_clip_texts(sources, clips, texts)
    for i, text in zip(clips, texts):
        sources[i] = (sources[i][0], text)
    refs, ref_texts = getattr(args, "ref_audio", []), getattr(args, "ref_text", [])
    if len(refs) != len(ref_texts):
        raise ValueError("give one --ref-text per --ref-audio")
    for path, text in zip(refs, ref_texts):
        check_audio_file(path, "--ref-audio")
        sources.append((path, text))
    return sources


CLIP = "\0clip"  # voice_source: an audio clip, its transcript still to pair


def voice_source(path: str, args) -> tuple[str, str | None]:
    """One ``--voice``: a voice file ``(path, None)``, a clip ``(path, CLIP)`` or, with
    ``--remote``, an engine's voice by name ``(path, ENGINE_VOICE)``; checked."""
    if not str(path).strip():
        raise ValueError("--voice: empty; expected a voice file (.safetensors) or a clip "
                         "with its --voice-text")
    file = Path(path).expanduser()
    if not file.is_file() and getattr(args, "remote", None) and is_voice_name(path):
        return path, ENGINE_VOICE  # the engine's own voice, by name
    if not file.is_file():
        wrong = "a folder, not a file" if file.is_dir() else "file not found"
        hint = "" if getattr(args, "remote", True) or not is_voice_name(path) else (
            " (with --remote, a name that is not a file is one of the engine's voices)")
        raise ValueError(f"--voice: {wrong}: {path}{hint}")
    if is_voice_file(file):
        return path, None
    check_voice_clip(file, path)
    return path, CLIP


def check_voice_clip(file: Path, path: str) -> None:
    """A ``--voice`` that is no voice file is an audio clip, or the error says it is neither."""
    from ..audio.files import AudioError, check_audio_file

    try:
        check_audio_file(file, "--voice")
    except AudioError as e:
        if "is not audio" not in str(e):
            raise
        raise AudioError(f"--voice: {path} is neither a voice file (.safetensors, from "
                         "`voice encode`) nor an audio clip (WAV, FLAC, Ogg, MP3 or "
                         "AIFF)") from None


def check_clip_texts(sources: list, clips: list[int], texts: list) -> None:
    """One ``--voice-text`` per clip, in order (a voice file needs none)."""
    if len(clips) == len(texts):
        return
    if clips and len(texts) < len(clips):
        path = sources[clips[len(texts)]][0]
        raise ValueError(
            f"--voice {path} is an audio clip, not a voice file: add --voice-text \"the "
            f"words spoken in {Path(path).name}\" after it (one per clip, in order), or make "
            f"a voice file once with `{prog_name()} voice encode {path} --text \"...\" -o "
            f"{Path(path).stem}.safetensors`")
    raise ValueError(f"{len(texts)} --voice-text for {plural(len(clips), '--voice clip')}: "
                     "give one --voice-text per audio clip (voice files need none)")


def load_voices(args, synth) -> list:
    """The voices ``--voice``/``--ref-audio`` name: voice files read, clips encoded."""
    from ..speech.voices import Voice

    runtime = getattr(synth, "runtime", None)  # a local model: check the files against its sizes
    config = runtime.config if runtime is not None else None
    sizes = (config.num_codebooks, config.codebook_size) if config is not None else ()
    voices = []
    for path, text in voice_sources(args):
        if text is None and is_voice_file(Path(path).expanduser()):
            voices.append(Voice.load(path, *sizes))
        elif text is ENGINE_VOICE:
            voices.append(synth.engine_voice(path))
        else:
            voices.append(synth.encode_voice(path, text, name=Path(path).stem))
            if text is None:
                print(heard_note(path, voices[-1].clips[0].text, "--voice-text"),
                      file=sys.stderr)
    return voices


def heard_note(path, text: str, flag: str) -> str:
    """What the speech recogniser heard in a reference clip, said so it can be checked."""
    return (f"transcript of {Path(path).name} (recognised by Qwen3-ASR; if it is wrong, give "
            f"{flag} \"...\"): {text}")


def read_codes(path: str) -> torch.Tensor:
    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"codes: {path} is not a file")
    if path.suffix == ".npy":
        return torch.from_numpy(np.load(path, allow_pickle=False))
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        tensors = load_file(str(path))
        if "codes" not in tensors:
            raise ValueError(f"{path} has no 'codes' tensor")
        return tensors["codes"]
    raise ValueError(f"codes are read from .npy or .safetensors, got {path.name!r}")


def read_input(path: str, field: str) -> str:
    """A UTF-8 text file, or standard input for ``-``."""
    if path != "-":
        return read_text_file(path, field)
    try:
        return sys.stdin.buffer.read().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"{field} -: standard input is not UTF-8 text (bad byte at offset "
                         f"{e.start})") from None


def read_text(args) -> str:
    if args.text_file:
        if args.text is not None:
            raise ValueError(f"{args.command} takes the text as an argument or --text-file, "
                             "not both")
        return read_input(args.text_file, "--text-file")
    if args.text is None:
        piped = piped_text()
        if piped is not None and piped.strip():
            return piped
        raise ValueError(f"{args.command} needs a text, --text-file (- for stdin) or --script")
    return args.text


def piped_text() -> str | None:
    """Standard input when it is piped in (not a terminal), or None."""
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return None
        data = sys.stdin.buffer.read()
    except (AttributeError, OSError, ValueError):  # closed, or no real stdin (a test harness)
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"standard input is not UTF-8 text (bad byte at offset {e.start})"
                         ) from None


# ---------------------------------------------------------------- commands
LONG_TEXT = 20_000  # characters (~20 minutes of speech): `book` is the better tool above this


def long_text_note(text: str) -> str | None:
    """For a text of hours, the hint that ``book`` speaks it chapter by chapter and resumes."""
    if len(text) <= LONG_TEXT:
        return None
    from ..text.pace import BYTES_PER_SECOND

    minutes = len(text.encode("utf-8")) / BYTES_PER_SECOND / 60
    return (f"note: {len(text):,} characters is about {minutes:,.0f} minutes of speech, in one "
            f"file at the end; `{prog_name()} book FILE -o FOLDER` writes it chapter by chapter "
            "and resumes after an interruption")


def check_book_folder(out: str) -> None:
    path = Path(out).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out: {out} is a file; book writes a folder of chapter files")


def check_port(host: str, port: int) -> None:
    """That ``serve`` can listen on ``host:port``, before a model loads: a port in use or an
    address this machine does not have is an error naming it."""
    import socket

    if not 0 < port < 65536:
        raise ValueError(f"--port must be 1 .. 65535, got {port}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as e:
        raise ValueError(f"--host {host}: not an address of this machine ({e.strerror})") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
        try:
            probe.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ValueError(port_in_use(host, port)) from None
            raise ValueError(f"--host {host} --port {port}: cannot listen there "
                             f"({e.strerror or e})") from None


def port_in_use(host: str, port: int) -> str:
    return (f"--port {port}: {host}:{port} is already in use (another server is listening "
            "there); stop it or choose another port with --port")
