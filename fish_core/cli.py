"""Command line: ``python -m fish_core <command>``.

    say "Hello there!" -o hello.wav                       text (or --text-file) to speech
    say "Hi." --voice me.safetensors -o hi.wav            ... in a saved voice
    say "Hi." --ref-audio me.wav --ref-text "..." -o hi.wav   ... cloning a clip directly
    say --script dialogue.txt --voice alice.safetensors --voice bob.safetensors -o talk.wav
    voice encode me.wav --text "What I say." --name me -o me.safetensors
    srt film.srt -o film.wav [--srt-out generated.srt] [--voice me.safetensors]
    codes "Hello" -o codes.npy                            semantic codes only (no codec)
    encode ref.wav -o ref.npy  /  decode codes.npy -o out.wav
    download s2-pro                                       fetch a model into --models-dir
    serve --port 8080 [--api-key KEY] [--voices DIR]      HTTP API (OpenAI and fish-speech)

``--model`` takes a checkpoint folder, a variant (s2-pro, s2-pro-fp8) or a Hugging Face repo id;
downloads go to --models-dir (default $SAILFISH_MODELS_DIR or ~/.cache/sailfish/models) and
honour HF_HUB_OFFLINE.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from . import hub
from .stream import FIRST_FRAMES

DEFAULT_MODEL = "s2-pro"


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
        g.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp16", "fp32"])
    if not engine:
        return
    g.add_argument("--quantization", default="none",
                   choices=["none", "fp8", "int8", "int4", "fp8-dynamic", "nvfp4"])
    g.add_argument("--compile", action="store_true", help="torch.compile the decode step")
    g.add_argument("--compile-cache", default=None,
                   help="persistent folder for compiled kernels ($SAILFISH_COMPILE_CACHE)")


def add_sampling_args(p: argparse.ArgumentParser, batches: bool = True, history: bool = True
                      ) -> None:
    """Sampling options; ``batches`` (text batch size) and ``history`` (context turns) only for
    the commands that plan batches."""
    g = p.add_argument_group("sampling")
    g.add_argument("--temperature", type=float, default=0.8)
    g.add_argument("--top-p", type=float, default=0.8)
    g.add_argument("--top-k", type=int, default=30)
    g.add_argument("--max-new-tokens", type=int, default=1024, help="frames per batch (~21.5/s)")
    g.add_argument("--seed", type=int, default=None, help="same seed → same audio")
    if batches:
        g.add_argument("--max-bytes", type=int, default=300, help="text batch size in UTF-8 bytes")
    if history:
        g.add_argument("--history-turns", type=int, default=3,
                       help="earlier batches the model hears again as context")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m fish_core", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("say", help="text to speech")
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
    add_sampling_args(p)

    p = sub.add_parser("codes", help="generate semantic codes only")
    p.add_argument("text")
    p.add_argument("-o", "--out", required=True, help="output .npy or .safetensors")
    add_model_args(p)
    add_sampling_args(p, batches=False, history=False)

    p = sub.add_parser("voice", help="voices")
    vs = p.add_subparsers(dest="voice_command", required=True)
    e = vs.add_parser("encode", help="encode a reference clip into a reusable voice")
    e.add_argument("audio")
    e.add_argument("--text", required=True, help="the words spoken in the clip")
    e.add_argument("--name", default=None)
    e.add_argument("-o", "--out", required=True, help="output .safetensors")
    add_model_args(e, engine=False)

    p = sub.add_parser("srt", help="speak an SRT subtitle file on its timeline")
    p.add_argument("srt")
    p.add_argument("--voice", default=None, help="voice .safetensors")
    p.add_argument("-o", "--out", required=True, help="output .wav or .flac")
    p.add_argument("--srt-out", default=None, help="write the SRT of what was generated")
    add_model_args(p)
    add_sampling_args(p, batches=False)

    p = sub.add_parser("encode", help="codec: audio file to codes")
    p.add_argument("audio")
    p.add_argument("-o", "--out", required=True, help="output .npy or .safetensors")
    add_model_args(p, precision=False, engine=False)

    p = sub.add_parser("decode", help="codec: codes to audio")
    p.add_argument("codes", help=".npy or .safetensors codes [10, frames]")
    p.add_argument("-o", "--out", required=True, help="output .wav or .flac")
    add_model_args(p, precision=False, engine=False)

    p = sub.add_parser("serve", help="HTTP API: OpenAI /v1/audio/speech, fish-speech /v1/tts")
    add_model_args(p)
    from .serve.main import add_serve_args

    add_serve_args(p)

    p = sub.add_parser("download", help="download a model variant")
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
    from .synth import Synthesizer

    return Synthesizer.from_pretrained(
        args.model, device=args.device, dtype=args.precision, compile=args.compile,
        compile_cache=args.compile_cache,
        quantization=args.quantization, models_dir=args.models_dir, download=not args.no_download)


def load_codec(args, dtype: torch.dtype | None = None):
    """Only the codec of ``--model`` (float32 unless ``dtype``)."""
    from .codec import Codec
    from .synth import resolve_device

    folder = hub.resolve(args.model, models_dir=args.models_dir, download=not args.no_download)
    return Codec.from_file(folder, resolve_device(args.device), dtype or torch.float32)


def sampling(args) -> dict:
    return dict(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                max_new_tokens=args.max_new_tokens, seed=args.seed,
                history_turns=args.history_turns)


def save_codes(path: str, codes: torch.Tensor) -> None:
    path = Path(path)
    if path.suffix == ".npy":
        np.save(path, codes.cpu().numpy().astype(np.int64))
    elif path.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({"codes": codes.cpu().to(torch.int64).contiguous()}, str(path))
    else:
        raise ValueError(f"codes are written as .npy or .safetensors, got {path.name!r}")


def read_codes(path: str) -> torch.Tensor:
    path = Path(path)
    if path.suffix == ".npy":
        return torch.from_numpy(np.load(path, allow_pickle=False))
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        tensors = load_file(str(path))
        if "codes" not in tensors:
            raise ValueError(f"{path} has no 'codes' tensor")
        return tensors["codes"]
    raise ValueError(f"codes are read from .npy or .safetensors, got {path.name!r}")


def read_text(args) -> str:
    if args.text_file:
        return Path(args.text_file).read_text(encoding="utf-8")
    if args.text is None:
        raise ValueError("say needs a text, --text-file or --script")
    return args.text


def cmd_say(args) -> str:
    from .audio import save_audio
    from .voices import Voice

    if len(args.ref_audio) != len(args.ref_text):
        raise ValueError("give one --ref-text per --ref-audio")
    synth = load_synth(args)
    voices = [Voice.load(v, synth.config.num_codebooks, synth.config.codebook_size)
              for v in args.voice]
    for i, (audio, text) in enumerate(zip(args.ref_audio, args.ref_text)):
        voices.append(synth.encode_voice(audio, text, name=Path(audio).stem))
    if args.stream:
        return stream_say(args, synth, voices)
    bar = Bar("generating")
    try:
        if args.script:
            speech = synth.dialogue(Path(args.script).read_text(encoding="utf-8"), voices,
                                    pause=args.pause, max_bytes=args.max_bytes,
                                    on_progress=bar, **sampling(args))
        else:
            speech = synth.tts(read_text(args), voices, max_bytes=args.max_bytes,
                               on_progress=bar, **sampling(args))
    finally:
        bar.close()
    save_audio(args.out, speech.waveform, speech.sample_rate)
    return (f"wrote {args.out}: {speech.duration:.2f} s in {len(speech.segments)} batch(es), "
            f"seed {speech.seed}")


def stream_say(args, synth, voices) -> str:
    """``say --stream``: 16-bit WAV or PCM written chunk by chunk as the model speaks."""
    from .serve.formats import StreamEncoder, wav_header

    if args.script:
        raise ValueError("--stream speaks a text (or --text-file), not a --script")
    to_stdout = args.out == "-"
    fmt = args.stream_format if to_stdout else Path(args.out).suffix.lower().lstrip(".")
    if fmt not in ("wav", "pcm"):
        raise ValueError(f"--stream writes .wav or .pcm (or - for stdout), got {args.out!r}")
    stream = synth.stream(read_text(args), voices, max_bytes=args.max_bytes,
                          first_frames=args.first_frames, **sampling(args))
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
    from .generate import SamplingParams
    from .prompt import conversation

    synth = load_synth(args)
    prompt = synth.encoder.encode(conversation(args.text))
    params = SamplingParams(args.temperature, args.top_p, args.top_k, args.max_new_tokens)
    bar = Bar("generating")
    try:
        gen = synth.engine.generate(prompt, params, seed=args.seed, on_frame=bar)[0]
    finally:
        bar.close()
    save_codes(args.out, gen.codes)
    return f"wrote {args.out}: codes {tuple(gen.codes.shape)}, seed {gen.seed}"


def cmd_voice(args) -> str:
    from .synth import codec_dtype_for, resolve_device, resolve_dtype
    from .voices import encode_voice

    device = resolve_device(args.device)  # the codec as `say` would load it: same codes
    codec = load_codec(args, codec_dtype_for(device, resolve_dtype(args.precision, device)))
    name = args.name or Path(args.audio).stem
    voice = encode_voice(codec, args.audio, args.text, name=name)
    voice.save(args.out)
    return f"wrote {args.out}: voice {name!r}, {voice.duration:.2f} s, {voice.frames} frames"


def cmd_srt(args) -> str:
    from .audio import save_audio
    from .voices import Voice

    synth = load_synth(args)
    voice = Voice.load(args.voice, synth.config.num_codebooks, synth.config.codebook_size) \
        if args.voice else None
    bar = Bar("generating")
    try:
        result = synth.subtitles(Path(args.srt).read_text(encoding="utf-8"), voice,
                                 on_progress=bar, **sampling(args))
    finally:
        bar.close()
    save_audio(args.out, result.waveform, result.sample_rate)
    if args.srt_out:
        Path(args.srt_out).write_text(result.srt(), encoding="utf-8")
    for line in result.overruns:
        print(f"warning: {line}", file=sys.stderr)
    return f"wrote {args.out}: {result.duration:.2f} s, {len(result.cues)} cues"


def cmd_encode(args) -> str:
    from .codec import encode_file

    codes = encode_file(load_codec(args), args.audio)
    save_codes(args.out, codes)
    return f"wrote {args.out}: codes {tuple(codes.shape)}"


def cmd_decode(args) -> str:
    from .codec import decode_to_file

    codec = load_codec(args)
    codes = read_codes(args.codes)
    codes = codes[0] if codes.ndim == 3 else codes  # [1, 10, n] as written by other tools
    decode_to_file(codec, codes, args.out)
    return f"wrote {args.out}: {codes.shape[-1] * codec.frame_length / codec.sample_rate:.2f} s"


def cmd_serve(args) -> str:
    from .serve.main import serve

    return serve(args)


def cmd_download(args) -> str:
    path = hub.resolve(args.variant, models_dir=args.models_dir, download=True)
    return f"model ready in {path}"


COMMANDS = {"say": cmd_say, "codes": cmd_codes, "voice": cmd_voice, "srt": cmd_srt,
            "encode": cmd_encode, "decode": cmd_decode, "serve": cmd_serve,
            "download": cmd_download}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        message = COMMANDS[args.command](args)
        # With audio on stdout (say --stream -o -), the report goes to stderr.
        print(message, file=sys.stderr if getattr(args, "out", None) == "-" else sys.stdout)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
