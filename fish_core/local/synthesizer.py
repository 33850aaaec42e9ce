"""``Synthesizer``: the one Python API the CLI, the ComfyUI nodes and users' scripts call.

    synth = Synthesizer.from_pretrained("s2-pro")            # or a local checkpoint folder
    speech = synth.tts("Hello there!", seed=1)
    voice = synth.encode_voice("me.wav", "What I say in me.wav.", name="me")
    speech = synth.tts("Now in my voice.", voice=voice)
    speech = synth.dialogue("Alice: Hi!\\nBob: Hello.", voices={"Alice": a, "Bob": b})
    result = synth.subtitles(open("film.srt").read(), voice=voice)
    takes = synth.tts("Take it again.", seed=7, takes=4)     # 4 Speech: seeds 7, 8, 9, 10

The Synthesizer is the public API over a ``runtime.Runtime`` (the engine, codec, tokenizer and
prompts of the loaded model), held as ``synth.runtime``: the one way to those parts, which the
facade does not re-export. Every method runs through the one generation driver (``driver``:
``SpeechJob`` in the rows of one decode): a take is a job, the takes of a request are generated
together (their rows join together, text batch by text batch), so take k of ``takes=N`` with
seed s is exactly a single run with seed ``s + k``.

Long text is planned into sentence-bounded batches (``text.plan.plan_batches``); every batch sees
the references plus the last ``history_turns`` generated turns, trimmed further if the prompt
would not leave room for ``max_new_tokens``. A job's codes go through one causal codec state,
cut into chunks exactly as ``stream`` cuts them, so the joins have no clicks and a stream equals
the whole. The public methods are the ``speech.front.Front``'s (a ``speech.request.Request``
checked once, planned, rendered here, laid out and finished there); this is its local backend.
"""

from __future__ import annotations

from pathlib import Path
import torch

from ..codec.model import CHECKPOINT_NAME, Codec
from ..engine.device import codec_dtypes_for, resolve_device, resolve_dtype
from ..engine.model import DualAR
from ..loading.checkpoint import load_model
from ..params import batch_seed
from ..speech.front import Front, Plan, Take
from ..speech.layout import job_options
from ..speech.request import Request, asked
from ..speech.stream import Stream
from ..speech.voices import Voice
from ..text.tokenizer import FishTokenizer
from .driver import SpeechJob, decode_batches, run_jobs, run_round
from .listener import Listener
from .runtime import Runtime
from .timing import AlignerTimer


class Synthesizer(Front):
    def __init__(self, model: DualAR, tokenizer: FishTokenizer, codec: Codec | None,
                 compile: bool | str = False, context_length: int | None = None,
                 compile_cache: str | None = None, prefix_cache_mb: float | None = None,
                 aligner=None, models_dir=None, download: bool = True):
        """``compile``: ``False``/``True`` or ``"off"``/``"on"``/``"auto"``
        (``engine/compile_choice.py``: on a CPU, ``auto`` keeps whichever step is faster).
        ``prefix_cache_mb``: the budget for reused voice prefixes (None = the default, 0 =
        off). ``aligner``: what times words (``words=``): a Qwen3-ForcedAligner folder, a
        loaded ``hearing.ForcedAligner``, or None for the official checkpoint in
        ``models_dir`` (downloaded on first use when ``download``); loaded on the first
        request that asks for words, on the model's device, freed with the model."""
        # The loaded model's parts (engine, codec, tokenizer, prompts): the runtime owns them,
        # and scripts and tools reach them there (``synth.runtime.engine``), never here.
        self.runtime: Runtime = Runtime(model, tokenizer, codec, compile=compile,
                                        context_length=context_length,
                                        compile_cache=compile_cache,
                                        prefix_cache_mb=prefix_cache_mb)
        aligner = named_aligner(aligner)  # a wrong folder: said now
        device = next(model.parameters()).device
        self.timer = AlignerTimer(aligner, models_dir, device, download=download)
        # The speech recogniser, loaded when first needed (a clip without its transcript,
        # checked takes): ``listener.configure(asr=FOLDER, models_dir=…, download=…)``.
        self.listener = Listener(device=device)

    def word_timer(self) -> AlignerTimer:
        """The aligner, its folder found (or fetched) now; its weights load on first use."""
        ready = getattr(self.timer, "ready", None)  # a timer set by hand may have no folder
        return ready() if ready is not None else self.timer

    def free_aligner(self) -> None:
        """Free the word aligner's weights (loaded again by the next request for words)."""
        free = getattr(self.timer, "free", None)
        if free is not None:
            free()

    def release_caches(self) -> None:
        """Free the KV caches (they are re-made, sized to the request, on the next call)."""
        self.runtime.release()

    def release_listener(self) -> None:
        """Free the speech recogniser (loaded again when next needed)."""
        self.listener.release()

    @classmethod
    def from_pretrained(cls, spec: str | Path, device="auto", dtype="auto", compile=False,
                        quantization: str | None = None, models_dir=None, download=True,
                        codec_dtype=None, context_length: int | None = None,
                        compile_cache: str | None = None,
                        prefix_cache_mb: float | None = None, threads=None,
                        aligner=None, asr=None) -> "Synthesizer":
        """Load a checkpoint folder, a variant name (``s2-pro``) or a Hugging Face repo id:
        ``device``, ``dtype``, ``quantization`` and ``codec_dtype`` as ``load_parts`` takes
        them, ``threads`` as ``set_threads``; ``compile``, ``prefix_cache_mb`` (default 512 MB;
        0 = off) and ``aligner`` as the constructor. ``context_length`` caps prompt + generated
        tokens (default: the model's 32768). ``asr``: a Qwen3-ASR folder for the transcripts
        of reference clips given without one and for checked takes (default: Qwen3-ASR-0.6B
        in ``models_dir``, downloaded when first needed unless ``download`` is False)."""
        from ..loading.hub import resolve

        set_threads(threads)  # checked (and set) before anything loads
        folder = resolve(spec, models_dir=models_dir, download=download)
        aligner = named_aligner(aligner)  # before the model loads
        model, tokenizer, codec = load_parts(folder, device, dtype, quantization, codec_dtype)
        made = cls(model, tokenizer, codec, compile=compile, context_length=context_length,
                   compile_cache=compile_cache, prefix_cache_mb=prefix_cache_mb,
                   aligner=aligner, models_dir=models_dir, download=download)
        made.listener.configure(asr, models_dir, download)
        return made

    @property
    def sample_rate(self) -> int:
        return self.runtime.sample_rate

    def require_codec(self) -> Codec:
        return self.runtime.require_codec()

    # ------------------------------------------------------------------ voices
    def encode_voice(self, audio, text: str | None = None, name: str = "voice",
                     sample_rate: int | None = None) -> Voice:
        """Encode a reference clip (file path, or tensor/array with ``sample_rate``; a
        ``{"waveform", "sample_rate"}`` dict is unpacked by ``audio.files.from_mapping``) and
        its transcript into a reusable voice. Without ``text`` (None or blank) the clip is
        transcribed by the speech recogniser (``listener``) and the voice keeps what it heard
        (``voice.clips[0].text``: show it; a recognised transcript can be wrong)."""
        if text is None or (isinstance(text, str) and not text.strip()):
            text = self.listener.transcript(audio, sample_rate)
        return self.runtime.encode_voice(audio, text, name, sample_rate)

    def check_takes(self, request: Request, speeches: list) -> list:
        """Every take heard by the speech recogniser (loaded now if it is not) and scored
        against the text it was asked to say (``hearing.checking``)."""
        return self.listener.check([s.waveform for s in speeches], self.sample_rate,
                                   asked(request))

    # ------------------------------------------------------------------ the backend
    def jobs(self, request: Request, plan: Plan, sink=None, *, keep: bool = True,
             **extra) -> list[SpeechJob]:
        """The one builder of a request's jobs (``render``, ``open`` and the HTTP service's
        scheduler): one per take, take k seeded ``seed + k``, each holding the request's
        batches, voices, sampling, history and a stream's chunking; take 1's chunks to ``sink``
        (a layout). ``keep``: each job keeps its audio (a take to finish); ``extra``: the
        ``SpeechJob`` keywords of the caller (a deadline)."""
        cues = request.kind == "subtitles"
        return [SpeechJob(self.runtime, plan.batches, request.voices, params=request.sampling,
                          seed=batch_seed(request.seed, k), max_bytes=request.max_bytes,
                          history_turns=request.history_turns,
                          first_frames=request.first_frames, chunk_frames=request.chunk_frames,
                          keep=keep, clip_per_batch=cues,
                          **{**job_options(sink if k == 0 else None), **extra})
                for k in range(request.count)]

    def take(self, request: Request, job: SpeechJob) -> Take:
        """A job's take, as ``finish`` lays it out: each batch's audio and result."""
        codes = torch.cat([r.generated.codes for r in job.results], dim=1)  # [K, frames]
        return Take(self._waves(job, request.kind == "subtitles"), job.results, codes, job.seed)

    def render(self, request: Request, plan: Plan, on_progress, cancel, sink) -> list[Take]:
        """Every take at once (take k: a job seeded ``seed + k``, its rows joining the
        others' text batch by text batch), each decoded in one causal pass (no clicks at the
        joins; subtitles: each cue a clip of its own); take 1's chunks to ``sink``."""
        jobs = self.jobs(request, plan, sink)
        run_jobs(self.runtime, jobs, on_progress, cancel)
        return [self.take(request, job) for job in jobs]

    def _waves(self, job: SpeechJob, cues: bool) -> list[torch.Tensor]:
        """Each text batch's audio: a cue's own clip, or the job's one waveform cut back at
        the batches' frames."""
        if cues:
            return [torch.cat(w) if w else torch.zeros(0) for w in job.batch_waves]
        wave, length, frame, waves = job.waveform, self.require_codec().frame_length, 0, []
        for result in job.results:
            waves.append(wave[frame * length:(frame + result.frames) * length])
            frame += result.frames
        return waves

    def open(self, request: Request, plan: Plan, sink) -> Stream:
        """The request's one streaming job on a worker, text batch after text batch."""
        [job] = self.jobs(request, plan, keep=False, streaming=True)

        def work(put) -> None:
            out = sink(put)
            job.emit, job.end_batch = out.chunk, out.end_batch
            while not job.done and not job.stopped:
                run_round(self.runtime, [job])
                if job.error is not None:
                    raise job.error
            if job.timed_out:
                raise TimeoutError("the stream ran past its deadline")

        stream = Stream(work, lambda: self.sample_rate, job.seed, job.cancel,
                        lambda: job.cancelled)
        stream.job = job
        return stream

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes ``[num_codebooks, frames]`` → float32 waveform ``[frames * frame_length]`` on
        the CPU, decoded as a job decodes one text batch."""
        return decode_batches(self.require_codec(), [codes])


def named_aligner(aligner):
    """``aligner``, a folder named by a string or a path found now (a wrong folder is said
    before anything loads); a loaded aligner or None as given."""
    if isinstance(aligner, (str, Path)):
        from ..hearing.hub import resolve_aligner

        return resolve_aligner(aligner, download=False)
    return aligner


def set_threads(threads) -> None:
    """torch's CPU threads, set for the whole process by the CLI's policy
    (``engine/threads.py``): None or 0 picks the free physical cores unless
    ``SAILFISH_THREADS``/``OMP_NUM_THREADS`` say otherwise; N sets N; False leaves torch's
    threads as they are (the ComfyUI nodes: the loader's ``threads`` input decides)."""
    if threads is not False:
        from ..engine import threads as thread_policy

        thread_policy.apply(threads)


def load_parts(folder: Path, device="auto", dtype="auto", quantization: str | None = None,
               codec_dtype=None) -> tuple[DualAR, FishTokenizer, Codec | None]:
    """The model in ``folder``, its tokenizer and its codec (None: the folder has none), each
    setting checked before the first load. ``dtype`` is a precision name
    (``device.PRECISIONS``) or a torch dtype. ``codec_dtype``: the codec's precision (a name
    or a torch dtype) for encode and decode; default (None or ``"auto"``)
    ``codec_dtypes_for(device)``: fp32 on the CPU, on a GPU fp32 encode and fp16 decode
    (within 40 dB SNR of fp32: docs/gpu.md)."""
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    encode, decode = (codec_dtypes_for(device) if codec_dtype in (None, "auto")
                      else (resolve_dtype(codec_dtype),) * 2)
    model = load_model(folder, device, dtype, quantization)
    tokenizer = FishTokenizer.from_dir(folder)
    codec = None
    if (folder / CHECKPOINT_NAME).is_file():
        codec = Codec.from_file(folder, device, encode, decode_dtype=decode)
    return model, tokenizer, codec
