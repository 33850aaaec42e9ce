"""Command line: ``python -m fish_core <command>``.

    say "Hello there!" -o hello.wav                       text (or --text-file) to speech
    say "Hi." --voice me.safetensors -o hi.wav            ... in a saved voice
    say "Hi." --ref-audio me.wav --ref-text "..." -o hi.wav   ... cloning a clip directly
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

``--model`` takes a checkpoint folder, a variant (s2-pro, s2-pro-fp8) or a Hugging Face repo id;
downloads go to --models-dir (default $SAILFISH_MODELS_DIR or ~/.cache/sailfish/models) and
honour HF_HUB_OFFLINE. A mistake in what was asked (a bad value, a missing file) is one
``error:`` line; ``--debug`` adds its traceback. Anything else (a bug, out of memory) keeps its
traceback.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

import numpy as np
import torch

from .loading import hub
from .engine.device import PRECISIONS, codec_dtype_for, resolve_device, resolve_dtype
from .params import DEFAULTS, FIRST_FRAMES, Cancelled, SamplingParams, check_seed
from .outputs import (AUDIO_SUFFIXES, CODES_SUFFIXES, VOICE_SUFFIXES, OutputError,
                      check_output, write_or_keep)
from .remote.http import RemoteError
from .text.plan import check_text, read_text_file

LOUDNESS_HELP = "normalise to this integrated loudness, LUFS (-16 podcast, -23 broadcast)"

DEFAULT_MODEL = "s2-pro"

# What a user's mistake raises: every error class of ours is a ValueError (GenerationError,
# CheckpointError, ScriptError …) or a FileNotFoundError (ModelNotFound), and Ctrl-C in the
# progress bar is Cancelled; a remote engine's failure is a RemoteError. Anything else is
# unexpected and keeps its traceback.
USER_ERRORS = (ValueError, FileNotFoundError, Cancelled, RemoteError)


def quantization_modes() -> list[str]:
    """The modes ``quant`` offers (the Model Loader node lists the same)."""
    from .loading.siblings import quant

    return list(quant.MODES)


def add_model_args(p: argparse.ArgumentParser, precision: bool = True, engine: bool = True
                   ) -> None:
    """Where the model is and its device; ``precision`` and the ``engine`` options (quantization,
    compile) only for the commands that use them."""
    g = p.add_argument_group("model")
    g.add_argument("--model", default=DEFAULT_MODEL,
                   help="checkpoint folder, variant (%s) or HF repo id" % ", ".join(hub.VARIANTS))
    g.add_argument("--models-dir", default=None, help="where downloaded models live")
    g.add_argument("--no-download", action="store_true", help="never download")
    g.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, mps")
    if precision:
        g.add_argument("--precision", default="auto", choices=PRECISIONS)
    if not engine:
        return
    g.add_argument("--quantization", default="none", choices=quantization_modes())
    g.add_argument("--compile", nargs="?", const="on", default="off", choices=("off", "on", "auto"),
                   help="torch.compile the decode step (--compile alone: on). On a CPU compiled "
                        "decoding can be slower than eager (it warns); auto compiles on CUDA and, "
                        "on a CPU, times both on the first frame and keeps the faster")
    g.add_argument("--compile-cache", default=None,
                   help="persistent folder for compiled kernels ($SAILFISH_COMPILE_CACHE)")


def add_remote_args(p: argparse.ArgumentParser) -> None:
    """Run on a remote S2 engine instead of a local model (``Synthesizer.remote``)."""
    from .remote.dialects import DIALECTS

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
    g.add_argument("--temperature", type=float, default=DEFAULTS.temperature)
    g.add_argument("--top-p", type=float, default=DEFAULTS.top_p)
    g.add_argument("--top-k", type=int, default=DEFAULTS.top_k)
    g.add_argument("--max-new-tokens", type=int, default=DEFAULTS.max_new_tokens,
                   help="frames per batch (~21.5/s)")
    g.add_argument("--seed", type=int, default=None, help="same seed → same audio")
    if batches:
        g.add_argument("--max-bytes", type=int, default=300, help="text batch size in UTF-8 bytes")
    if history:
        g.add_argument("--history-turns", type=int, default=3,
                       help="earlier batches the model hears again as context")


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
                       help="highest peak after --loudness (default -1)")
        g.add_argument("--sample-peak", action="store_true",
                       help="hold the ceiling as sample peak (dBFS), not true peak (dBTP)")


def finishing(args) -> dict:
    """The finishing keywords of ``tts``/``dialogue``/``subtitles``/``stream``."""
    from .audio.loudness import Loudness, check_target
    from .text.lexicon import Lexicon

    found: dict = {}
    if getattr(args, "lexicon", None):
        found["lexicon"] = Lexicon.load(args.lexicon, "--lexicon")
    if getattr(args, "speed", 1.0) != 1.0:
        found["speed"] = args.speed
    if getattr(args, "loudness", None) is not None:
        found["loudness"] = Loudness(check_target(args.loudness, "--loudness"), args.ceiling,
                                     not args.sample_peak, args.loudness_per)
    return found


def finish_note(speech) -> str:
    """What finishing did, for the report line."""
    info = (speech.finishing or {}).get("loudness")
    if not info or info.get("measured") is None:
        return ""
    held = ", held by the ceiling" if info["held_by_ceiling"] else ""
    unit = "dBTP" if info["true_peak"] else "dBFS"
    return f", {info['measured']:.1f} LUFS, peak {info['peak']:.1f} {unit}{held}"


def debug_flag() -> argparse.ArgumentParser:
    """``--debug``, accepted before the command and after it (SUPPRESS: a sub-command that is
    not given it leaves the value the main parser set)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the traceback of every error")
    return p


def build_parser() -> argparse.ArgumentParser:
    common = [debug_flag()]
    ap = argparse.ArgumentParser(prog="python -m fish_core", description=__doc__, parents=common,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    def add_command(name: str, **kwargs) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=common, **kwargs)

    p = add_command("say", help="text to speech")
    p.add_argument("text", nargs="?", help="the text (or use --text-file / --script)")
    p.add_argument("--text-file", help="read the text from this file")
    p.add_argument("--script", help="a multi-speaker script file ([speaker_1]: / Name: lines)")
    p.add_argument("--voice", action="append", default=[], help="voice .safetensors (repeatable)")
    p.add_argument("--ref-audio", action="append", default=[], help="reference clip (repeatable)")
    p.add_argument("--ref-text", action="append", default=[], help="its transcript")
    p.add_argument("--pause", type=float, default=0.0, help="silence between script turns (s)")
    p.add_argument("-o", "--out", required=True, help="output .wav or .flac")
    p.add_argument("--stream", action="store_true",
                   help="write audio as it is generated: .wav or .pcm (16-bit), or - for stdout")
    p.add_argument("--stream-format", default="wav", choices=["wav", "pcm"],
                   help="what --stream writes to stdout")
    p.add_argument("--first-frames", type=int, default=FIRST_FRAMES,
                   help="--stream: first audio after this many frames")
    add_model_args(p)
    add_remote_args(p)
    add_sampling_args(p)
    add_finishing_args(p)

    p = add_command("plan", help="print the text batches the model will read (after the "
                                 "lexicon, pauses and speaker tags); loads no model")
    p.add_argument("text", nargs="?", help="the text (or use --text-file / --script)")
    p.add_argument("--text-file", help="read the text from this file")
    p.add_argument("--script", help="a multi-speaker script file")
    p.add_argument("--voice", action="append", default=[],
                   help="voice .safetensors (names the script's speakers; its own lexicon)")
    p.add_argument("--pause", type=float, default=0.0, help="silence between script turns (s)")
    p.add_argument("--turn-by-turn", action="store_true", help="each script turn on its own")
    p.add_argument("--max-bytes", type=int, default=300, help="text batch size in UTF-8 bytes")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_finishing_args(p, rate=False, loudness=False)

    p = add_command("book", help="speak a .txt/.md/.epub book, one audio file per chapter "
                                 "(resumes an interrupted run)")
    p.add_argument("book", help="the book: .txt, .md or .epub")
    p.add_argument("-o", "--out", required=True, help="output folder")
    p.add_argument("--voice", default=None, help="voice .safetensors")
    p.add_argument("--format", default="wav", choices=["wav", "flac"], help="chapter files")
    add_model_args(p)
    add_remote_args(p)
    add_sampling_args(p)
    add_finishing_args(p)

    p = add_command("codes", help="generate semantic codes only")
    p.add_argument("text")
    p.add_argument("-o", "--out", required=True, help="output .npy or .safetensors")
    add_model_args(p)
    add_sampling_args(p, batches=False, history=False)

    p = add_command("voice", help="voices")
    vs = p.add_subparsers(dest="voice_command", required=True)
    for name, about, audio, text in (
            ("encode", "encode a reference clip into a reusable voice", "the clip",
             "the words spoken in the clip"),
            ("from-take", "keep a generated take as a voice (casting: silence trimmed, tags "
             "taken out of the transcript)", "the take (.wav/.flac, e.g. written by say)",
             "the text the take says (as given to say)")):
        e = vs.add_parser(name, parents=common, help=about)
        e.add_argument("audio", help=audio)
        e.add_argument("--text", required=True, help=text)
        e.add_argument("--name", default=None)
        e.add_argument("-o", "--out", required=True, help="output .safetensors")
        e.add_argument("--lexicon", default=None, metavar="FILE",
                       help="keep this pronunciation lexicon in the voice (used wherever it "
                            "speaks; for a take: the one it was made with)")
        add_model_args(e, engine=False)
    r = vs.add_parser("register", parents=common,
                      help="register a reference clip in a remote engine's voice store")
    r.add_argument("audio")
    r.add_argument("--text", required=True, help="the words spoken in the clip")
    r.add_argument("--name", required=True, help="the voice's name on the engine")
    add_remote_args(r)

    p = add_command("srt", help="speak an SRT subtitle file on its timeline")
    p.add_argument("srt")
    p.add_argument("--voice", default=None, help="voice .safetensors")
    p.add_argument("-o", "--out", required=True, help="output .wav or .flac")
    p.add_argument("--srt-out", default=None, help="write the SRT of what was generated")
    add_model_args(p)
    add_remote_args(p)
    add_sampling_args(p, batches=False)
    add_finishing_args(p)

    p = add_command("encode", help="codec: audio file to codes")
    p.add_argument("audio")
    p.add_argument("-o", "--out", required=True, help="output .npy or .safetensors")
    add_model_args(p, precision=False, engine=False)

    p = add_command("decode", help="codec: codes to audio")
    p.add_argument("codes", help=".npy or .safetensors codes [10, frames]")
    p.add_argument("-o", "--out", required=True, help="output .wav or .flac")
    add_model_args(p, precision=False, engine=False)

    p = add_command("serve", help="HTTP API: OpenAI /v1/audio/speech, fish-speech /v1/tts")
    add_model_args(p)
    from .serve.main import add_serve_args

    add_serve_args(p)

    p = add_command("download", help="download a model variant")
    p.add_argument("variant", nargs="?", default=DEFAULT_MODEL)
    p.add_argument("--models-dir", default=None)
    return ap


class Bar:
    """tqdm progress over generated frames (a frame is ~46 ms of audio)."""

    def __init__(self, desc: str):
        from tqdm import tqdm

        self.bar = tqdm(desc=desc, unit="frame", dynamic_ncols=True)

    def __call__(self, done: int, total: int) -> None:
        self.bar.total = total
        self.bar.n = done
        self.bar.refresh()

    def close(self):
        self.bar.close()


def load_synth(args):
    from .synthesis.synthesizer import Synthesizer

    if getattr(args, "remote", None):
        from .remote.keys import read_api_key

        return Synthesizer.remote(args.remote, args.dialect,
                                  read_api_key(args.api_key_file, args.api_key_env),
                                  model=args.remote_model, voice_consent=args.voice_consent,
                                  register_voices=args.register_voices)
    return Synthesizer.from_pretrained(
        args.model, device=args.device, dtype=args.precision, compile=args.compile,
        compile_cache=args.compile_cache,
        quantization=args.quantization, models_dir=args.models_dir, download=not args.no_download)


def load_codec(args, dtype: torch.dtype | None = None):
    """Only the codec of ``--model`` (float32 unless ``dtype``)."""
    from .codec.model import Codec

    folder = hub.resolve(args.model, models_dir=args.models_dir, download=not args.no_download)
    return Codec.from_file(folder, resolve_device(args.device), dtype or torch.float32)


def sampling(args) -> dict:
    return dict(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                max_new_tokens=args.max_new_tokens, seed=args.seed,
                history_turns=args.history_turns)


# What each command writes to -o, checked (with the other options below) before a model loads.
OUTPUTS = {"say": AUDIO_SUFFIXES, "codes": CODES_SUFFIXES, "voice": VOICE_SUFFIXES,
           "srt": AUDIO_SUFFIXES, "encode": CODES_SUFFIXES, "decode": AUDIO_SUFFIXES}


STREAM_SUFFIXES = (".wav", ".pcm")


def check_request(args) -> None:
    """Every option that can be checked before any work: outputs, device and seed."""
    if getattr(args, "stream", False):  # say --stream: a .wav/.pcm file, or - for stdout
        if args.out != "-" and Path(args.out).suffix.lower() not in STREAM_SUFFIXES:
            raise ValueError(f"--stream writes .wav or .pcm (or - for stdout), got {args.out!r}")
        if args.out != "-":
            check_output(args.out, "--out", STREAM_SUFFIXES)
    elif args.command in OUTPUTS and getattr(args, "voice_command", None) != "register":
        check_output(args.out, "--out", OUTPUTS[args.command])
    if getattr(args, "srt_out", None):
        check_output(args.srt_out, "--srt-out", (".srt",))
    if getattr(args, "device", None) is not None:
        resolve_device(args.device, "--device")
    if getattr(args, "seed", None) is not None:
        check_seed(args.seed, "--seed")
    options = finishing(args)  # a bad lexicon, speed or loudness fails before a model loads
    if "speed" in options:
        from .audio.stretch import check_speed, import_pedalboard

        check_speed(args.speed, "--speed")
        import_pedalboard()
    if "loudness" in options:
        from .audio.loudness import import_pyloudnorm

        import_pyloudnorm()
    if args.command == "book":
        check_book_folder(args.out)


def save(path: str, write, what: str) -> None:
    """``write(path)``, keeping the result elsewhere (and saying where) if that fails."""
    note = write_or_keep(write, Path(path), what)
    if note:
        raise OutputError(note)


def save_codes(path: str | Path, codes: torch.Tensor) -> None:
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


def load_voice(path: str, synth):
    """A voice file, checked against the local model's sizes (a remote engine checks its own)."""
    from .speech.voices import Voice

    config = getattr(synth, "config", None)
    if config is None:
        return Voice.load(path)
    return Voice.load(path, config.num_codebooks, config.codebook_size)


def read_text(args) -> str:
    if args.text_file:
        return read_text_file(args.text_file, "--text-file")
    if args.text is None:
        raise ValueError("say needs a text, --text-file or --script")
    return args.text


def cmd_say(args) -> str:
    from .audio.files import save_audio

    if len(args.ref_audio) != len(args.ref_text):
        raise ValueError("give one --ref-text per --ref-audio")
    script = read_text_file(args.script, "--script") if args.script else None
    text = None if script is not None else read_text(args)
    synth = load_synth(args)
    voices = [load_voice(v, synth) for v in args.voice]
    for i, (audio, text) in enumerate(zip(args.ref_audio, args.ref_text)):
        voices.append(synth.encode_voice(audio, text, name=Path(audio).stem))
    if args.stream:
        return stream_say(args, synth, voices)
    bar = Bar("generating")
    try:
        if script is not None:
            speech = synth.dialogue(script, voices, pause=args.pause, max_bytes=args.max_bytes,
                                    on_progress=bar, **sampling(args), **finishing(args))
        else:
            speech = synth.tts(text, voices, max_bytes=args.max_bytes, on_progress=bar,
                               **sampling(args), **finishing(args))
    finally:
        bar.close()
    save(args.out, lambda p: save_audio(p, speech.waveform, speech.sample_rate), "audio")
    return (f"wrote {args.out}: {speech.duration:.2f} s in {len(speech.segments)} batch(es), "
            f"seed {speech.seed}{finish_note(speech)}")


def stream_say(args, synth, voices) -> str:
    """``say --stream``: 16-bit WAV or PCM written chunk by chunk as the model speaks."""
    from .audio.wav import StreamEncoder, wav_header

    if args.script:
        raise ValueError("--stream speaks a text (or --text-file), not a --script")
    to_stdout = args.out == "-"
    fmt = args.stream_format if to_stdout else Path(args.out).suffix.lower().lstrip(".")
    if fmt not in ("wav", "pcm"):
        raise ValueError(f"--stream writes .wav or .pcm (or - for stdout), got {args.out!r}")
    stream = synth.stream(read_text(args), voices, max_bytes=args.max_bytes,
                          first_frames=args.first_frames, **sampling(args), **finishing(args))
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
    return (f"streamed {samples / synth.sample_rate:.2f} s to {args.out}, seed {stream.seed}")


def cmd_codes(args) -> str:
    from .text.prompt import conversation

    if not check_text(args.text, "text").strip():
        raise ValueError("text is empty: nothing to say")
    synth = load_synth(args)
    prompt = synth.encoder.encode(conversation(args.text))
    params = SamplingParams(args.temperature, args.top_p, args.top_k, args.max_new_tokens)
    bar = Bar("generating")
    try:
        gen = synth.engine.generate(prompt, params, seed=args.seed, on_frame=bar)[0]
    finally:
        bar.close()
    save(args.out, lambda p: save_codes(p, gen.codes), "codes")
    return f"wrote {args.out}: codes {tuple(gen.codes.shape)}, seed {gen.seed}"


def cmd_voice(args) -> str:
    from .speech.voices import encode_voice

    if args.voice_command == "register":
        return cmd_voice_register(args)
    lexicon = finishing(args).get("lexicon")
    device = resolve_device(args.device)  # the codec as `say` would load it: same codes
    codec = load_codec(args, codec_dtype_for(device, resolve_dtype(args.precision, device)))
    name = args.name or Path(args.out).stem  # alice.safetensors speaks as "Alice:" in scripts
    notes = []
    if args.voice_command == "from-take":
        from .audio.files import load_audio
        from .speech.casting import take_clip

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
    from .audio.files import save_audio
    from .text.plan import parse_srt

    document = read_text_file(args.srt, "srt")
    parse_srt(document)  # a bad SRT fails before the model loads
    synth = load_synth(args)
    voice = load_voice(args.voice, synth) if args.voice else None
    bar = Bar("generating")
    try:
        result = synth.subtitles(document, voice, on_progress=bar, **sampling(args),
                                 **finishing(args))
    finally:
        bar.close()
    for line in result.overruns:
        print(f"warning: {line}", file=sys.stderr)
    notes = [write_or_keep(lambda p: save_audio(p, result.waveform, result.sample_rate),
                           Path(args.out), "audio")]
    if args.srt_out:
        notes.append(write_or_keep(lambda p: p.write_text(result.srt(), encoding="utf-8"),
                                   Path(args.srt_out), "SRT"))
    if any(notes):
        raise OutputError("; ".join(n for n in notes if n))
    return f"wrote {args.out}: {result.duration:.2f} s, {len(result.cues)} cues"


def cmd_plan(args) -> str:
    """``plan``: the text batches exactly as the model will read them, with the pauses."""
    import json

    from .speech.arguments import script_turns
    from .speech.finishing import Finishing
    from .speech.voices import Voice

    voices = [Voice.load(v) for v in args.voice]
    finish = Finishing.of(lexicon=finishing(args).get("lexicon"))
    if args.script:
        turns, voices = script_turns(read_text_file(args.script, "--script"), voices, None,
                                     args.pause)
        batches = finish.turn_batches(turns, voices, args.max_bytes,
                                      args.pause > 0 or args.turn_by_turn)
    else:
        batches = finish.batches(read_text(args), voices, args.max_bytes)
    from .speech.timeline import gaps

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
    from tqdm import tqdm

    from .speech.audiobook import render_book
    from .text.book import read_book

    book = read_book(args.book)  # a bad book fails before the model loads
    synth = load_synth(args)
    voice = load_voice(args.voice, synth) if args.voice else None
    options = {k: v for k, v in sampling(args).items() if k != "seed"}
    bar = tqdm(desc=book.title[:30] or "book", total=sum(len(c.text) for c in book.chapters),
               unit="char", dynamic_ncols=True)

    def progress(done: int, total: int) -> None:
        bar.n = done
        bar.refresh()

    try:
        result = render_book(synth, book, args.out, voice=voice, seed=args.seed,
                             audio_format=args.format, model=str(args.remote or args.model),
                             max_bytes=args.max_bytes, on_progress=progress, **options,
                             **finishing(args))
    finally:
        bar.close()
    made = len(result.chapters) - result.skipped
    return (f"wrote {args.out}: {len(result.chapters)} chapters ({made} spoken, "
            f"{result.skipped} already done), seed {result.seed}; chapters.json, book.cue, "
            "chapters.ffmetadata")


def cmd_encode(args) -> str:
    from .codec.files import encode_file

    codes = encode_file(load_codec(args), args.audio)
    save(args.out, lambda p: save_codes(p, codes), "codes")
    return f"wrote {args.out}: codes {tuple(codes.shape)}"


def cmd_decode(args) -> str:
    from .codec.files import decode_to_file

    codes = read_codes(args.codes)
    codes = codes[0] if codes.ndim == 3 else codes  # [1, 10, n] as written by other tools
    codec = load_codec(args)
    save(args.out, lambda p: decode_to_file(codec, codes, p), "audio")
    return f"wrote {args.out}: {codes.shape[-1] * codec.frame_length / codec.sample_rate:.2f} s"


def cmd_serve(args) -> str:
    from .serve.main import serve

    return serve(args)


def cmd_download(args) -> str:
    path = hub.resolve(args.variant, models_dir=args.models_dir, download=True)
    return f"model ready in {path}"


COMMANDS = {"say": cmd_say, "plan": cmd_plan, "book": cmd_book, "codes": cmd_codes,
            "voice": cmd_voice, "srt": cmd_srt,
            "encode": cmd_encode, "decode": cmd_decode, "serve": cmd_serve,
            "download": cmd_download}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_request(args)
        message = COMMANDS[args.command](args)
        # With audio on stdout (say --stream -o -), the report goes to stderr.
        print(message, file=sys.stderr if getattr(args, "out", None) == "-" else sys.stdout)
    except USER_ERRORS as e:
        if getattr(args, "debug", False):
            traceback.print_exc()
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
