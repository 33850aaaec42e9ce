"""``Synthesizer``: the one Python API the CLI, the ComfyUI nodes and users' scripts call.

    synth = Synthesizer.from_pretrained("s2-pro")            # or a local checkpoint folder
    speech = synth.tts("Hello there!", seed=1)
    voice = synth.encode_voice("me.wav", "What I say in me.wav.", name="me")
    speech = synth.tts("Now in my voice.", voice=voice)
    speech = synth.dialogue("Alice: Hi!\\nBob: Hello.", voices={"Alice": a, "Bob": b})
    result = synth.subtitles(open("film.srt").read(), voice=voice)

Long text is planned into sentence-bounded batches (``text.plan_batches``); every batch sees the
references plus the last ``history_turns`` generated turns, trimmed further if the prompt would
not leave room for ``max_new_tokens``. All batches' codes are decoded in one causal codec pass,
so the joins have no clicks.
"""

from __future__ import annotations

import importlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import torch

from . import text as textplan
from .codec import CHECKPOINT_NAME, Codec
from .config import ModelConfig
from .generate import Engine, GenerationError, SamplingParams
from .model import DualAR
from .prompt import PromptEncoder, conversation
from .stream import CHUNK_FRAMES, FIRST_FRAMES, AudioStream, SpeechJob, decode_batches
from .tokenizer import FishTokenizer
from .voices import Voice, encode_voice

Progress = Callable[[int, int], None]


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    if str(device) != "auto":
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def resolve_dtype(dtype: str | torch.dtype = "auto", device: torch.device | None = None):
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
             "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}
    if dtype != "auto":
        if dtype not in names:
            raise ValueError(f"precision must be auto, bf16, fp16 or fp32, got {dtype!r}")
        return names[dtype]
    if device is not None and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return torch.float16
    return torch.bfloat16


def codec_dtype_for(device: torch.device, model_dtype: torch.dtype) -> torch.dtype:
    """The codec runs in the model's dtype on a GPU and in float32 on the CPU (where
    reduced-precision convolutions are slow)."""
    return torch.float32 if device.type == "cpu" else model_dtype


@dataclass
class Segment:
    """One generated piece: its text, speaker, where it sits in the output, how it went."""

    text: str
    speaker: int | None
    start: float  # seconds in the output waveform
    end: float
    frames: int
    seconds: float  # wall time spent generating it
    stopped_on_eos: bool


@dataclass
class Speech:
    waveform: torch.Tensor  # float32 [T], CPU
    sample_rate: int
    codes: torch.Tensor  # [num_codebooks, frames] of all segments, in order
    segments: list[Segment]
    seed: int

    @property
    def duration(self) -> float:
        return self.waveform.shape[-1] / self.sample_rate


@dataclass
class SubtitleSpeech(Speech):
    cues: list[textplan.Cue] = field(default_factory=list)  # where each cue really sits
    overruns: list[str] = field(default_factory=list)  # cues longer than their slot

    def srt(self) -> str:
        return textplan.format_srt(self.cues)


class Synthesizer:
    def __init__(self, model: DualAR, tokenizer: FishTokenizer, codec: Codec | None,
                 compile: bool = False, context_length: int | None = None,
                 compile_cache: str | None = None):
        self.model = model
        self.config: ModelConfig = model.config
        self.tokenizer = tokenizer
        tokenizer.check_config(self.config)
        self.codec = codec
        self.encoder = PromptEncoder(tokenizer, self.config.num_codebooks, self.config.codebook_size)
        self.engine = Engine(model, compile=compile, max_context=context_length,
                             compile_cache=compile_cache)

    def release_caches(self) -> None:
        """Free the KV caches (they are re-made, sized to the request, on the next call)."""
        self.model.free_caches()

    @classmethod
    def from_pretrained(cls, spec: str | Path, device="auto", dtype="auto", compile=False,
                        quantization: str | None = None, models_dir=None, download=True,
                        codec_dtype=None, context_length: int | None = None,
                        compile_cache: str | None = None) -> "Synthesizer":
        """Load a checkpoint folder, a variant name (``s2-pro``) or a Hugging Face repo id.
        ``context_length`` caps prompt + generated tokens (default: the model's 32768)."""
        from .hub import resolve

        folder = resolve(spec, models_dir=models_dir, download=download)
        device = resolve_device(device)
        dtype = resolve_dtype(dtype, device)
        model = load_quantized(folder, device, dtype, quantization)
        tokenizer = FishTokenizer.from_dir(folder)
        codec = Codec.from_file(folder, device, codec_dtype or codec_dtype_for(device, dtype)) \
            if (folder / CHECKPOINT_NAME).is_file() else None
        return cls(model, tokenizer, codec, compile=compile, context_length=context_length,
                   compile_cache=compile_cache)

    @property
    def sample_rate(self) -> int:
        return self.require_codec().sample_rate

    def require_codec(self) -> Codec:
        if self.codec is None:
            raise RuntimeError("this model folder has no codec.pth, so audio cannot be made")
        return self.codec

    # ------------------------------------------------------------------ voices
    def encode_voice(self, audio, text: str, name: str = "voice", sample_rate: int | None = None
                     ) -> Voice:
        """Encode a reference clip (file path, tensor/array with ``sample_rate``, or a ComfyUI
        AUDIO dict) and its transcript into a reusable voice."""
        return encode_voice(self.require_codec(), audio, text, name, sample_rate)

    # ------------------------------------------------------------------ synthesis
    def tts(self, text: str, voice: Voice | Sequence[Voice] | None = None, *,
            temperature=0.8, top_p=0.8, top_k=30, max_new_tokens=1024, seed: int | None = None,
            max_bytes: int = textplan.DEFAULT_MAX_BYTES, history_turns: int = 3,
            on_progress: Progress | None = None, cancel: Callable[[], bool] | None = None
            ) -> Speech:
        """Speak ``text`` (speaker tags allowed) in ``voice`` (or several voices: voice i is
        ``<|speaker:i|>``), or in a voice the model picks when no voice is given."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("text is empty: nothing to say")
        voices = [voice] if isinstance(voice, Voice) else list(voice or [])
        batches = [(b, None) for b in textplan.plan_batches(text, max_bytes)]
        params = SamplingParams(temperature, top_p, top_k, max_new_tokens).validate()
        return self._speak(batches, voices, params, seed, history_turns, 0.0, on_progress, cancel)

    def stream(self, text: str, voice: Voice | Sequence[Voice] | None = None, *,
               temperature=0.8, top_p=0.8, top_k=30, max_new_tokens=1024,
               seed: int | None = None, max_bytes: int = textplan.DEFAULT_MAX_BYTES,
               history_turns: int = 3, first_frames: int = FIRST_FRAMES,
               chunk_frames: int = CHUNK_FRAMES
               ) -> AudioStream:
        """``tts`` as an iterator of float32 waveform chunks, the first after ``first_frames``
        frames; with the default chunking the chunks concatenate to ``tts``'s waveform."""
        voices = [voice] if isinstance(voice, Voice) else list(voice or [])
        params = SamplingParams(temperature, top_p, top_k, max_new_tokens)
        job = SpeechJob(self, text, voices, params=params, seed=seed, max_bytes=max_bytes,
                        history_turns=history_turns, first_frames=first_frames,
                        chunk_frames=chunk_frames)
        return AudioStream(self, job)

    def dialogue(self, script: str, voices: Mapping[str, Voice] | Sequence[Voice] = (), *,
                 pause: float = 0.0, require_voices: bool | None = None, temperature=0.8,
                 top_p=0.8, top_k=30, max_new_tokens=1024, seed: int | None = None,
                 max_bytes: int = textplan.DEFAULT_MAX_BYTES, history_turns: int = 3,
                 on_progress: Progress | None = None, cancel: Callable[[], bool] | None = None
                 ) -> Speech:
        """A multi-speaker script (``<|speaker:i|>``, ``[speaker_1]: …`` or ``Name: …`` lines).
        ``voices`` by name (``{"Alice": v}``) or in speaker order. With voices given, every speaker
        must map to one (``require_voices``, default on). ``pause`` seconds of silence go between
        turns (each turn is then generated on its own)."""
        if isinstance(voices, Mapping):
            names, voice_list = list(voices), list(voices.values())
        else:
            voice_list = list(voices)
            names = [v.name for v in voice_list]
        require = bool(voice_list) if require_voices is None else require_voices
        turns = textplan.assign_speakers(textplan.parse_script(script, names), names, require)
        if not turns:
            raise ValueError("the script is empty: nothing to say")
        if not math.isfinite(pause) or pause < 0 or pause > 10:
            raise ValueError(f"pause must be between 0 and 10 seconds, got {pause}")
        if pause > 0:
            batches = [(t.tagged, t.speaker) for t in turns]
            batches = [(piece, spk) for b, spk in batches
                       for piece in textplan.plan_batches(b, max_bytes)]
        else:
            tagged = "".join(t.tagged for t in turns)
            batches = [(b, None) for b in textplan.plan_batches(tagged, max_bytes)]
        params = SamplingParams(temperature, top_p, top_k, max_new_tokens).validate()
        return self._speak(batches, voice_list, params, seed, history_turns, pause,
                           on_progress, cancel)

    def subtitles(self, srt: str, voice: Voice | None = None, *, temperature=0.8, top_p=0.8,
                  top_k=30, max_new_tokens=1024, seed: int | None = None,
                  history_turns: int = 3, on_progress: Progress | None = None,
                  cancel: Callable[[], bool] | None = None) -> SubtitleSpeech:
        """Speak each SRT cue at its start time. A cue whose speech is longer than the time to
        the next cue is kept whole: the later cues move back, and the overrun is reported."""
        cues = textplan.parse_srt(srt)
        params = SamplingParams(temperature, top_p, top_k, max_new_tokens).validate()
        voices = [voice] if voice is not None else []
        results = self._generate([(c.text, None) for c in cues], voices, params, seed,
                                 history_turns, on_progress, cancel)
        codec = self.require_codec()
        sr = codec.sample_rate
        pieces, placed, overruns, segments, codes = [], [], [], [], []
        cursor = 0  # samples written so far
        for i, (cue, (batch_text, gen, seconds)) in enumerate(zip(cues, results)):
            wave = self.decode(gen.codes)
            start = max(round(cue.start * sr), cursor)
            pieces += [torch.zeros(start - cursor), wave]
            cursor = start + wave.shape[0]
            next_start = cues[i + 1].start if i + 1 < len(cues) else math.inf
            if cursor / sr > next_start + 1e-9:
                overruns.append(f"cue {cue.index} ({cue.text[:40]!r}) runs "
                                f"{cursor / sr - next_start:.2f} s into cue {cue.index + 1}")
            if start > round(cue.start * sr):
                overruns.append(f"cue {cue.index} starts {start / sr - cue.start:.2f} s late")
            placed.append(textplan.Cue(cue.index, start / sr, cursor / sr, cue.text))
            segments.append(Segment(cue.text, None, start / sr, cursor / sr, gen.codes.shape[1],
                                    seconds, gen.stopped_on_eos))
            codes.append(gen.codes)
        tail = max(0, round(cues[-1].end * sr) - cursor)
        waveform = torch.cat(pieces + [torch.zeros(tail)])
        return SubtitleSpeech(waveform, sr, torch.cat(codes, dim=1), segments,
                              results[0][1].seed, placed, overruns)

    # ------------------------------------------------------------------ internals
    def _speak(self, batches, voices, params, seed, history_turns, pause, on_progress, cancel
               ) -> Speech:
        results = self._generate(batches, voices, params, seed, history_turns, on_progress, cancel)
        codec = self.require_codec()
        sr, hop = codec.sample_rate, codec.frame_length
        all_codes = torch.cat([gen.codes for _, gen, _ in results], dim=1)
        if all_codes.shape[1] == 0:
            raise GenerationError("the model ended the speech before producing any audio; "
                                  "try another seed or rephrase the text")
        # Cut into chunks as a stream of these batches would be, so streams match exactly.
        wave = decode_batches(codec, [gen.codes for _, gen, _ in results])
        gap = round(pause * sr)
        pieces, segments, frame, cursor = [], [], 0, 0
        for i, ((batch_text, gen, seconds), (_, speaker)) in enumerate(zip(results, batches)):
            n = gen.codes.shape[1]
            piece = wave[frame * hop:(frame + n) * hop]
            frame += n
            if gap and i:
                pieces.append(torch.zeros(gap))
                cursor += gap
                piece = fade_in(piece, sr)
            if gap and i + 1 < len(results):
                piece = fade_out(piece, sr)
            pieces.append(piece)
            segments.append(Segment(batch_text, speaker, cursor / sr,
                                    (cursor + piece.shape[0]) / sr, n, seconds,
                                    gen.stopped_on_eos))
            cursor += piece.shape[0]
        waveform = torch.cat(pieces) if pieces else torch.zeros(0)
        return Speech(waveform, sr, all_codes, segments, results[0][1].seed)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes ``[num_codebooks, frames]`` → float32 waveform ``[frames * 2048]`` on the CPU."""
        if codes.shape[1] == 0:
            return torch.zeros(0)
        return self.require_codec().decode(codes)[0, 0].cpu()

    def _generate(self, batches, voices: Sequence[Voice], params: SamplingParams,
                  seed: int | None, history_turns: int, on_progress, cancel):
        """Generate every batch in order with a bounded history; returns
        ``[(batch_text, Generated, seconds)]``."""
        if isinstance(history_turns, bool) or not isinstance(history_turns, int) \
                or history_turns < 0:
            raise ValueError(f"history_turns must be an integer >= 0, got {history_turns!r}")
        references = [ref for i, v in enumerate(voices) for ref in v.tagged(i)]
        for v in voices:
            for clip in v.clips:
                self.encoder.check_codes(clip.codes, f"voice {v.name!r}")
        if seed is None:
            import secrets

            seed = secrets.randbits(62)
        total = len(batches) * params.max_new_tokens
        history: list[tuple[str, torch.Tensor]] = []
        results = []
        for b, (batch_text, _) in enumerate(batches):
            prompt = self._prompt(batch_text, references, history[-history_turns:] if
                                  history_turns else [], params.max_new_tokens)
            done = b * params.max_new_tokens

            def on_frame(i, n, done=done):
                if on_progress is not None:
                    on_progress(done + i, total)

            t0 = time.perf_counter()
            gen = self.engine.generate(prompt, params, seed=seed + b, on_frame=on_frame,
                                       cancel=cancel)[0]
            gen.seed = seed
            results.append((batch_text, gen, time.perf_counter() - t0))
            history.append((batch_text, gen.codes))
            if on_progress is not None:
                on_progress(done + params.max_new_tokens, total)
        return results

    def _prompt(self, text, references, history, max_new_tokens) -> torch.Tensor:
        """Encode the prompt, dropping the oldest history turns until generation fits."""
        limit = self.engine.max_context
        history = list(history)
        while True:
            prompt = self.encoder.encode(conversation(text, references, history))
            if prompt.shape[1] + min(max_new_tokens, limit // 2) <= limit or not history:
                break
            history.pop(0)
        if prompt.shape[1] >= limit:
            raise GenerationError(
                f"the prompt is {prompt.shape[1]} tokens but the model's context is {limit}: "
                "use shorter or fewer reference clips, or a smaller text batch")
        return prompt


def load_quantized(folder: Path, device, dtype, quantization: str | None) -> DualAR:
    """Load the model, quantized as asked (or as stored, for FP8 checkpoints)."""
    return sibling("quant").load_model(folder, device, dtype, quantization)


def sibling(name: str):
    """Import a sibling package of fish_core (``quant``), whether the pack is loaded as a
    package (ComfyUI: ``<pack>.quant``) or from its root (CLI and tests: ``quant``)."""
    parent = __package__.rpartition(".")[0]
    return importlib.import_module(f"{parent}.{name}" if parent else name)


def fade_in(wave: torch.Tensor, sr: int, seconds: float = 0.01) -> torch.Tensor:
    n = min(wave.shape[0], round(sr * seconds))
    out = wave.clone()
    out[:n] *= torch.linspace(0, 1, n)
    return out


def fade_out(wave: torch.Tensor, sr: int, seconds: float = 0.01) -> torch.Tensor:
    n = min(wave.shape[0], round(sr * seconds))
    out = wave.clone()
    out[wave.shape[0] - n:] *= torch.linspace(1, 0, n)
    return out
