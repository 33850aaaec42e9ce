"""``Synthesizer``: the one Python API the CLI, the ComfyUI nodes and users' scripts call.

    synth = Synthesizer.from_pretrained("s2-pro")            # or a local checkpoint folder
    speech = synth.tts("Hello there!", seed=1)
    voice = synth.encode_voice("me.wav", "What I say in me.wav.", name="me")
    speech = synth.tts("Now in my voice.", voice=voice)
    speech = synth.dialogue("Alice: Hi!\\nBob: Hello.", voices={"Alice": a, "Bob": b})
    result = synth.subtitles(open("film.srt").read(), voice=voice)
    takes = synth.tts("Take it again.", seed=7, takes=4)     # 4 Speech: seeds 7, 8, 9, 10

The Synthesizer is the public API over a ``runtime.Runtime`` (the engine, codec, tokenizer and
prompts of the loaded model). Every method runs through the one generation driver (``driver``:
``SpeechJob`` in the rows of one decode): a take is a job, the takes of a request are generated
together (their rows join together, text batch by text batch), so take k of ``takes=N`` with
seed s is exactly a single run with seed ``s + k``.

Long text is planned into sentence-bounded batches (``text.plan.plan_batches``); every batch sees
the references plus the last ``history_turns`` generated turns, trimmed further if the prompt
would not leave room for ``max_new_tokens``. A job's codes go through one causal codec state,
cut into chunks exactly as ``stream`` cuts them, so the joins have no clicks and a stream equals
the whole. Sampling keywords (``temperature``, ``top_p``, ``top_k``, ``max_new_tokens``) are
checked once, by ``params.SamplingParams.from_options``; the interface is
``speech.interface.SpeechSynthesizer``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Sequence

import torch

from ..codec.model import CHECKPOINT_NAME, Codec
from ..engine.device import codec_dtypes_for, resolve_device, resolve_dtype
from ..engine.model import DualAR
from ..loading.checkpoint import load_model
from ..params import CHUNK_FRAMES, FIRST_FRAMES, SamplingParams, batch_seed, pick_seed
from ..speech.arguments import as_voices, count_takes, script_turns
from ..speech.finishing import Finishing
from ..speech.interface import OnChunk
from ..speech.results import Batch, Speech, SubtitleSpeech
from ..speech.timeline import place_cues
from ..speech.voices import Voice
from ..text import plan as textplan
from ..text.tokenizer import FishTokenizer
from .driver import SpeechJob, decode_batches, run_jobs
from .layout import PLAIN, CueLayout, TakeLayout, job_options
from .runtime import Runtime
from .stream import AudioStream

Progress = Callable[[int, int], None]


class Synthesizer:
    def __init__(self, model: DualAR, tokenizer: FishTokenizer, codec: Codec | None,
                 compile: bool | str = False, context_length: int | None = None,
                 compile_cache: str | None = None, prefix_cache_mb: float | None = None):
        """``compile``: ``False``/``True`` or ``"off"``/``"on"``/``"auto"``
        (``engine/compile_choice.py``: on a CPU, ``auto`` keeps whichever step is faster).
        ``prefix_cache_mb``: the budget for reused voice prefixes (None = the default, 0 =
        off)."""
        r = self.runtime = Runtime(model, tokenizer, codec, compile=compile,
                                   context_length=context_length, compile_cache=compile_cache,
                                   prefix_cache_mb=prefix_cache_mb)
        # The loaded parts, for scripts and tools to read (the runtime owns and uses them).
        self.model, self.config, self.tokenizer = r.model, r.config, r.tokenizer
        self.encoder, self.codec, self.engine = r.encoder, r.codec, r.engine

    def release_caches(self) -> None:
        """Free the KV caches (they are re-made, sized to the request, on the next call)."""
        self.runtime.release()

    @classmethod
    def from_pretrained(cls, spec: str | Path, device="auto", dtype="auto", compile=False,
                        quantization: str | None = None, models_dir=None, download=True,
                        codec_dtype=None, context_length: int | None = None,
                        compile_cache: str | None = None,
                        prefix_cache_mb: float | None = None, threads=None) -> "Synthesizer":
        """Load a checkpoint folder, a variant name (``s2-pro``) or a Hugging Face repo id.
        ``dtype`` is a precision name (``device.PRECISIONS``) or a torch dtype.
        ``context_length`` caps prompt + generated tokens (default: the model's 32768).
        ``prefix_cache_mb`` bounds the KV kept of recent voice prefixes, reused by the next
        prompt in the same voice (default 512 MB; 0 = off).
        ``codec_dtype``: the codec's precision (a name or a torch dtype) for encode and decode;
        default (None or ``"auto"``) ``codec_dtypes_for(device)``: fp32 on the CPU, on a GPU
        fp32 encode and fp16 decode (within 40 dB SNR of fp32: docs/gpu.md). ``threads``: torch's CPU threads,
        set for the whole process by the CLI's policy (``engine/threads.py``): None or 0 picks
        the free physical cores unless ``SAILFISH_THREADS``/``OMP_NUM_THREADS`` say otherwise;
        N sets N; False leaves torch's threads as they are (the ComfyUI nodes: the loader's
        ``threads`` input decides)."""
        from ..engine import threads as thread_policy
        from ..loading.hub import resolve

        if threads is not False:
            thread_policy.apply(threads)  # checked (and set) before anything loads
        folder = resolve(spec, models_dir=models_dir, download=download)
        device = resolve_device(device)
        dtype = resolve_dtype(dtype, device)
        encode, decode = (codec_dtypes_for(device) if codec_dtype in (None, "auto")
                          else (resolve_dtype(codec_dtype),) * 2)  # checked before loading
        model = load_model(folder, device, dtype, quantization)
        tokenizer = FishTokenizer.from_dir(folder)
        codec = None
        if (folder / CHECKPOINT_NAME).is_file():
            codec = Codec.from_file(folder, device, encode, decode_dtype=decode)
        return cls(model, tokenizer, codec, compile=compile, context_length=context_length,
                   compile_cache=compile_cache, prefix_cache_mb=prefix_cache_mb)

    @staticmethod
    def remote(url, dialect: str = "auto", api_key: str | None = None, **options):
        """The same API on a remote engine (``fish_core.remote.RemoteSynthesizer``): ``url``
        one endpoint or several (a list, or separated by spaces/commas); ``dialect`` auto,
        sailfish, sglang-omni, vllm-omni or fish-speech. Options include ``model`` (the
        engine's model by name, e.g. ``"drama-3"``; default the first its ``/v1/models``
        lists), ``voice_consent`` (stated consent, needed to register voices on SGLang-Omni /
        vLLM-Omni), ``register_voices``, ``sample_rate`` and timeouts (docs/engines.md)."""
        from ..remote import RemoteSynthesizer

        return RemoteSynthesizer(url, dialect, api_key, **options)

    @property
    def sample_rate(self) -> int:
        return self.runtime.sample_rate

    def require_codec(self) -> Codec:
        return self.runtime.require_codec()

    # ------------------------------------------------------------------ voices
    def encode_voice(self, audio, text: str, name: str = "voice", sample_rate: int | None = None
                     ) -> Voice:
        """Encode a reference clip (file path, or tensor/array with ``sample_rate``; a
        ``{"waveform", "sample_rate"}`` dict is unpacked by ``audio.files.from_mapping``) and
        its transcript into a reusable voice."""
        return self.runtime.encode_voice(audio, text, name, sample_rate)

    # ------------------------------------------------------------------ synthesis
    def tts(self, text: str, voice: Voice | Sequence[Voice] | None = None, *,
            seed: int | None = None, max_bytes: int = textplan.DEFAULT_MAX_BYTES,
            history_turns: int = 3, takes: int | None = None,
            on_progress: Progress | None = None, cancel: Callable[[], bool] | None = None,
            on_chunk: OnChunk | None = None, loudness=None, speed: float = 1.0, lexicon=None,
            **sampling) -> Speech | list[Speech]:
        """Speak ``text`` (speaker tags and ``[pause:700ms]`` tags allowed) in ``voice`` (or
        several voices: voice i is ``<|speaker:i|>``), or in a voice the model picks when no
        voice is given. With ``takes=N`` (1 … 8): a list of N Speech, take k drawn with seed
        ``seed + k``. ``on_chunk(samples, sample_rate)`` receives the waveform (take 1's) piece
        by piece while it is generated (``local/layout.py``). ``loudness`` (LUFS or an
        ``audio.loudness.Loudness``), ``speed`` (0.5 … 2) and ``lexicon`` (a ``Lexicon`` or
        its file) finish the audio (``speech.finishing``)."""
        voices = as_voices(voice)
        finishing = Finishing.of(loudness, speed, lexicon)
        batches = finishing.batches(text, voices, max_bytes)  # checks the text
        params = SamplingParams.from_options(sampling, "tts")
        speeches = self._speak(batches, voices, params, seed, count_takes(takes), history_turns,
                               0.0, on_progress, cancel, on_chunk, finishing)
        return speeches if takes is not None else speeches[0]

    def stream(self, text: str, voice: Voice | Sequence[Voice] | None = None, *,
               seed: int | None = None, max_bytes: int = textplan.DEFAULT_MAX_BYTES,
               history_turns: int = 3, first_frames: int = FIRST_FRAMES,
               chunk_frames: int = CHUNK_FRAMES, loudness=None, speed: float = 1.0,
               lexicon=None, **sampling) -> AudioStream:
        """``tts`` as an iterator of float32 waveform chunks, the first after ``first_frames``
        frames; with the default chunking the chunks concatenate to ``tts``'s waveform. At a
        ``speed`` other than 1 each text batch comes when it is done; a ``loudness`` holds
        the first batch back to fix the stream's gain (``audio.loudness.StreamGain``)."""
        if not textplan.check_text(text, "text").strip():
            raise ValueError("text is empty: nothing to say")
        voices = as_voices(voice)
        finishing = Finishing.of(loudness, speed, lexicon)
        batches = finishing.batches(text, voices, max_bytes)
        params = SamplingParams.from_options(sampling, "stream")
        job = SpeechJob(self.runtime, batches, voices, params=params, seed=seed,
                        max_bytes=max_bytes, history_turns=history_turns,
                        first_frames=first_frames, chunk_frames=chunk_frames)
        return AudioStream(self.runtime, job, finishing)

    def dialogue(self, script: str, voices: Mapping[str, Voice] | Sequence[Voice] = (), *,
                 pause: float = 0.0, turn_by_turn: bool = False,
                 require_voices: bool | None = None,
                 seed: int | None = None, max_bytes: int = textplan.DEFAULT_MAX_BYTES,
                 history_turns: int = 3, takes: int | None = None,
                 on_progress: Progress | None = None, cancel: Callable[[], bool] | None = None,
                 on_chunk: OnChunk | None = None, loudness=None, speed: float = 1.0,
                 lexicon=None, **sampling) -> Speech | list[Speech]:
        """A multi-speaker script (``<|speaker:i|>``, ``[speaker_1]: …`` or ``Name: …`` lines).
        ``voices`` by name (``{"Alice": v}``) or in speaker order. With voices given, every speaker
        must map to one (``require_voices``, default on). ``pause`` seconds of silence go between
        turns. With ``turn_by_turn`` (implied by a pause) each turn is generated on its own, so
        every segment has one speaker (``Speech.tracks`` is then exact); otherwise several turns
        may share a text batch and flow as one conversation. ``takes`` and ``on_chunk`` (the
        mix, pauses included), ``loudness`` (per mix, speaker track or line), ``speed`` and
        ``lexicon`` (each voice's own over it) as for ``tts``."""
        turns, voice_list = script_turns(script, voices, require_voices, pause)
        finishing = Finishing.of(loudness, speed, lexicon)
        batches = finishing.turn_batches(turns, voice_list, max_bytes, pause > 0 or turn_by_turn)
        params = SamplingParams.from_options(sampling, "dialogue")
        speeches = self._speak(batches, voice_list, params, seed, count_takes(takes),
                               history_turns, pause, on_progress, cancel, on_chunk, finishing)
        return speeches if takes is not None else speeches[0]

    def subtitles(self, srt: str, voice: Voice | None = None, *,
                  seed: int | None = None, history_turns: int = 3,
                  on_progress: Progress | None = None,
                  cancel: Callable[[], bool] | None = None, on_chunk: OnChunk | None = None,
                  loudness=None, speed: float = 1.0, lexicon=None,
                  **sampling) -> SubtitleSpeech:
        """Speak each SRT cue at its start time. A cue whose speech is longer than the time to
        the next cue is kept whole: the later cues move back, and the overrun is reported.
        ``on_chunk`` as for ``tts``: the timeline, silences included, one cue at a time.
        Finishing as for ``tts`` (``speed`` shortens or lengthens each cue's speech)."""
        cues = textplan.parse_srt(srt)
        params = SamplingParams.from_options(sampling, "subtitles")
        voices = as_voices(voice)
        finishing = Finishing.of(loudness, speed, lexicon)
        batches, owners = finishing.cue_batches(cues, voices)
        layout = (CueLayout(on_chunk, self.sample_rate, cues, batches, owners, finishing)
                  if on_chunk else None)
        job = SpeechJob(self.runtime, batches, voices, params=params,
                        seed=seed, history_turns=history_turns, keep=True, clip_per_batch=True,
                        **job_options(layout))
        run_jobs(self.runtime, [job], on_progress, cancel)
        waves = [finishing.piece(torch.cat(w) if w else torch.zeros(0), self.sample_rate)
                 for w in job.batch_waves]
        timeline = place_cues(cues, waves, job.results, self.sample_rate, owners)
        codes = torch.cat([r.generated.codes for r in job.results], dim=1)
        return finishing.finish(SubtitleSpeech(
            timeline.waveform, self.sample_rate, codes, timeline.segments, job.seed,
            timeline.cues, timeline.overruns))

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes ``[num_codebooks, frames]`` → float32 waveform ``[frames * frame_length]`` on
        the CPU, decoded as a job decodes one text batch."""
        return decode_batches(self.require_codec(), [codes])

    # ------------------------------------------------------------------ steps
    def _speak(self, batches: list[Batch], voices: Sequence[Voice], params: SamplingParams,
               seed: int | None, takes: int, history_turns: int, pause: float, on_progress,
               cancel, on_chunk: OnChunk | None = None, finishing: Finishing = PLAIN
               ) -> list[Speech]:
        """Generate the batches for every take at once (take k: a job seeded ``seed + k``),
        each take decoded in one causal pass (no clicks at the joins), and lay its batches out
        on the output waveform, finished (``speech.finishing``). With ``on_chunk``, take 1
        streams and its chunks are laid out as they come (``TakeLayout``)."""
        codec = self.require_codec()
        seed = pick_seed(seed)
        layout = (TakeLayout(on_chunk, codec.sample_rate, batches, pause, finishing)
                  if on_chunk else None)
        jobs = [SpeechJob(self.runtime, batches, voices, params=params,
                          seed=batch_seed(seed, k), history_turns=history_turns, keep=True,
                          **job_options(layout if k == 0 else None))
                for k in range(takes)]
        run_jobs(self.runtime, jobs, on_progress, cancel)
        speeches = []
        for job in jobs:
            timeline = finishing.lay_out(job.waveform, job.results, codec.sample_rate,
                                         codec.frame_length, pause)
            codes = torch.cat([r.generated.codes for r in job.results], dim=1)  # [K, frames]
            speeches.append(finishing.finish(Speech(timeline.waveform, codec.sample_rate, codes,
                                                    timeline.segments, job.seed)))
        return speeches
