"""``Synthesizer``: the one Python API the CLI, the ComfyUI nodes and users' scripts call.

    synth = Synthesizer.from_pretrained("s2-pro")            # or a local checkpoint folder
    speech = synth.tts("Hello there!", seed=1)
    voice = synth.encode_voice("me.wav", "What I say in me.wav.", name="me")
    speech = synth.tts("Now in my voice.", voice=voice)
    speech = synth.dialogue("Alice: Hi!\\nBob: Hello.", voices={"Alice": a, "Bob": b})
    result = synth.subtitles(open("film.srt").read(), voice=voice)
    takes = synth.tts("Take it again.", seed=7, takes=4)     # 4 Speech: seeds 7, 8, 9, 10

Takes are generated together, one batched decode per text batch: take k of ``takes=N`` with seed
s is exactly a single run with seed ``s + k``.

Long text is planned into sentence-bounded batches (``text.plan_batches``); every batch sees the
references plus the last ``history_turns`` generated turns, trimmed further if the prompt would
not leave room for ``max_new_tokens``. All batches' codes go through one causal codec state, cut
into chunks exactly as ``stream`` cuts them, so the joins have no clicks and a stream equals the
whole.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import torch

from . import text as textplan
from .arguments import DEFAULTS, as_voices, count_takes, pick_seed, script_turns
from .checkpoint import CheckpointError, load_model
from .codec import CHECKPOINT_NAME, Codec
from .config import ModelConfig
from .device import codec_dtype_for, resolve_device, resolve_dtype
from .generate import Engine, GenerationError, SamplingParams, batch_seed
from .live import LiveCues, LiveTake, OnChunk
from .model import DualAR
from .prompt import PromptEncoder, conversation
from .stream import CHUNK_FRAMES, FIRST_FRAMES, AudioStream, SpeechJob, decode_batches
from .speech import Batch, BatchResult, Speech, SubtitleSpeech
from .timeline import join_batches, place_cues
from .tokenizer import FishTokenizer
from .voices import Voice, encode_voice

Progress = Callable[[int, int], None]


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
        self.engine.release()

    @classmethod
    def from_pretrained(cls, spec: str | Path, device="auto", dtype="auto", compile=False,
                        quantization: str | None = None, models_dir=None, download=True,
                        codec_dtype=None, context_length: int | None = None,
                        compile_cache: str | None = None) -> "Synthesizer":
        """Load a checkpoint folder, a variant name (``s2-pro``) or a Hugging Face repo id.
        ``dtype`` is a precision name (``device.PRECISIONS``) or a torch dtype.
        ``context_length`` caps prompt + generated tokens (default: the model's 32768)."""
        from .hub import resolve

        folder = resolve(spec, models_dir=models_dir, download=download)
        device = resolve_device(device)
        dtype = resolve_dtype(dtype, device)
        model = load_model(folder, device, dtype, quantization)
        tokenizer = FishTokenizer.from_dir(folder)
        codec = None
        if (folder / CHECKPOINT_NAME).is_file():
            codec = Codec.from_file(folder, device, codec_dtype or codec_dtype_for(device, dtype))
        return cls(model, tokenizer, codec, compile=compile, context_length=context_length,
                   compile_cache=compile_cache)

    @staticmethod
    def remote(url, dialect: str = "auto", api_key: str | None = None, **options):
        """The same API on a remote engine (``fish_core.remote.RemoteSynthesizer``): ``url``
        one endpoint or several (a list, or separated by spaces/commas); ``dialect`` auto,
        sailfish, sglang-omni, vllm-omni or fish-speech."""
        from .remote import RemoteSynthesizer

        return RemoteSynthesizer(url, dialect, api_key, **options)

    @property
    def sample_rate(self) -> int:
        return self.require_codec().sample_rate

    def require_codec(self) -> Codec:
        if self.codec is None:
            raise CheckpointError(f"this model folder has no {CHECKPOINT_NAME}, so audio cannot "
                                  "be made")
        return self.codec

    # ------------------------------------------------------------------ voices
    def encode_voice(self, audio, text: str, name: str = "voice", sample_rate: int | None = None
                     ) -> Voice:
        """Encode a reference clip (file path, tensor/array with ``sample_rate``, or a ComfyUI
        AUDIO dict) and its transcript into a reusable voice."""
        return encode_voice(self.require_codec(), audio, text, name, sample_rate)

    # ------------------------------------------------------------------ synthesis
    def tts(self, text: str, voice: Voice | Sequence[Voice] | None = None, *,
            temperature: float = DEFAULTS.temperature, top_p: float = DEFAULTS.top_p,
            top_k: int = DEFAULTS.top_k, max_new_tokens: int = DEFAULTS.max_new_tokens,
            seed: int | None = None, max_bytes: int = textplan.DEFAULT_MAX_BYTES,
            history_turns: int = 3, takes: int | None = None,
            on_progress: Progress | None = None, cancel: Callable[[], bool] | None = None,
            on_chunk: OnChunk | None = None) -> Speech | list[Speech]:
        """Speak ``text`` (speaker tags allowed) in ``voice`` (or several voices: voice i is
        ``<|speaker:i|>``), or in a voice the model picks when no voice is given. With
        ``takes=N`` (1 … 8): a list of N Speech, take k drawn with seed ``seed + k``.
        ``on_chunk(samples, sample_rate)`` receives the waveform (take 1's) piece by piece while
        it is generated (``fish_core.live``)."""
        if not textplan.check_text(text, "text").strip():
            raise ValueError("text is empty: nothing to say")
        voices = as_voices(voice)
        batches = [Batch(b) for b in textplan.plan_batches(text, max_bytes)]
        params = SamplingParams(temperature, top_p, top_k, max_new_tokens).validate()
        speeches = self._speak(batches, voices, params, seed, count_takes(takes), history_turns,
                               0.0, on_progress, cancel, on_chunk)
        return speeches if takes is not None else speeches[0]

    def stream(self, text: str, voice: Voice | Sequence[Voice] | None = None, *,
               temperature: float = DEFAULTS.temperature, top_p: float = DEFAULTS.top_p,
               top_k: int = DEFAULTS.top_k, max_new_tokens: int = DEFAULTS.max_new_tokens,
               seed: int | None = None, max_bytes: int = textplan.DEFAULT_MAX_BYTES,
               history_turns: int = 3, first_frames: int = FIRST_FRAMES,
               chunk_frames: int = CHUNK_FRAMES) -> AudioStream:
        """``tts`` as an iterator of float32 waveform chunks, the first after ``first_frames``
        frames; with the default chunking the chunks concatenate to ``tts``'s waveform."""
        if not textplan.check_text(text, "text").strip():
            raise ValueError("text is empty: nothing to say")
        params = SamplingParams(temperature, top_p, top_k, max_new_tokens).validate()
        job = SpeechJob(self, text, as_voices(voice), params=params, seed=pick_seed(seed),
                        max_bytes=max_bytes, history_turns=history_turns,
                        first_frames=first_frames, chunk_frames=chunk_frames)
        return AudioStream(self, job)

    def dialogue(self, script: str, voices: Mapping[str, Voice] | Sequence[Voice] = (), *,
                 pause: float = 0.0, turn_by_turn: bool = False,
                 require_voices: bool | None = None,
                 temperature: float = DEFAULTS.temperature, top_p: float = DEFAULTS.top_p,
                 top_k: int = DEFAULTS.top_k, max_new_tokens: int = DEFAULTS.max_new_tokens,
                 seed: int | None = None, max_bytes: int = textplan.DEFAULT_MAX_BYTES,
                 history_turns: int = 3, takes: int | None = None,
                 on_progress: Progress | None = None, cancel: Callable[[], bool] | None = None,
                 on_chunk: OnChunk | None = None) -> Speech | list[Speech]:
        """A multi-speaker script (``<|speaker:i|>``, ``[speaker_1]: …`` or ``Name: …`` lines).
        ``voices`` by name (``{"Alice": v}``) or in speaker order. With voices given, every speaker
        must map to one (``require_voices``, default on). ``pause`` seconds of silence go between
        turns. With ``turn_by_turn`` (implied by a pause) each turn is generated on its own, so
        every segment has one speaker (``Speech.tracks`` is then exact); otherwise several turns
        may share a text batch and flow as one conversation. ``takes`` and ``on_chunk`` (the
        mix, pauses included) as for ``tts``."""
        turns, voice_list = script_turns(script, voices, require_voices, pause)
        if pause > 0 or turn_by_turn:
            batches = [Batch(piece, t.speaker) for t in turns
                       for piece in textplan.plan_batches(t.tagged, max_bytes)]
        else:
            tagged = "".join(t.tagged for t in turns)
            batches = [Batch(b) for b in textplan.plan_batches(tagged, max_bytes)]
        params = SamplingParams(temperature, top_p, top_k, max_new_tokens).validate()
        speeches = self._speak(batches, voice_list, params, seed, count_takes(takes),
                               history_turns, pause, on_progress, cancel, on_chunk)
        return speeches if takes is not None else speeches[0]

    def subtitles(self, srt: str, voice: Voice | None = None, *,
                  temperature: float = DEFAULTS.temperature, top_p: float = DEFAULTS.top_p,
                  top_k: int = DEFAULTS.top_k, max_new_tokens: int = DEFAULTS.max_new_tokens,
                  seed: int | None = None, history_turns: int = 3,
                  on_progress: Progress | None = None,
                  cancel: Callable[[], bool] | None = None,
                  on_chunk: OnChunk | None = None) -> SubtitleSpeech:
        """Speak each SRT cue at its start time. A cue whose speech is longer than the time to
        the next cue is kept whole: the later cues move back, and the overrun is reported.
        ``on_chunk`` as for ``tts``: the timeline, silences included, one cue at a time."""
        cues = textplan.parse_srt(srt)
        params = SamplingParams(temperature, top_p, top_k, max_new_tokens).validate()
        voices = as_voices(voice)
        seed = pick_seed(seed)
        live = LiveCues(cues, self.decode, on_chunk, self.sample_rate) if on_chunk else None
        (results,) = self._generate([Batch(c.text) for c in cues], voices, params, [seed],
                                    history_turns, on_progress, cancel, live)
        waves = live.waves if live else [self.decode(r.generated.codes) for r in results]
        timeline = place_cues(cues, waves, results, self.sample_rate)
        codes = torch.cat([r.generated.codes for r in results], dim=1)
        return SubtitleSpeech(timeline.waveform, self.sample_rate, codes, timeline.segments,
                              seed, timeline.cues, timeline.overruns)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes ``[num_codebooks, frames]`` → float32 waveform ``[frames * frame_length]`` on
        the CPU."""
        if codes.shape[1] == 0:
            return torch.zeros(0)
        return self.require_codec().decode(codes)[0, 0].cpu()

    # ------------------------------------------------------------------ steps
    def _speak(self, batches: list[Batch], voices: Sequence[Voice], params: SamplingParams,
               seed: int | None, takes: int, history_turns: int, pause: float, on_progress,
               cancel, on_chunk: OnChunk | None = None) -> list[Speech]:
        """Generate the batches (every take at once), decode each take's codes in one causal
        pass (no clicks at the joins), and lay its batches out on the output waveform."""
        codec = self.require_codec()
        seed = pick_seed(seed)
        seeds = [batch_seed(seed, k) for k in range(takes)]  # take k: a run with seed + k
        live = LiveTake(codec, on_chunk, len(batches), pause, self.config.eos_token_id) \
            if on_chunk else None
        per_take = self._generate(batches, voices, params, seeds, history_turns, on_progress,
                                  cancel, live)
        speeches = []
        for take_seed, results in zip(seeds, per_take):
            codes = torch.cat([r.generated.codes for r in results], dim=1)  # [K, frames]
            if codes.shape[1] == 0:
                raise GenerationError(f"the model ended the speech (seed {take_seed}) before "
                                      "producing any audio; try another seed or rephrase the "
                                      "text")
            # Cut into chunks as a stream of these batches would be, so streams match exactly.
            wave = live.waveform() if live and not speeches else \
                decode_batches(codec, [r.generated.codes for r in results])
            timeline = join_batches(wave, results, codec.sample_rate, codec.frame_length, pause)
            speeches.append(Speech(timeline.waveform, codec.sample_rate, codes,
                                   timeline.segments, take_seed))
        return speeches

    def _generate(self, batches: list[Batch], voices: Sequence[Voice], params: SamplingParams,
                  seeds: list[int], history_turns: int, on_progress, cancel, live=None
                  ) -> list[list[BatchResult]]:
        """Generate every batch in order for each take (``[take][batch]``): batch b of the take
        with seed s draws with ``batch_seed(s, b)``, and hears the voices' references and the
        take's own last ``history_turns`` batches. The takes of a batch decode together."""
        if isinstance(history_turns, bool) or not isinstance(history_turns, int) \
                or history_turns < 0:
            raise ValueError(f"history_turns must be an integer >= 0, got {history_turns!r}")
        references = self._references(voices)
        frames = min(params.max_new_tokens, self.engine.max_context)  # at most, per batch
        total = len(batches) * frames
        per_take: list[list[BatchResult]] = [[] for _ in seeds]
        for b, batch in enumerate(batches):
            prompts = [self._prompt(batch.text, references,
                                    recent(results, history_turns), params.max_new_tokens)
                       for results in per_take]
            done = b * frames

            def on_frame(i, n, done=done):
                if on_progress is not None:
                    on_progress(done + i, total)

            if live:  # fish_core.live: row 0 handed out while it is generated
                live.begin(min(params.max_new_tokens,
                               self.engine.max_context - prompts[0].shape[1]))
            t0 = time.perf_counter()
            generated = self.engine.generate(prompts, params,
                                             seeds=[batch_seed(s, b) for s in seeds],
                                             on_frame=on_frame, cancel=cancel,
                                             on_column=live.on_column if live else None)
            seconds = time.perf_counter() - t0
            for results, gen in zip(per_take, generated):
                results.append(BatchResult(batch, gen, seconds))
            if live:
                live.end(generated[0])
            if on_progress is not None:
                on_progress(done + frames, total)
        return per_take

    def _references(self, voices: Sequence[Voice]) -> list:
        """The voices' clips as prompt references (voice i speaks as ``<|speaker:i|>``)."""
        for v in voices:
            for clip in v.clips:
                self.encoder.check_codes(clip.codes, f"voice {v.name!r}")
        return [ref for i, v in enumerate(voices) for ref in v.tagged(i)]

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


def recent(results: list[BatchResult], turns: int) -> list[tuple[str, torch.Tensor]]:
    """The last ``turns`` generated batches, as prompt history ``[(text, codes [K, n])]``."""
    kept = results[-turns:] if turns else []
    return [(r.batch.text, r.generated.codes) for r in kept]
