"""``sailfish transcribe clip.wav [--words] [-o out.txt|.json|.srt|.vtt]``: what a clip says
(Qwen3-ASR), and with ``--words`` when each word is said (Qwen3-ForcedAligner). Both models
are downloaded on first use (``--asr FOLDER`` / ``--aligner FOLDER`` use ones you have).

Everything asked is checked before a model loads: the clip (exists, is audio, not too long),
the output path, the language. The transcript is printed (with ``--words``, one word a line:
start, end, word); ``-o`` writes it instead, atomically.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from ..outputs import OutputError, check_output, write_or_keep

OUT_SUFFIXES = (".txt", ".json", ".srt", ".vtt")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def add_transcribe_command(add_command, common: list) -> None:
    from ..hearing.split import MAX_ALIGN_SECONDS
    from ..hearing.transcript import LANGUAGES

    p = add_command("transcribe", "what a clip says (Qwen3-ASR); --words: when each word is "
                                  "said (Qwen3-ForcedAligner). A recognised transcript can be "
                                  "wrong: read it before you use it")
    p.add_argument("audio", help="the clip (wav, flac, ogg, mp3 …), any rate, mono or stereo")
    p.add_argument("--words", action="store_true",
                   help="time every word too (the clip is heard in pieces of at most "
                        f"{MAX_ALIGN_SECONDS / 60:g} minutes)")
    p.add_argument("--language", default=None,
                   help="the language spoken, one of: " + ", ".join(LANGUAGES)
                        + " (default: detected)")
    p.add_argument("--context", default="",
                   help="words to expect (names, terms), a hint given to the model")
    p.add_argument("-o", "--out", default=None,
                   help=".txt (the text), .json (language, text, words), .srt or .vtt "
                        "(captions: implies --words); default: printed")
    add_transcribe_models(p)


def add_transcribe_models(p) -> None:
    """``transcribe``'s models: which, where, on what device and in which precision."""
    from ..loading.hub import DEFAULT_MODELS_DIR

    g = p.add_argument_group("models")
    g.add_argument("--asr", default=None, metavar="FOLDER",
                   help="a Qwen3-ASR checkpoint folder (default: Qwen3-ASR-0.6B, downloaded)")
    g.add_argument("--aligner", default=None, metavar="FOLDER",
                   help="a Qwen3-ForcedAligner folder (default: Qwen3-ForcedAligner-0.6B, "
                        "downloaded)")
    g.add_argument("--models-dir", default=None,
                   help=f"where downloaded models live (default {DEFAULT_MODELS_DIR})")
    g.add_argument("--no-download", action="store_true",
                   help="never download; a model that is not here is an error")
    g.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1 or mps")
    g.add_argument("--precision", default="auto", choices=PRECISIONS,
                   help="weights' dtype (auto: bf16 on a GPU, fp32 on a CPU)")
    g.add_argument("--threads", default=None, metavar="N",
                   help="CPU threads (default auto: the free physical cores; docs/cpu.md)")


def read_clip(path, field: str = "audio"):
    """``(samples [C, T] float32, rate)`` of an audio file, checked (and its length bounded)
    before it is decoded."""
    from ..audio.files import AudioError, check_audio_file, decoder_notes_hidden, import_soundfile
    from ..hearing.asr import MAX_CLIP_SECONDS

    info = check_audio_file(path, field)
    if info.samplerate > 0 and info.frames / info.samplerate > MAX_CLIP_SECONDS:
        raise AudioError(f"{field}: {path} is {info.frames / info.samplerate / 3600:.1f} hours "
                         f"long; the limit is {MAX_CLIP_SECONDS / 3600:g}")
    sf = import_soundfile()
    try:
        with decoder_notes_hidden():
            data, rate = sf.read(str(path), dtype="float32", always_2d=True)  # [T, C]
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        raise AudioError(f"{field}: {path} cannot be decoded past its header ({e})") from None
    return data.T, int(rate)


def write_text(path: Path, text: str) -> None:
    """``text`` into ``path`` atomically (a temporary file beside it, then replaced)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:  # the text verbatim
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def render(heard, suffix: str) -> str:
    """The transcript as the output file ``suffix`` (or ``""``: printed) wants it."""
    from ..text.captions import write_captions

    if suffix in (".srt", ".vtt"):
        return write_captions(list(heard.words), suffix[1:], heard.text)
    if suffix == ".json":
        words = None if heard.words is None else [
            {"text": w.text, "start": w.start, "end": w.end} for w in heard.words]
        return json.dumps({"language": heard.language, "text": heard.text, "words": words},
                          ensure_ascii=False, indent=1) + "\n"
    if heard.words is not None and suffix == "":
        return "\n".join(f"{w.start:.3f}\t{w.end:.3f}\t{w.text}" for w in heard.words)
    return heard.text + ("\n" if suffix else "")


def cmd_transcribe(args) -> str:
    """``transcribe``: the clip heard (and its words timed), printed or written to ``-o``."""
    from ..hearing.transcription import transcribe

    suffix, device = check_transcribe(args)
    words = args.words or suffix in (".srt", ".vtt")
    wave, rate = read_clip(args.audio)
    heard = transcribe(wave, rate, language=args.language, context=args.context, words=words,
                       asr=args.asr, aligner=args.aligner, models_dir=args.models_dir,
                       device=str(device),
                       dtype=None if args.precision == "auto" else args.precision,
                       download=not args.no_download)
    said = heard.language or "language unknown"
    warn_heard(heard)
    if args.out is None:
        return render(heard, "") if heard.text or heard.words else f"({said}: nothing heard)"
    save_transcript(Path(args.out), heard, suffix)
    timed = f", {len(heard.words)} words timed" if heard.words is not None else ""
    return f"wrote {args.out}: {said}, {len(heard.text)} characters{timed}"


def check_transcribe(args):
    """``(suffix, device)``: the output file's suffix ("": printed), the language, the context
    and the device checked before a model loads."""
    from ..engine.device import resolve_device
    from ..hearing.asr import check_settings
    from ..hearing.transcript import LANGUAGES

    suffix = ""
    if args.out is not None:
        suffix = check_output(args.out, "--out", OUT_SUFFIXES).suffix.lower()
    try:
        check_settings(args.language, args.context, None, LANGUAGES)
    except ValueError as e:  # "language 'x' is not …" / "context is …": the flag leads
        raise ValueError(f"--{e}") from None
    return suffix, resolve_device(args.device, "--device")


def warn_heard(heard) -> None:
    """What the recogniser says of its transcript (stderr): a note, a piece cut short."""
    if heard.note:
        print(f"warning: {heard.note}", file=sys.stderr)
    if not heard.complete:
        print("warning: the model ran out of tokens before the end of a piece: the transcript "
              "is cut short there", file=sys.stderr)


def save_transcript(path: Path, heard, suffix: str) -> None:
    """The transcript written as ``suffix`` asks, whole or not at all (kept elsewhere, and
    said, if ``path`` cannot be written)."""
    note = write_or_keep(lambda p: write_text(p, render(heard, suffix)), path, "transcript")
    if note:
        raise OutputError(note)
