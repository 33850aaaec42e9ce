"""Command line: ``sailfish <command>`` (the same as ``python -m fish_core <command>``).

    say "Hello there!" -o hello.wav                       text (or --text-file, - for stdin)
    say "Hi." --voice me.safetensors -o hi.mp3            ... in a saved voice; .wav .flac .mp3 .opus
    say "Hi." --voice me.wav --voice-text "..." -o hi.wav ... cloning a clip directly
    say "Hi." --takes 3 -o hi.wav                         three takes: hi-1.wav hi-2.wav hi-3.wav
    say --script dialogue.txt --voice alice.safetensors --voice bob.safetensors -o talk.wav
    voice encode me.wav --text "What I say." --name me -o me.safetensors
    voice register me.wav --text "What I say." --name me --remote URL --voice-consent ID
    say --script play.txt --remote URL --remote-model drama-3 -o play.wav   Drama 3 on an engine
    srt film.srt -o film.wav [--srt-out generated.srt] [--voice me.safetensors]
    say "Hi. [pause:700ms] Bye." --loudness -16 --speed 1.1 --lexicon words.tsv -o hi.wav
    plan --text-file story.txt --lexicon words.tsv           what the model will read, batch by batch
    book novel.epub -o novel/ --voice me.safetensors --seed 7 --loudness -18   one file per chapter
    voice from-take take2.wav --text "What the take says." -o cast.safetensors
    codes "Hello" -o codes.npy                            semantic codes only (no codec)
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

import errno
import sys
import traceback
from pathlib import Path

try:
    import torch
except ImportError:  # `pip install .` leaves torch to you (ComfyUI owns it in its environment)
    raise SystemExit("error: Sailfish TTS needs PyTorch, which `pip install .` does not install: "
                     "pip install torch (https://pytorch.org/get-started/locally/ picks the "
                     "build for your GPU)") from None

from ..loading import hub
from ..engine import threads
from ..engine.device import codec_dtypes_for, resolve_device
from ..params import Cancelled, SamplingParams
from ..outputs import (AUDIO_SUFFIXES, CODES_SUFFIXES, VOICE_SUFFIXES, OutputError,
                      check_audio_output, check_output, take_paths, write_audio, write_or_keep)
from ..remote.http import RemoteError
from ..text.pace import Pace
from ..text.plan import check_text, read_text_file
from .request import build, finishing, sampling
from .parser import (DEFAULT_MODEL, LOUDNESS_HELP, Parser, build_parser, parse, plural,  # noqa: F401
                     prog_name, shows_default, subparser)


CODEC_FRAME_RATE = 44100 / 2048  # S2's codec, for a progress estimate without one loaded

# What a user's mistake raises: every error class of ours is a ValueError (GenerationError,
# CheckpointError, ScriptError, AudioError …) or a FileNotFoundError (ModelNotFound), and
# Ctrl-C in the progress bar is Cancelled; a remote engine's failure is a RemoteError. Anything
# else is unexpected and keeps its traceback.
USER_ERRORS = (ValueError, FileNotFoundError, Cancelled, RemoteError)


# ---------------------------------------------------------------- the parser
def finish_note(speech) -> str:
    """What finishing did, for the report line."""
    info = (speech.finishing or {}).get("loudness")
    if not info or info.get("measured") is None:
        return ""
    held = ", held by the ceiling" if info["held_by_ceiling"] else ""
    unit = "dBTP" if info["true_peak"] else "dBFS"
    return f", {info['measured']:.1f} LUFS, peak {info['peak']:.1f} {unit}{held}"


# ---------------------------------------------------------------- progress
class Bar:
    """A progress bar in percent of the work: generated frames (a frame is ~46 ms of audio)
    against the frames the text is expected to take, a guess corrected as batches end
    (``text/pace.py``), or a book's characters. It shows no count, so a corrected guess moves
    the percentage, never a total. Shown after half a second (a short run prints only its
    result), redrawn at most every half second, gone when done; only on a terminal (a log or a
    pipe gets no bar)."""

    STEPS = 1000
    FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}"

    def __init__(self, desc: str = "speaking", file=None):
        from tqdm import tqdm

        file = sys.stderr if file is None else file
        self.bar = tqdm(desc=desc, total=self.STEPS, dynamic_ncols=True, leave=False, delay=0.5,
                        mininterval=0.5, bar_format=self.FORMAT, file=file,
                        disable=not getattr(file, "isatty", lambda: False)())

    def __call__(self, done: int, total: int) -> None:
        step = self.STEPS * min(done, total) // total if total > 0 else 0
        if step > self.bar.n:
            self.bar.update(step - self.bar.n)  # rate-limited by mininterval

    def close(self):
        self.bar.close()


# ---------------------------------------------------------------- loading
def load_synth(args):
    from ..local.synthesizer import Synthesizer

    if getattr(args, "remote", None):
        from ..remote.keys import read_api_key

        return Synthesizer.remote(args.remote, args.dialect,
                                  read_api_key(args.api_key_file, args.api_key_env),
                                  model=args.remote_model, voice_consent=args.voice_consent,
                                  register_voices=args.register_voices)
    return Synthesizer.from_pretrained(
        args.model, device=args.device, dtype=args.precision, compile=args.compile,
        compile_cache=args.compile_cache,
        quantization=args.quantization, models_dir=args.models_dir, download=not args.no_download,
        threads=args.threads)  # the count main() applied


def load_codec(args):
    """Only the codec of ``--model``, in its default precisions (``codec_dtypes_for``)."""
    from ..codec.model import Codec

    folder = hub.resolve(args.model, models_dir=args.models_dir, download=not args.no_download)
    device = resolve_device(args.device)
    encode, decode = codec_dtypes_for(device)
    return Codec.from_file(folder, device, encode, decode_dtype=decode)


def compile_note(args, synth) -> None:
    """``--compile auto``: say once which mode it kept and why (stderr)."""
    choice = getattr(getattr(synth, "engine", None), "compile_choice", "")
    if getattr(args, "compile", None) == "auto" and choice.startswith("auto: "):
        print(f"--compile auto kept {choice.removeprefix('auto: ')}", file=sys.stderr)


# ---------------------------------------------------------------- checks before any work
# What each command writes to -o, checked (with the other options below) before a model loads.
OUTPUTS = {"codes": CODES_SUFFIXES, "voice": VOICE_SUFFIXES, "encode": CODES_SUFFIXES}
AUDIO_OUTPUTS = ("say", "srt", "decode")
STREAM_SUFFIXES = (".wav", ".pcm")


def check_request(args) -> None:
    """Every option that can be checked before any work: outputs, inputs, device and seed."""
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
    if getattr(args, "device", None) is not None:
        resolve_device(args.device, "--device")
    if args.command in ("say", "srt", "book"):
        voice_sources(args)  # every voice file or clip exists and is what it claims
    if args.command == "encode" or getattr(args, "voice_command", None):
        from ..audio.files import check_audio_file

        check_audio_file(args.audio, "audio")
    # What a speed or a loudness needs is there before a model loads (their values are the
    # Request's to check, ``cli.request``).
    if getattr(args, "speed", 1.0) != 1.0:
        from ..audio.stretch import import_pedalboard

        import_pedalboard("--speed")
    if getattr(args, "loudness", None) is not None:
        from ..audio.loudness import import_pyloudnorm

        import_pyloudnorm()
    if args.command == "book":
        check_book_folder(args.out)


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
    from ..audio.files import AudioError, check_audio_file

    voices = args.voice if isinstance(args.voice, list) else [args.voice] * bool(args.voice)
    texts = (args.voice_text if isinstance(args.voice_text, list) else
             [args.voice_text] * (args.voice_text is not None))
    clips, sources = [], []
    for path in voices:
        if not str(path).strip():
            raise ValueError("--voice: empty; expected a voice file (.safetensors) or a clip "
                             "with its --voice-text")
        file = Path(path).expanduser()
        if not file.is_file() and getattr(args, "remote", None) and is_voice_name(path):
            sources.append((path, ENGINE_VOICE))  # the engine's own voice, by name
            continue
        if not file.is_file():
            wrong = "a folder, not a file" if file.is_dir() else "file not found"
            hint = "" if getattr(args, "remote", True) or not is_voice_name(path) else (
                " (with --remote, a name that is not a file is one of the engine's voices)")
            raise ValueError(f"--voice: {wrong}: {path}{hint}")
        if not is_voice_file(file):
            try:
                check_audio_file(file, "--voice")
            except AudioError as e:
                if "is not audio" not in str(e):
                    raise
                raise AudioError(f"--voice: {path} is neither a voice file (.safetensors, from "
                                 "`voice encode`) nor an audio clip (WAV, FLAC, Ogg, MP3 or "
                                 "AIFF)") from None
            clips.append(len(sources))
        sources.append((path, None))
    if len(clips) != len(texts):
        if clips and len(texts) < len(clips):
            path = sources[clips[len(texts)]][0]
            raise ValueError(
                f"--voice {path} is an audio clip, not a voice file: add --voice-text \"the "
                f"words spoken in {Path(path).name}\" after it (one per clip, in order), or make "
                f"a voice file once with `{prog_name()} voice encode {path} --text \"...\" -o "
                f"{Path(path).stem}.safetensors`")
        raise ValueError(f"{len(texts)} --voice-text for {plural(len(clips), '--voice clip')}: "
                         "give one --voice-text per audio clip (voice files need none)")
    for i, text in zip(clips, texts):
        sources[i] = (sources[i][0], text)
    refs, ref_texts = getattr(args, "ref_audio", []), getattr(args, "ref_text", [])
    if len(refs) != len(ref_texts):
        raise ValueError("give one --ref-text per --ref-audio")
    for path, text in zip(refs, ref_texts):
        check_audio_file(path, "--ref-audio")
        sources.append((path, text))
    return sources


def load_voices(args, synth) -> list:
    """The voices ``--voice``/``--ref-audio`` name: voice files read, clips encoded."""
    from ..speech.voices import Voice

    config = getattr(synth, "config", None)  # a local model: check the files against its sizes
    sizes = (config.num_codebooks, config.codebook_size) if config is not None else ()
    return [Voice.load(path, *sizes) if text is None
            else synth.engine_voice(path) if text is ENGINE_VOICE
            else synth.encode_voice(path, text, name=Path(path).stem)
            for path, text in voice_sources(args)]


# ---------------------------------------------------------------- inputs and outputs
def save(path: str, write, what: str) -> None:
    """``write(path)``, keeping the result elsewhere (and saying where) if that fails."""
    note = write_or_keep(write, Path(path), what)
    if note:
        raise OutputError(note)


def save_codes(path: str | Path, codes: torch.Tensor) -> None:
    import numpy as np

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".npy":
        np.save(path, codes.cpu().numpy().astype(np.int64))
    elif path.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({"codes": codes.cpu().to(torch.int64).contiguous()}, str(path))
    else:
        raise ValueError(f"codes are written as .npy or .safetensors, got {path.name!r}")


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


def cmd_say(args) -> str:
    script = read_input(args.script, "--script") if args.script else None
    text = None if script is not None else read_text(args)
    note = long_text_note(text or script or "")
    if note:
        print(note, file=sys.stderr)
    synth = load_synth(args)
    voices = load_voices(args, synth)
    if args.stream:
        return stream_say(args, synth, voices, text)
    request = build("dialogue" if script is not None else "tts", args, synth,
                    script if script is not None else text, voices, finishing(args))
    bar = Bar()
    try:
        speech = synth.speak(request, on_progress=bar)
    finally:
        bar.close()
    compile_note(args, synth)
    speeches = speech if isinstance(speech, list) else [speech]
    paths = take_paths(args.out, args.takes)
    for path, one in zip(paths, speeches):
        save(path, lambda p, one=one: write_audio(p, one.waveform, one.sample_rate), "audio")
    if len(speeches) == 1:
        return (f"wrote {args.out}: {speech.duration:.2f} s in "
                f"{plural(len(speech.segments), 'batch', 'batches')}, seed {speech.seed}"
                f"{finish_note(speech)}")
    return "\n".join(f"wrote {p}: take {k + 1}, {s.duration:.2f} s, seed {s.seed}"
                     f"{finish_note(s)}"
                     for k, (p, s) in enumerate(zip(paths, speeches)))


def stream_say(args, synth, voices, text: str | None) -> str:
    """``say --stream``: 16-bit WAV or PCM written chunk by chunk as the model speaks."""
    from ..audio.wav import StreamEncoder, wav_header

    if text is None:
        raise ValueError("--stream speaks a text (or --text-file), not a --script")
    to_stdout = args.out == "-"
    fmt = args.stream_format if to_stdout else Path(args.out).suffix.lower().lstrip(".")
    stream = synth.open_stream(build("stream", args, synth, text, voices, finishing(args)))
    encode, samples = StreamEncoder(fmt, synth.sample_rate), 0
    out = sys.stdout.buffer if to_stdout else open(args.out, "wb")
    try:
        with stream:
            for chunk in stream:
                out.write(encode(chunk))
                out.flush()
                samples += chunk.shape[0]
        if fmt == "wav" and not to_stdout:  # a file: put the real length in the header
            out.seek(0)
            out.write(wav_header(synth.sample_rate, samples))
    finally:
        if not to_stdout:
            out.close()
    compile_note(args, synth)
    return f"streamed {samples / synth.sample_rate:.2f} s to {args.out}, seed {stream.seed}"


def cmd_codes(args) -> str:
    from ..engine.rows import generate
    from ..text.prompt import conversation

    if not check_text(args.text, "text").strip():
        raise ValueError("text is empty: nothing to say")
    synth = load_synth(args)
    prompt = synth.encoder.encode(conversation(args.text))
    params = SamplingParams(args.temperature, args.top_p, args.top_k, args.max_new_tokens)
    codec = synth.codec
    rate = codec.sample_rate / codec.frame_length if codec is not None else CODEC_FRAME_RATE
    pace, bar = Pace([args.text], rate, min(args.max_new_tokens, synth.engine.max_context)), Bar()
    try:
        gen = generate(synth.engine, prompt, params, seed=args.seed,
                       on_frame=lambda i, n: bar(*pace.frame(i)))[0]
    finally:
        bar.close()
    compile_note(args, synth)
    save(args.out, lambda p: save_codes(p, gen.codes), "codes")
    return f"wrote {args.out}: codes {tuple(gen.codes.shape)}, seed {gen.seed}"


def cmd_voice(args) -> str:
    from ..speech.voices import encode_voice

    if args.voice_command == "register":
        return cmd_voice_register(args)
    lexicon = finishing(args).get("lexicon")
    codec = load_codec(args)  # as `say` loads it (codec_dtypes_for): the same codes
    name = args.name or Path(args.out).stem  # alice.safetensors speaks as "Alice:" in scripts
    notes = []
    if args.voice_command == "from-take":
        from ..audio.files import load_audio
        from ..speech.casting import take_clip

        wave = load_audio(args.audio, target_sr=codec.sample_rate)
        clip, text, notes = take_clip(wave, codec.sample_rate, args.text, lexicon)
        voice = encode_voice(codec, clip, text, name=name, sample_rate=codec.sample_rate)
    else:
        voice = encode_voice(codec, args.audio, args.text, name=name)
    voice.lexicon = lexicon
    save(args.out, voice.save, "voice")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return f"wrote {args.out}: voice {name!r}, {voice.duration:.2f} s, {voice.frames} frames"


def cmd_voice_register(args) -> str:
    """``voice register``: a clip into a remote engine's voice store, with the consent the
    user states (``--voice-consent``), checked before anything is sent."""
    if not args.remote:
        raise ValueError("voice register needs --remote URL (the engine whose voice store "
                         "keeps the voice)")
    synth = load_synth(args)
    voice = synth.register_voice(synth.encode_voice(args.audio, args.text, name=args.name),
                                 consent=args.voice_consent)
    return (f"registered voice {voice.name!r} on {synth.url} (model "
            f"{synth.spec.label}): requests name it there from now on")


def cmd_srt(args) -> str:
    from ..text.srt import parse_srt

    document = read_input(args.srt, "srt")
    parse_srt(document)  # a bad SRT fails before the model loads
    synth = load_synth(args)
    voices = load_voices(args, synth)
    request = build("subtitles", args, synth, document, voices, finishing(args))
    bar = Bar()
    try:
        result = synth.speak(request, on_progress=bar)
    finally:
        bar.close()
    compile_note(args, synth)
    for line in result.overruns:
        print(f"warning: {line}", file=sys.stderr)
    notes = [write_or_keep(lambda p: write_audio(p, result.waveform, result.sample_rate),
                           Path(args.out), "audio")]
    if args.srt_out:
        notes.append(write_or_keep(lambda p: p.write_text(result.srt(), encoding="utf-8"),
                                   Path(args.srt_out), "SRT"))
    if any(notes):
        raise OutputError("; ".join(n for n in notes if n))
    return f"wrote {args.out}: {result.duration:.2f} s, {plural(len(result.cues), 'cue')}"


def cmd_plan(args) -> str:
    """``plan``: the text batches exactly as the model will read them, with the pauses."""
    import json

    from ..speech.finishing import Finishing
    from ..speech.request import Request
    from ..speech.voices import Voice

    voices = [Voice.load(v) for v in args.voice]
    finish = Finishing.of(lexicon=finishing(args).get("lexicon"))
    if args.script:
        request = Request.dialogue(read_input(args.script, "--script"), voices,
                                   pause=args.pause, seed=0)
        batches = finish.turn_batches(request.turns, request.voices, args.max_bytes,
                                      args.pause > 0 or args.turn_by_turn)
    else:
        batches = finish.batches(read_text(args), voices, args.max_bytes)
    from ..speech.timeline import gaps

    silences = [n / 1000 for n in gaps(batches, 1000, args.pause)]
    if args.json:
        return json.dumps({"batches": [
            {"text": b.text, "speaker": b.speaker, "silence_before": silences[i],
             **({"silence_after": silences[-1]} if i == len(batches) - 1 else {})}
            for i, b in enumerate(batches)]}, ensure_ascii=False, indent=1)
    lines = []
    for i, batch in enumerate(batches):
        if silences[i]:
            lines.append(f"        [silence {silences[i]:g} s]")
        who = "" if batch.speaker is None else f" (voice {batch.speaker + 1})"
        lines.append(f"batch {i + 1}{who}: {batch.text}")
    if silences[-1]:
        lines.append(f"        [silence {silences[-1]:g} s]")
    return "\n".join(lines)


def check_book_folder(out: str) -> None:
    path = Path(out).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out: {out} is a file; book writes a folder of chapter files")


def cmd_book(args) -> str:
    """``book``: one audio file per chapter, chapters.json, a cue sheet and ffmetadata;
    an interrupted run resumes where it stopped."""
    from ..speech.audiobook import render_book
    from ..text.book import read_book

    book = read_book(args.book)  # a bad book fails before the model loads
    synth = load_synth(args)
    voices = load_voices(args, synth)
    voice = voices[0] if voices else None
    options = {k: v for k, v in sampling(args).items() if k != "seed"}  # seeded per chapter
    bar = Bar(book.title[:30] or "book")
    try:
        result = render_book(synth, book, args.out, voice=voice, seed=args.seed,
                             audio_format=args.format, model=str(args.remote or args.model),
                             max_bytes=args.max_bytes, on_progress=bar, **options,
                             **finishing(args))
    finally:
        bar.close()
    made = len(result.chapters) - result.skipped
    return (f"wrote {args.out}: {plural(len(result.chapters), 'chapter')} ({made} spoken, "
            f"{result.skipped} already done), seed {result.seed}; chapters.json, book.cue, "
            "chapters.ffmetadata")


def cmd_encode(args) -> str:
    from ..codec.files import encode_file

    codes = encode_file(load_codec(args), args.audio)
    save(args.out, lambda p: save_codes(p, codes), "codes")
    return f"wrote {args.out}: codes {tuple(codes.shape)}"


def cmd_decode(args) -> str:
    codes = read_codes(args.codes)
    codes = codes[0] if codes.ndim == 3 else codes  # [1, 10, n] as written by other tools
    codec = load_codec(args)
    if codes.ndim != 2:
        raise ValueError(f"codes: {args.codes} holds a {list(codes.shape)} tensor; expected "
                         f"[{codec.num_codebooks}, frames]")
    wave = codec.decode(codes)[0, 0].cpu()  # [T]
    save(args.out, lambda p: write_audio(p, wave, codec.sample_rate), "audio")
    return f"wrote {args.out}: {wave.shape[0] / codec.sample_rate:.2f} s"


def cmd_serve(args) -> str:
    from ..serve.main import api_key, check_bind, serve

    check_bind(args.host, api_key(args), args.allow_no_key)
    check_port(args.host, args.port)
    print(serve_banner(args), file=sys.stderr, flush=True)
    try:
        return serve(args)
    except OSError as e:  # the port was taken while the model loaded
        if e.errno == errno.EADDRINUSE:
            raise ValueError(port_in_use(args.host, args.port)) from None
        raise


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


def serve_banner(args) -> str:
    """The start-up line: where it listens, which model, whether a key is needed, the voices."""
    from ..serve.main import KEY_ENV, api_key

    host = f"[{args.host}]" if ":" in args.host else args.host
    key = api_key(args)
    source = ("--api-key-file" if args.api_key_file else "--api-key" if args.api_key
              else f"${KEY_ENV}")
    return (f"sailfish serve: http://{host}:{args.port}/v1 (OpenAI /v1/audio/speech, "
            f"fish-speech /v1/tts) | model {args.model} "
            f"({'loaded on the first request' if args.lazy else 'loading now'}) | API key "
            f"{f'on (from {source})' if key else 'off'} | voices {args.voices}")


def cmd_download(args) -> str:
    path = hub.resolve(args.variant, models_dir=args.models_dir, download=True)
    return f"model ready in {path}"


COMMANDS = {"say": cmd_say, "plan": cmd_plan, "book": cmd_book, "codes": cmd_codes,
            "voice": cmd_voice, "srt": cmd_srt,
            "encode": cmd_encode, "decode": cmd_decode, "serve": cmd_serve,
            "download": cmd_download}


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
        check_request(args)
        if hasattr(args, "threads"):  # before any model runs (serve: before its scheduler)
            args.threads = apply_threads(args)
        message = COMMANDS[args.command](args)
        # With audio on stdout (say --stream -o -), the report goes to stderr.
        print(message, file=sys.stderr if getattr(args, "out", None) == "-" else sys.stdout)
        sys.stdout.flush()  # a closed pipe fails here, where it is caught, not at exit
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


def stopped_note(args) -> str:
    """What an interrupted command leaves behind."""
    if args.command == "book":
        return (f"the chapters finished so far are in {args.out}; the same command resumes "
                "with the next one")
    if getattr(args, "stream", False) and args.out != "-":
        return f"{args.out} holds the audio streamed so far"
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
