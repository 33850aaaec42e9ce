"""The commands: each turns its parsed flags into work on a synthesizer (through one ``Request``,
``cli.request``) and says in one line what it wrote."""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import torch

from ..loading import hub
from ..params import Cancelled
from ..remote.http import RemoteError
from ..outputs import (OutputError, StreamFile,
                      take_paths, write_audio, write_bytes, write_or_keep, write_text)
from .parser import plural
from . import inputs
from .progress import Bar
from .request import build, check, finishing
from .request import settings as flag_settings
from .book import cmd_book
from .transcribe import cmd_transcribe
from .inputs import (check_port, load_codec, port_in_use, load_voices, long_text_note, read_codes,
                     read_input, read_text)


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


def compile_note(args, synth) -> None:
    """``--compile auto``: say once which mode it kept and why (stderr)."""
    runtime = getattr(synth, "runtime", None)  # a local model (a remote one has no engine here)
    choice = runtime.engine.compile_choice if runtime is not None else ""
    if getattr(args, "compile", None) == "auto" and choice.startswith("auto: "):
        print(f"--compile auto kept {choice.removeprefix('auto: ')}", file=sys.stderr)


# ---------------------------------------------------------------- inputs and outputs
def save(path: str, write, what: str) -> None:
    """``write(path)``, keeping the result elsewhere (and saying where) if that fails."""
    note = write_or_keep(write, Path(path), what)
    if note:
        raise OutputError(note)


def save_codes(path: str | Path, codes: torch.Tensor) -> None:
    """Codes as .npy or .safetensors, written atomically (``audio.atomic``)."""
    import io

    import numpy as np

    path = Path(path)
    if path.suffix == ".npy":
        data = io.BytesIO()
        np.save(data, codes.cpu().numpy().astype(np.int64))
        write_bytes(path, data.getvalue())
    elif path.suffix == ".safetensors":
        from safetensors.torch import save

        write_bytes(path, save({"codes": codes.cpu().to(torch.int64).contiguous()}))
    else:
        raise ValueError(f"codes are written as .npy or .safetensors, got {path.name!r}")


def save_words(path: str, speech) -> None:
    """A result's timed words as the file's suffix asks (``speech.words.caption_format``),
    written whole or not at all."""
    from ..speech.words import caption_format

    text = speech.captions(caption_format(path))
    save(path, lambda p: write_text(p, text), "words")


def speak(args, synth, request):
    """``request`` spoken with a progress bar; what ``--compile auto`` chose said after it."""
    bar = Bar()
    try:
        result = synth.speak(request, on_progress=bar)
    finally:
        bar.close()
    compile_note(args, synth)
    return result


def cmd_say(args) -> str:
    script = read_input(args.script, "--script") if args.script else None
    text = None if script is not None else read_text(args)
    note = long_text_note(text or script or "")
    if note:
        print(note, file=sys.stderr)
    if args.stream and text is None:
        raise ValueError("--stream speaks a text (or --text-file), not a --script")
    kind = "stream" if args.stream else "tts" if script is None else "dialogue"
    said = script if script is not None else text
    settings = check(kind, args, said)  # flags and text, before the model loads
    synth = inputs.load_synth(args)
    voices = load_voices(args, synth)
    if args.stream:
        return stream_say(args, synth, build(kind, args, synth, said, voices, settings))
    return save_takes(args, speak(args, synth, build(kind, args, synth, said, voices, settings)))


def save_takes(args, speech) -> str:
    """``say``'s result written (``-o``, or one file per take), said in one line per file."""
    speeches = speech if isinstance(speech, list) else [speech]
    if args.pick == "best":  # only the take that says most nearly what was asked
        return save_best_take(args, speeches)
    paths = take_paths(args.out, args.takes)
    for path, one in zip(paths, speeches):
        save(path, lambda p, one=one: write_audio(p, one.waveform, one.sample_rate), "audio")
    if args.words:
        for path, one in zip(inputs.words_paths(args.words, args.takes), speeches):
            save_words(path, one)
    said = f"; words in {args.words}" if args.words and len(speeches) == 1 else ""
    if len(speeches) == 1:
        return (f"wrote {args.out}: {speech.duration:.2f} s in "
                f"{plural(len(speech.segments), 'batch', 'batches')}, seed {speech.seed}"
                f"{finish_note(speech)}{check_note(speech)}{said}")
    words = inputs.words_paths(args.words, args.takes) if args.words else [""] * len(paths)
    return "\n".join(f"wrote {p}: take {k + 1}, {s.duration:.2f} s, seed {s.seed}"
                     f"{finish_note(s)}{check_note(s)}{f'; words in {w}' if w else ''}"
                     for k, (p, s, w) in enumerate(zip(paths, speeches, words)))


def save_best_take(args, speeches: list) -> str:
    """``say --pick best``: every take's score said (stderr), the best one written to ``-o``."""
    from ..hearing.checking import best_take

    best = best_take([s.check for s in speeches])
    for k, one in enumerate(speeches):
        print(f"take {k + 1}{check_note(one)}", file=sys.stderr)
    speech = speeches[best]
    save(args.out, lambda p: write_audio(p, speech.waveform, speech.sample_rate), "audio")
    if args.words:
        save_words(args.words, speech)
    said = f"; words in {args.words}" if args.words else ""
    return (f"wrote {args.out}: take {best + 1} of {len(speeches)}, {speech.duration:.2f} s,"
            f" seed {speech.seed}{finish_note(speech)}{check_note(speech)}{said}")


def check_note(speech, shown: int = 5) -> str:
    """A checked take's score and the first words that differ, for the report line."""
    checked = speech.check
    if checked is None:
        return ""
    s = checked.score
    unit = "character" if s.unit == "char" else "word"
    note = (f", heard {s.rate:.1%} off ({s.errors} of {plural(s.length, unit)}"
            f"{'' if checked.heard.complete else ', transcript cut short'})")
    diffs = [f"-{d.expected}" if not d.heard else f"+{d.heard}" if not d.expected
             else f"{d.expected}→{d.heard}" for d in s.differences[:shown]]
    more = f" …{len(s.differences) - shown} more" if len(s.differences) > shown else ""
    return note + (": " + ", ".join(diffs) + more if diffs else "")


def stream_say(args, synth, request) -> str:
    """``say --stream``: 16-bit WAV or PCM written chunk by chunk as the model speaks. A file
    grows as ``NAME.partial.wav`` and takes its name when the answer is whole; a stream that
    fails leaves it marked partial and says so (``outputs.StreamFile``)."""
    from ..audio.wav import StreamEncoder

    fmt = args.stream_format if args.out == "-" else Path(args.out).suffix.lower().lstrip(".")
    stream = synth.open_stream(request)
    encode = StreamEncoder(fmt, synth.sample_rate)
    out = stream_output(args.out, fmt, synth.sample_rate, stream)
    try:
        with stream:
            for chunk in stream:
                out.write(encode(chunk), chunk.shape[0])
    except KeyboardInterrupt:
        out.abandon()
        raise
    except Exception as e:
        raise stream_failed(e, out.abandon()) from None
    out.finish()
    compile_note(args, synth)
    return (f"streamed {out.samples / synth.sample_rate:.2f} s to {args.out}, "
            f"seed {stream.seed}")


def stream_output(out: str, fmt: str, sample_rate: int, stream):
    """Where ``say --stream`` writes: stdout (``-``) or a ``StreamFile``; the stream closed
    (its worker stopped) if the file cannot be opened."""
    from ..audio.wav import wav_header

    if out == "-":
        return StdoutStream(sample_rate)
    try:
        return StreamFile(out, sample_rate, wav_header if fmt == "wav" else None)
    except BaseException:
        stream.close()
        raise


def stream_failed(error: Exception, held: str) -> OutputError:
    """A failed stream's error and what it left (``held``): bad input, a full disk, the
    engine's answer or Cancel as an ``OutputError``; anything else said and raised again."""
    if not isinstance(error, (ValueError, OSError, RemoteError, Cancelled)):
        print(f"error: the stream failed; {held}", file=sys.stderr)
        raise error
    return OutputError(f"{error}; {held}")


class StdoutStream:
    """``say --stream -o -``: the chunks on stdout as they come, as a ``StreamFile`` takes
    them."""

    def __init__(self, sample_rate: int):
        self.sample_rate, self.samples = sample_rate, 0

    def write(self, data: bytes, samples: int) -> None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        self.samples += samples

    def abandon(self) -> str:
        """What the stream left: the seconds written, a partial answer."""
        return f"the {self.samples / self.sample_rate:.2f} s on stdout are a partial answer"

    def finish(self) -> None:
        """Nothing to rename: stdout holds the whole answer."""


def cmd_codes(args) -> str:
    """``codes``: the semantic codes of what ``say`` would speak (``synth.tts(...).codes``)."""
    settings = check("tts", args, args.text)  # flags and text, before the model loads
    synth = inputs.load_synth(args)
    speech = speak(args, synth, build("tts", args, synth, args.text, [], settings))
    save(args.out, lambda p: save_codes(p, speech.codes), "codes")
    return f"wrote {args.out}: codes {tuple(speech.codes.shape)}, seed {speech.seed}"


def cmd_voice(args) -> str:
    """``voice encode`` / ``from-take`` (a voice file from a clip or a take) and ``register``."""
    from ..speech.voices import encode_voice

    if args.voice_command == "register":
        return cmd_voice_register(args)
    lexicon = finishing(args).get("lexicon")
    text = args.text
    if args.voice_command == "encode" and (text is None or not text.strip()):
        text = heard_text(args)  # before the codec loads
    codec = load_codec(args)  # as `say` loads it (codec_dtypes_for): the same codes
    name = args.name or Path(args.out).stem  # alice.safetensors speaks as "Alice:" in scripts
    notes = []
    if args.voice_command == "from-take":
        voice, notes = cast_take(args, codec, name, lexicon)
    else:
        voice = encode_voice(codec, args.audio, text, name=name)
    voice.lexicon = lexicon
    save(args.out, voice.save, "voice")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return f"wrote {args.out}: voice {name!r}, {voice.duration:.2f} s, {voice.frames} frames"


def heard_text(args) -> str:
    """``voice encode`` without ``--text``: the clip heard by the speech recogniser, and
    what it heard shown (stderr)."""
    from ..engine.device import resolve_device
    from ..local.listener import Listener

    text = Listener(args.asr, args.models_dir, resolve_device(args.device),
                    download=not args.no_download).transcript(args.audio)
    print(inputs.heard_note(args.audio, text, "--text"), file=sys.stderr)
    return text


def cast_take(args, codec, name: str, lexicon) -> tuple:
    """``voice from-take``: a generated take as a voice (``speech.casting``), and the notes on
    what casting did."""
    from ..audio.files import load_audio
    from ..speech.casting import take_clip
    from ..speech.voices import encode_voice

    wave = load_audio(args.audio, target_sr=codec.sample_rate)
    clip, text, notes = take_clip(wave, codec.sample_rate, args.text, lexicon)
    return encode_voice(codec, clip, text, name=name, sample_rate=codec.sample_rate), notes


def cmd_voice_register(args) -> str:
    """``voice register``: a clip into a remote engine's voice store, with the consent the
    user states (``--voice-consent``), checked before anything is sent."""
    if not args.remote:
        raise ValueError("voice register needs --remote URL (the engine whose voice store "
                         "keeps the voice)")
    synth = inputs.load_synth(args)
    voice = synth.register_voice(synth.encode_voice(args.audio, args.text, name=args.name),
                                 consent=args.voice_consent)
    return (f"registered voice {voice.name!r} on {synth.url} (model "
            f"{synth.spec.label}): requests name it there from now on")


def cmd_srt(args) -> str:
    document = read_input(args.srt, "srt")
    settings = check("subtitles", args, document)  # flags and cues, before the model loads
    synth = inputs.load_synth(args)
    voices = load_voices(args, synth)
    result = speak(args, synth, build("subtitles", args, synth, document, voices, settings))
    for line in result.overruns:
        print(f"warning: {line}", file=sys.stderr)
    notes = [write_or_keep(lambda p: write_audio(p, result.waveform, result.sample_rate),
                           Path(args.out), "audio")]
    if args.srt_out:
        notes.append(write_or_keep(lambda p: write_text(p, result.srt()),
                                   Path(args.srt_out), "SRT"))
    if args.words:
        from ..speech.words import caption_format

        captions = result.captions(caption_format(args.words))
        notes.append(write_or_keep(lambda p: write_text(p, captions), Path(args.words), "words"))
    if any(notes):
        raise OutputError("; ".join(n for n in notes if n))
    return f"wrote {args.out}: {result.duration:.2f} s, {plural(len(result.cues), 'cue')}"


def cmd_plan(args) -> str:
    """``plan``: the text batches exactly as the model will read them, with the pauses."""
    from ..speech.front import plan
    from ..speech.request import Request
    from ..speech.voices import Voice

    voices = [Voice.load(v) for v in args.voice]
    settings = flag_settings(args, "tts")  # --max-bytes, --lexicon
    if args.script:
        request = Request.dialogue(read_input(args.script, "--script"), voices, settings,
                                   pause=args.pause, turn_by_turn=args.turn_by_turn)
    else:
        request = Request.tts(read_text(args), voices, settings)
    return show_plan(plan(request).batches, args.pause, args.json)


def show_plan(batches: list, pause: float, as_json: bool) -> str:
    """Text batches with the silences around them, as lines or JSON."""
    import json

    from ..speech.timeline import gaps

    silences = [n / 1000 for n in gaps(batches, 1000, pause)]
    if as_json:
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
            "download": cmd_download, "transcribe": cmd_transcribe}
