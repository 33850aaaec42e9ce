"""Semantic-code generation: static KV cache, one prefill, then one decode step per audio frame.

A frame is one slow-AR step (the main token, constrained to the semantic ids and ``<|im_end|>``)
followed by the fast AR over the codebooks. ``Engine.decode_frame`` is that whole frame as one
function: static shapes, no host sync, no data-dependent Python branches, so it compiles with
``fullgraph=True`` (and, on CUDA, is captured as a CUDA graph).

Random numbers are drawn outside the step, per frame and in the reference's order and dtype
(``[V]`` normal, ``[V]`` high-temperature, then ``[C]`` per fast codebook), so a seed replays
fish-speech exactly in eager mode.
"""

from __future__ import annotations

import os
import secrets
import warnings
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor

from .graphs import FrameGraph
from .model import DualAR
from .sampling import RAS_HIGH_TEMPERATURE, RAS_HIGH_TOP_P, RAS_WINDOW, ras_select, sample

CACHE_BUCKET = 256  # the KV cache length is rounded up to a multiple of this (then to a power of 2)


class GenerationError(ValueError):
    """A generation request cannot be served (bad parameter, prompt too long …)."""


class Cancelled(RuntimeError):
    """Generation was cancelled by the caller's ``cancel`` callback."""


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.8
    top_p: float = 0.8
    top_k: int = 30
    max_new_tokens: int = 1024

    def validate(self) -> "SamplingParams":
        def bad(field, expected, value):
            raise GenerationError(f"{field} must be {expected}, got {value!r}")

        if not isinstance(self.temperature, (int, float)) or not 0 < self.temperature < 2:
            bad("temperature", "a number in (0, 2)", self.temperature)
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            bad("top_p", "a number in (0, 1]", self.top_p)
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1:
            bad("top_k", "an integer >= 1", self.top_k)
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) \
                or self.max_new_tokens < 1:
            bad("max_new_tokens", "an integer >= 1", self.max_new_tokens)
        return self


@dataclass
class Generated:
    """One row's result. ``codes [K, frames]``: every generated frame; the ``<|im_end|>`` column
    is dropped, and unlike the reference the last frame is kept when the length limit stops us.
    ``columns [1 + K, n]``: every column the model produced (row 0 = main token id)."""

    codes: Tensor
    columns: Tensor
    stopped_on_eos: bool
    prompt_length: int
    seed: int | None = None


def cache_length(needed: int, limit: int) -> int:
    """Round ``needed`` slots up to a bucket (multiple of 256, then power of two) so that the
    compiled decode step sees few distinct cache shapes."""
    length = max(CACHE_BUCKET, -(-needed // CACHE_BUCKET) * CACHE_BUCKET)
    length = 1 << (length - 1).bit_length()
    return max(needed, min(length, -(-limit // 8) * 8))


class Engine:
    """Runs generation for one ``DualAR`` model. Not thread-safe: one request at a time."""

    def __init__(self, model: DualAR, compile: bool = False, eos_check_every: int | None = None,
                 max_context: int | None = None,
                 compile_cache: str | os.PathLike | None = None, cuda_graph: bool | None = None):
        self.model = model
        self.config = c = model.config
        # Rows of the tied head that can be sampled: <|im_end|> and the semantic range, in
        # vocabulary order. Logits are computed for these rows only; every other row carries the
        # reference's -inf bias, so its probability is exactly 0 and it can never be drawn.
        self.allowed = sorted({c.eos_token_id, *range(c.semantic_start_token_id,
                                                       c.semantic_end_token_id + 1)})
        self.max_context = min(max_context or c.text.max_seq_len, c.text.max_seq_len)
        self.eos_check_every = eos_check_every
        self._weights = None
        self._graph: FrameGraph | None = None  # for the current cache; dropped with it
        self.graph_captures = 0
        self.follow_model()
        # The step is kept as a function of (engine, ...) rather than a bound method, so the
        # engine holds no reference cycle and its model is freed as soon as it is dropped.
        self._step = None
        if compile:
            use_compile_cache(compile_cache)
            self._step = torch.compile(Engine.decode_frame, fullgraph=True)
        self.cuda_graph = self.device.type == "cuda" if cuda_graph is None else cuda_graph

    @property
    def compiled(self) -> bool:
        """Whether the decode step runs compiled (False after a compile failure)."""
        return self._step is not None

    def run_step(self, *args) -> tuple[Tensor, Tensor]:
        """``decode_frame``, compiled when asked. If compiling fails (no C++/Triton toolchain,
        an unsupported platform …) it warns once and decodes eagerly from then on."""
        if self._step is None:
            return self.decode_frame(*args)
        try:
            return self._step(self, *args)
        except Exception as e:  # noqa: BLE001 - any compiler failure means: run eagerly
            warnings.warn(f"torch.compile of the decode step failed ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}); decoding without compile")
            self._step = None
            return self.decode_frame(*args)

    def step(self, *args) -> tuple[Tensor, Tensor]:
        """One decode frame: replayed from a CUDA graph when enabled (captured on first use for
        the current cache, whose shape fixes every argument's), else ``run_step``. A graph that
        cannot be captured, or whose replay differs from the direct run, is dropped with a
        warning."""
        if not self.cuda_graph:
            return self.run_step(*args)
        if self._graph is None:
            try:
                self._graph = FrameGraph(self.run_step, args)
            except Exception as e:  # noqa: BLE001 - no graph: keep decoding without one
                warnings.warn(f"CUDA graph capture failed ({type(e).__name__}: {e}); "
                              "decoding without CUDA graphs")
                self.cuda_graph = False
                return self.run_step(*args)
            self.graph_captures += 1
        return self._graph(*args)

    def follow_model(self) -> None:
        """Re-derive the device-side state (head rows, ids) after the model's weights were moved
        or replaced, e.g. by ComfyUI offloading it to the CPU and back."""
        key = (self.model.device, self.model.dtype, self.model.embeddings.weight.data_ptr())
        if key == self._weights:
            return
        self._weights = key
        self._graph = None
        self.device, self.dtype = self.model.device, self.model.dtype
        self.allowed_ids = torch.tensor(self.allowed, device=self.device)
        self.head = self.model.head_rows(self.allowed_ids).detach()
        self.check_every = self.eos_check_every or (8 if self.device.type == "cuda" else 1)

    # ------------------------------------------------------------------ one frame
    def frame_tail(self, hidden: Tensor, window: Tensor | None, temperature: Tensor,
                   top_p: Tensor, top_k: Tensor, rand_main: Tensor, rand_high: Tensor,
                   rand_fast: Tensor) -> Tensor:
        """From the slow AR's last hidden state ``[B, D]`` to the frame column ``[B, 1 + K]``.

        ``rand_main``/``rand_high`` ``[B, V]`` (full vocabulary, as the reference draws them),
        ``rand_fast`` ``[K - 1, B, C]``; ``window [B, W]`` or None (prefill: no RAS)."""
        c, model = self.config, self.model
        logits = torch.nn.functional.linear(hidden, self.head)  # [B, N_allowed]
        rand_main = rand_main.index_select(-1, self.allowed_ids)
        rand_high = rand_high.index_select(-1, self.allowed_ids)
        normal = self.allowed_ids[sample(logits, temperature, top_p, top_k, rand_main)]
        high_t = torch.full_like(temperature, RAS_HIGH_TEMPERATURE)
        high_p = torch.full_like(top_p, RAS_HIGH_TOP_P)
        high = self.allowed_ids[sample(logits, high_t, high_p, top_k, rand_high)]
        main = normal if window is None else ras_select(
            normal, high, window, c.semantic_start_token_id, c.semantic_end_token_id)

        # Fast AR: position 0 is the slow hidden state, position 1 the semantic code c0; both
        # go in one pass (the reference runs them one by one and discards position 0's logits).
        code = torch.clamp(main - c.semantic_start_token_id, 0, c.codebook_size - 1)
        codes = [code]
        x = torch.stack([hidden, model.fast_embeddings(code)], dim=1)  # [B, 2, D]
        logits = model.fast_forward(x, start=0)[:, -1]
        for k in range(1, c.num_codebooks):
            code = sample(logits, temperature, top_p, top_k, rand_fast[k - 1])
            codes.append(code)
            if k + 1 < c.num_codebooks:
                x = model.fast_embeddings(code).unsqueeze(1)
                logits = model.fast_forward(x, start=k + 1)[:, -1]
        return torch.stack([main, *codes], dim=1)

    def slow_step(self, column: Tensor, pos: Tensor) -> Tensor:
        """Slow AR for one column ``[B, 1 + K]`` at ``pos [B]``, attending to every cached slot
        up to ``pos``; returns the final-normed hidden state ``[B, D]``."""
        slots = torch.arange(self.model.cache_shape()[1], device=pos.device)
        mask = (slots <= pos[:, None])[:, None, None, :]  # [B, 1, 1, L]
        return self.model.slow_forward(column.unsqueeze(-1), pos[:, None], mask)[:, -1]

    def decode_frame(self, column: Tensor, pos: Tensor, window: Tensor, temperature: Tensor,
                     top_p: Tensor, top_k: Tensor, rand_main: Tensor, rand_high: Tensor,
                     rand_fast: Tensor) -> tuple[Tensor, Tensor]:
        """One decode step. ``column [B, 1 + K]`` was produced last frame and sits at ``pos [B]``.
        Returns the next column and the updated RAS window."""
        hidden = self.slow_step(column, pos)
        nxt = self.frame_tail(hidden, window, temperature, top_p, top_k, rand_main, rand_high,
                              rand_fast)
        window = torch.cat([window[:, 1:], nxt[:, :1]], dim=1)
        return nxt, window

    def prefill(self, prompts: Tensor, lengths: Tensor) -> Tensor:
        """Run the right-padded prompts ``[B, 1 + K, T]``; returns each row's last hidden state.
        Padding sits after the real tokens, so causal attention never sees it, and its cache
        slots are overwritten by the generated frames before any query can reach them."""
        T = prompts.shape[-1]
        pos = torch.arange(T, device=self.device).expand(prompts.shape[0], T)
        hidden = self.model.slow_forward(prompts, pos, mask=None)
        return hidden[torch.arange(prompts.shape[0], device=self.device), lengths - 1]

    # ------------------------------------------------------------------ the loop
    @torch.inference_mode()
    def generate(self, prompts: Tensor | Sequence[Tensor],
                 params: SamplingParams | Sequence[SamplingParams] = SamplingParams(), *,
                 seed: int | None = None, generator: torch.Generator | None = None,
                 on_frame: Callable[[int, int], None] | None = None,
                 cancel: Callable[[], bool] | None = None,
                 stop_on_eos: bool = True) -> list[Generated]:
        """Generate for one prompt ``[1 + K, T]`` or several (decoded together, each stopping on
        its own). ``seed`` (or a ready ``generator``) makes sampling reproducible.
        ``stop_on_eos=False`` runs every row to its ``max_new_tokens`` (for benchmarks)."""
        self.follow_model()
        prompts = [prompts] if isinstance(prompts, Tensor) else list(prompts)
        if not prompts:
            raise GenerationError("prompts must hold at least one prompt")
        params = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        if len(params) != len(prompts):
            raise GenerationError(f"got {len(params)} SamplingParams for {len(prompts)} prompts")
        for p in params:
            p.validate()
        c, B, width = self.config, len(prompts), 1 + self.config.num_codebooks
        for i, p in enumerate(prompts):
            if p.dim() != 2 or p.shape[0] != width or p.shape[1] == 0:
                raise GenerationError(f"prompt {i} must be a [{width}, T] integer tensor, "
                                      f"got {tuple(p.shape)}")
        lengths = [p.shape[1] for p in prompts]
        limit = self.max_context
        if max(lengths) >= limit:
            raise GenerationError(f"prompt is too long: {max(lengths)} tokens, the context "
                                  f"length is {limit}")
        steps = [min(p.max_new_tokens, limit - n) for p, n in zip(params, lengths)]
        total = max(steps)

        if generator is None:
            if seed is None:
                seed = secrets.randbits(63)
            generator = torch.Generator(self.device).manual_seed(seed)

        T = max(lengths)
        batch = torch.zeros(B, width, T, dtype=torch.long)
        for i, p in enumerate(prompts):
            batch[i, :, : lengths[i]] = p
        batch = batch.to(self.device)
        lengths_t = torch.tensor(lengths, device=self.device)

        needed = cache_length(T + total, limit)
        if self.model.cache_shape() != (B, needed):
            self._graph = None  # it holds the old cache's addresses
            self.model.setup_caches(B, needed, self.dtype, self.device)

        def scalars(name):
            return torch.tensor([[getattr(p, name)] for p in params], device=self.device,
                                dtype=self.dtype)

        temperature, top_p = scalars("temperature"), scalars("top_p")
        top_k = torch.tensor([[p.top_k] for p in params], device=self.device)

        def draws():
            def rand(n):
                return torch.rand(B, n, generator=generator, device=self.device, dtype=self.dtype)
            main, high = rand(c.text.vocab_size), rand(c.text.vocab_size)
            fast = torch.stack([rand(c.codebook_size) for _ in range(c.num_codebooks - 1)])
            return main, high, fast

        hidden = self.prefill(batch, lengths_t)
        column = self.frame_tail(hidden, None, temperature, top_p, top_k, *draws())
        columns = [column]
        report(on_frame, cancel, 1, total)
        pos = lengths_t.clone()
        window = torch.zeros(B, RAS_WINDOW, dtype=torch.long, device=self.device)
        finished = column[:, 0] == c.eos_token_id
        for i in range(1, total):
            if stop_on_eos and i % self.check_every == 0 and bool(finished.all()):
                break
            column, window = self.step(column, pos, window, temperature, top_p, top_k, *draws())
            # Keep the column out of the step's (possibly CUDA-graph-owned) output buffer; the
            # window only goes back in as the next input, which the graph copies in first.
            column = column.clone()
            columns.append(column)
            finished = finished | (column[:, 0] == c.eos_token_id)
            pos = pos + 1
            report(on_frame, cancel, i + 1, total)

        out = torch.stack(columns, dim=-1).cpu()  # [B, 1 + K, n]
        results = []
        for b in range(B):
            row = out[b, :, : steps[b]]
            eos = (row[0] == c.eos_token_id).nonzero() if stop_on_eos else []
            n = int(eos[0]) + 1 if len(eos) else row.shape[1]
            row = row[:, :n]
            stopped = bool(len(eos))
            codes = row[1:, :-1] if stopped else row[1:]
            results.append(Generated(codes.clone(), row.clone(), stopped, lengths[b], seed))
        return results


def report(on_frame, cancel, done: int, total: int) -> None:
    if on_frame is not None:
        on_frame(done, total)
    if cancel is not None and cancel():
        raise Cancelled(f"generation cancelled after {done} of up to {total} frames")


def use_compile_cache(path: str | os.PathLike | None) -> None:
    """Keep inductor's compiled kernels in a persistent folder (``path``, else
    ``$SAILFISH_COMPILE_CACHE``), so a later process reuses them: a warm compile takes seconds
    instead of minutes. With neither, torch's own default (a per-user temp folder) is kept."""
    path = path or os.environ.get("SAILFISH_COMPILE_CACHE")
    if path:
        os.makedirs(path, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
