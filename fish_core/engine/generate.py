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
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from ..params import Cancelled, Generated, GenerationError, SamplingParams, check_seed, \
    random_seed
from .compile_choice import MeasuredStep, compile_mode, warn_cpu_compile
from .cuda_graph import FrameGraph
from .model import CacheRows, Caches, DualAR
from .prefix_cache import PrefixCache, PrefixEntry, megabytes
from .sampling import RAS_HIGH_TEMPERATURE, RAS_HIGH_TOP_P, RAS_WINDOW, ras_select, sample

CACHE_BUCKET = 256  # the KV cache length is rounded up to a multiple of this (then to a power of 2)
def cache_length(needed: int, limit: int) -> int:
    """Round ``needed`` slots up to a bucket (multiple of 256, then power of two) so that the
    compiled decode step sees few distinct cache shapes."""
    length = max(CACHE_BUCKET, -(-needed // CACHE_BUCKET) * CACHE_BUCKET)
    length = 1 << (length - 1).bit_length()
    return max(needed, min(length, -(-limit // 8) * 8))


class Engine:
    """Runs generation for one ``DualAR`` model. Not thread-safe: one request at a time.

    The engine owns its state (KV caches, CUDA graph, compiled step), so several engines can
    share one model. What really ran is recorded: ``compiled`` (False after a compile failure),
    ``cuda_graph`` (False after a capture failure), ``graph_captures`` and ``fallbacks`` (one
    human-readable line per fallback taken)."""

    def __init__(self, model: DualAR, compile: bool | str = False, eos_check_every: int | None = None,
                 max_context: int | None = None,
                 compile_cache: str | os.PathLike | None = None, cuda_graph: bool | None = None,
                 prefix_cache_mb: float | None = None):
        self.model = model
        self.config = c = model.config
        # Rows of the tied head that can be sampled: <|im_end|> and the semantic range, in
        # vocabulary order. Logits are computed for these rows only; every other row carries the
        # reference's -inf bias, so its probability is exactly 0 and it can never be drawn.
        self.allowed = sorted({c.eos_token_id, *range(c.semantic_start_token_id,
                                                       c.semantic_end_token_id + 1)})
        self.max_context = min(max_context or c.text.max_seq_len, c.text.max_seq_len)
        self.eos_check_every = eos_check_every
        self.caches: Caches | None = None
        self._graph: FrameGraph | None = None  # for the current caches and weights
        self._weights = None
        self.graph_captures = 0
        self.fallbacks: list[str] = []
        # Reference-prefix KV reuse (prefix_cache.py): None = the default budget, 0 = off.
        self.prefixes = PrefixCache(megabytes(prefix_cache_mb))
        self.follow_model()
        # The step is kept as a function of (engine, ...) rather than a bound method, so the
        # engine holds no reference cycle and its model is freed as soon as it is dropped.
        self._step = None
        self.compile_cache = compile_cache or os.environ.get("SAILFISH_COMPILE_CACHE")
        self.compile_choice = compile_mode(compile)  # what was asked; "auto" says what it chose
        if self.compile_choice != "off":
            self._step = torch.compile(Engine.decode_frame, fullgraph=True)
        if self.compile_choice == "on":
            warn_cpu_compile(self.device, self.dtype)
        elif self.compile_choice == "auto":
            self._step = MeasuredStep(self._step, Engine.decode_frame, self._chose_step)
        self.cuda_graph = self.device.type == "cuda" if cuda_graph is None else cuda_graph

    def _chose_step(self, step, reason: str) -> None:
        """``compile="auto"``: the step it measured faster (``None``: eager) and why."""
        self._step, self.compile_choice = step, f"auto: {reason}"

    @property
    def compiled(self) -> bool:
        """Whether the decode step runs compiled (False after a compile failure)."""
        return self._step is not None

    def fall_back(self, what: str, error: Exception, instead: str) -> None:
        """Record (and warn about) a fallback: ``what`` failed with ``error``; ``instead`` runs."""
        first_line = str(error).splitlines()[0] if str(error) else ""
        reason = f"{what} failed ({type(error).__name__}: {first_line}); {instead}"
        self.fallbacks.append(reason)
        warnings.warn(reason)

    def run_step(self, *args) -> tuple[Tensor, Tensor]:
        """``decode_frame``, compiled when asked. If compiling fails (no C++/Triton toolchain,
        an unsupported platform …) it records the fallback and decodes eagerly from then on."""
        if self._step is None:
            return self.decode_frame(*args)
        try:
            with inductor_cache_dir(self.compile_cache):
                return self._step(self, *args)
        except Exception as e:  # noqa: BLE001 - any compiler failure means: run eagerly
            self.fall_back("torch.compile of the decode step", e, "decoding without compile")
            self._step = None
            return self.decode_frame(*args)

    def step(self, *args) -> tuple[Tensor, Tensor]:
        """One decode frame: replayed from a CUDA graph when enabled (captured on first use for
        the current caches and weights, which fix every argument's shape and address), else
        ``run_step``. A graph that cannot be captured, or whose replay differs from the direct
        run, is dropped and the fallback recorded."""
        if not self.cuda_graph:
            return self.run_step(*args)
        if self._graph is None:
            try:
                self._graph = FrameGraph(self.run_step, args)
            except Exception as e:  # noqa: BLE001 - no graph: keep decoding without one
                self.fall_back("CUDA graph capture", e, "decoding without CUDA graphs")
                self.cuda_graph = False
                return self.run_step(*args)
            self.graph_captures += 1
        return self._graph(*args)

    def follow_model(self) -> None:
        """Re-derive the device-side state (head rows, ids) after the model's weights were moved
        or replaced, e.g. by ComfyUI offloading it to the CPU and back. A CUDA graph holds the
        addresses of every weight it read, so any change drops it; the caches go with a new
        device or dtype."""
        key = (self.model.device, self.model.dtype, tensor_addresses(self.model))
        if key == self._weights:
            return
        if self._weights is None or key[:2] != self._weights[:2]:
            self.caches = None
        self.prefixes.clear()  # KV made by other weights (or on another device) is not theirs
        self._weights = key
        self.release_graph()
        self.device, self.dtype = self.model.device, self.model.dtype
        self.allowed_ids = torch.tensor(self.allowed, device=self.device)
        self.head = self.model.head_rows(self.allowed_ids).detach()
        self.check_every = self.eos_check_every or (8 if self.device.type == "cuda" else 1)
        wqkv = self.model.layers[0].attention.wqkv
        self.model_key = (id(self.model), str(self.dtype), str(self.device),
                          type(wqkv).__name__, type(wqkv.weight).__name__)

    def release_graph(self) -> None:
        if self._graph is not None:
            self._graph.release()
            self._graph = None

    def release(self) -> None:
        """Free the KV caches and the CUDA graph (and its memory pool); both are re-made, sized
        to the request, on the next call. Kept reference prefixes are freed too."""
        self.release_graph()
        self.caches = None
        self.prefixes.clear()

    # ------------------------------------------------------------------ one frame
    def frame_tail(self, hidden: Tensor, window: Tensor | None, temperature: Tensor,
                   top_p: Tensor, top_k: Tensor, rand_main: Tensor, rand_high: Tensor,
                   rand_fast: Tensor, caches: Caches | None = None) -> Tensor:
        """From the slow AR's last hidden state ``[B, D]`` to the frame column ``[B, 1 + K]``
        (the fast AR runs in ``caches``, default the engine's).

        ``rand_main``/``rand_high`` ``[B, V]`` (full vocabulary, as the reference draws them),
        ``rand_fast`` ``[K - 1, B, C]``; ``window [B, W]`` or None (prefill: no RAS)."""
        c, model = self.config, self.model
        caches = self.caches if caches is None else caches
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
        logits = model.fast_forward(x, 0, caches)[:, -1]
        for k in range(1, c.num_codebooks):
            code = sample(logits, temperature, top_p, top_k, rand_fast[k - 1])
            codes.append(code)
            if k + 1 < c.num_codebooks:
                x = model.fast_embeddings(code).unsqueeze(1)
                logits = model.fast_forward(x, k + 1, caches)[:, -1]
        return torch.stack([main, *codes], dim=1)

    def slow_step(self, column: Tensor, pos: Tensor) -> Tensor:
        """Slow AR for one column ``[B, 1 + K]`` at ``pos [B]``, attending to every cached slot
        up to ``pos``; returns the final-normed hidden state ``[B, D]``."""
        slots = torch.arange(self.caches.shape[1], device=pos.device)
        mask = (slots <= pos[:, None])[:, None, None, :]  # [B, 1, 1, L]
        return self.model.slow_forward(column.unsqueeze(-1), pos[:, None], mask,
                                       self.caches)[:, -1]

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

    def prefill(self, prompts: Tensor, lengths: Tensor,
                prefixes: Sequence[int] | None = None, caches: Caches | None = None) -> Tensor:
        """Run the right-padded prompts ``[B, 1 + K, T]``; returns each row's last hidden state.
        Padding sits after the real tokens, so causal attention never sees it, and its cache
        slots are overwritten by the generated frames before any query can reach them.

        ``prefixes`` (one length per row, 0 = none) marks each prompt's voice prefix: its KV is
        put in the row's first slots first (``load_prefixes``: reused, or run on its own and
        kept) and only the rest of the prompt is run after it. ``caches``: where to run
        (default the engine's; ``Caches.rows`` for a row joining a decode)."""
        caches = self.caches if caches is None else caches
        starts = self.load_prefixes(prompts, lengths, prefixes, caches)
        if any(starts):
            return self.prefill_after(prompts, lengths, starts, caches)
        T = prompts.shape[-1]  # no voice prefix: the whole prompts, as always
        pos = torch.arange(T, device=self.device).expand(prompts.shape[0], T)
        hidden = self.model.slow_forward(prompts, pos, None, caches)
        return hidden[torch.arange(prompts.shape[0], device=self.device), lengths - 1]

    def prefix_ids(self, prompts: Tensor, row: int, length: int) -> tuple[tuple, Tensor]:
        ids = prompts[row, :, :length].cpu()
        return PrefixCache.key(self.model_key, ids), ids

    def load_prefixes(self, prompts: Tensor, lengths: Tensor, prefixes: Sequence[int] | None,
                      caches: Caches) -> list[int]:
        """Put every row's voice prefix KV in its first cache slots and return, per row, the
        slot its prompt resumes from (0: no prefix). A prefix not in ``self.prefixes`` is run
        on its own (``[1, 1 + K, P]`` from slot 0: the same computation every time) and kept;
        rows sharing a prefix (takes) run it once. So a prompt's rest always runs the same way,
        whether its prefix was reused or not, the cache on or off: reuse never changes a
        result, in any precision."""
        starts = [0] * prompts.shape[0]
        if not prefixes:
            return starts
        loaded: dict[tuple, PrefixEntry] = {}  # this call's prefixes, by key
        for row, (length, total) in enumerate(zip(prefixes, lengths.tolist())):
            if not 0 < length < total:
                continue
            key, ids = self.prefix_ids(prompts, row, length)
            entry = loaded.get(key)
            if entry is None:
                entry = self.prefixes.get(key, ids) if self.prefixes.enabled else None
            if entry is None:
                entry = self.run_prefix(prompts[row:row + 1, :, :length], ids,
                                        caches.rows(row, row + 1))
                self.prefixes.put(key, entry)
            loaded[key] = entry
            for cache, keys, values in zip(caches.slow, entry.keys, entry.values):
                cache.k[row, :, :length] = keys
                cache.v[row, :, :length] = values
            starts[row] = length
        return starts

    def run_prefix(self, prefix: Tensor, ids: Tensor, row: CacheRows) -> PrefixEntry:
        """The slow AR's KV of one prefix ``[1, 1 + K, P]``, run alone from slot 0 in ``row``
        (the one-row cache of the prompt being prefilled)."""
        P = prefix.shape[-1]
        pos = torch.arange(P, device=self.device)[None]
        self.model.slow_forward(prefix, pos, None, row)
        return PrefixEntry(ids, [c.k[0, :, :P].clone() for c in row.slow],
                           [c.v[0, :, :P].clone() for c in row.slow])

    def prefill_after(self, prompts: Tensor, lengths: Tensor, starts: list[int],
                      caches: Caches) -> Tensor:
        """Run each row's prompt from slot ``starts[row]`` on (the slots before it are already
        in the cache), attending through a per-row causal mask over the whole cache."""
        B, L = prompts.shape[0], caches.shape[1]
        start = torch.tensor(starts, device=self.device)
        rest = lengths - start  # tokens left to run, per row
        S = int(rest.max())
        tokens = torch.zeros(B, prompts.shape[1], S, dtype=prompts.dtype, device=self.device)
        for row, (s, n) in enumerate(zip(starts, rest.tolist())):
            tokens[row, :, :n] = prompts[row, :, s:s + n]
        # Padding goes to the last slot (never read before a generated frame overwrites it).
        pos = (start[:, None] + torch.arange(S, device=self.device)).clamp(max=L - 1)
        slots = torch.arange(L, device=self.device)
        mask = (slots[None, None, :] <= pos[:, :, None])[:, None]  # [B, 1, S, L]
        hidden = self.model.slow_forward(tokens, pos, mask, caches)
        return hidden[torch.arange(B, device=self.device), rest - 1]

    # ------------------------------------------------------------------ the loop
    @torch.inference_mode()
    def generate(self, prompts: Tensor | Sequence[Tensor],
                 params: SamplingParams | Sequence[SamplingParams] = SamplingParams(), *,
                 seed: int | None = None, seeds: Sequence[int] | None = None,
                 generator: torch.Generator | None = None,
                 on_frame: Callable[[int, int], None] | None = None,
                 on_column: Callable[[Tensor], None] | None = None,
                 cancel: Callable[[], bool] | None = None,
                 stop_on_eos: bool = True,
                 prefixes: Sequence[int] | None = None) -> list[Generated]:
        """Generate for one prompt ``[1 + K, T]`` or several (decoded together, each stopping on
        its own).

        Randomness: ``seed`` (or a ready ``generator``) drives the whole batch; ``seeds`` (one
        per prompt) gives each row its own generator, so row b draws exactly what a one-prompt
        run with ``seed=seeds[b]`` draws. With none of them a random seed is used.
        ``on_frame(done, total)`` reports progress; ``on_column(column)`` receives each new
        column ``[B, 1 + K]`` (a CPU copy, the first one from the prefill; one host sync per
        frame) for streaming — a row's columns past its own end are dropped from its result. ``cancel()`` returning
        True raises Cancelled. ``stop_on_eos=False`` runs every row to its ``max_new_tokens``
        (for benchmarks). ``prefixes``: each prompt's voice-prefix length (``prefill``), whose
        KV is reused from, or kept in, the prefix cache."""
        self.follow_model()
        prompts, params = self.check_request(prompts, params)
        if prefixes is not None and len(prefixes) != len(prompts):
            raise GenerationError(f"prefixes must hold one length per prompt: got "
                                  f"{len(prefixes)} for {len(prompts)} prompts")
        draws = RandomDraws(self, len(prompts), seed, seeds, generator)
        lengths = [p.shape[1] for p in prompts]
        steps = [min(p.max_new_tokens, self.max_context - n) for p, n in zip(params, lengths)]
        batch = self.pad(prompts)
        self.ensure_cache(len(prompts), cache_length(batch.shape[-1] + max(steps),
                                                     self.max_context))
        out = self.decode(batch, torch.tensor(lengths, device=self.device), params, draws,
                          max(steps), stop_on_eos, on_frame, on_column, cancel, prefixes)
        return [trim(out[b], steps[b], lengths[b], draws.seeds[b], stop_on_eos,
                     self.config.eos_token_id) for b in range(len(prompts))]

    def check_request(self, prompts, params) -> tuple[list[Tensor], list[SamplingParams]]:
        """Validate the prompts and their SamplingParams (one for all, or one each)."""
        prompts = [prompts] if isinstance(prompts, Tensor) else list(prompts)
        if not prompts:
            raise GenerationError("prompts must hold at least one prompt")
        params = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        if len(params) != len(prompts):
            raise GenerationError(f"got {len(params)} SamplingParams for {len(prompts)} prompts")
        for p in params:
            p.validate()
        width = 1 + self.config.num_codebooks
        for i, p in enumerate(prompts):
            if p.dim() != 2 or p.shape[0] != width or p.shape[1] == 0:
                raise GenerationError(f"prompt {i} must be a [{width}, T] integer tensor, "
                                      f"got {tuple(p.shape)}")
        longest = max(p.shape[1] for p in prompts)
        if longest >= self.max_context:
            raise GenerationError(f"prompt is too long: {longest} tokens, the context "
                                  f"length is {self.max_context}")
        return prompts, params

    def pad(self, prompts: list[Tensor]) -> Tensor:
        """Right-pad the prompts into one batch ``[B, 1 + K, T]`` on the device."""
        T = max(p.shape[1] for p in prompts)
        batch = torch.zeros(len(prompts), prompts[0].shape[0], T, dtype=torch.long)
        for i, p in enumerate(prompts):
            batch[i, :, : p.shape[1]] = p
        return batch.to(self.device)

    def ensure_cache(self, batch: int, length: int) -> None:
        """KV caches for ``batch`` rows of ``length`` slots (kept when they already fit)."""
        if self.caches is None or self.caches.shape != (batch, length):
            self.release_graph()  # it holds the old caches' addresses (kept prefixes stay:
            self.caches = None  # their KV depends on neither the row count nor the length)
            self.caches = self.model.make_caches(batch, length, self.dtype, self.device)

    def sampling_tensors(self, params: list[SamplingParams]) -> tuple[Tensor, Tensor, Tensor]:
        """temperature and top_p ``[B, 1]`` in the model dtype, top_k ``[B, 1]`` long."""
        def column(name, dtype):
            return torch.tensor([[getattr(p, name)] for p in params], device=self.device,
                                dtype=dtype)

        return column("temperature", self.dtype), column("top_p", self.dtype), \
            column("top_k", torch.long)

    def decode(self, batch: Tensor, lengths: Tensor, params: list[SamplingParams],
               draws: "RandomDraws", total: int, stop_on_eos: bool, on_frame, on_column,
               cancel, prefixes: Sequence[int] | None = None) -> Tensor:
        """Prefill, then up to ``total`` frames; returns every column ``[B, 1 + K, n]`` on the
        CPU. The loop stops early once every row has produced ``<|im_end|>``."""
        eos = self.config.eos_token_id
        temperature, top_p, top_k = self.sampling_tensors(params)
        hidden = self.prefill(batch, lengths, prefixes)
        column = self.frame_tail(hidden, None, temperature, top_p, top_k, *draws())
        columns = [column]
        emit(on_column, column)
        report(on_frame, cancel, 1, total)
        pos = lengths.clone()
        window = torch.zeros(batch.shape[0], RAS_WINDOW, dtype=torch.long, device=self.device)
        finished = column[:, 0] == eos
        for i in range(1, total):
            if stop_on_eos and i % self.check_every == 0 and bool(finished.all()):
                break
            column, window = self.step(column, pos, window, temperature, top_p, top_k, *draws())
            # Keep the column out of the step's (possibly CUDA-graph-owned) output buffer; the
            # window only goes back in as the next input, which the graph copies in first.
            column = column.clone()
            columns.append(column)
            emit(on_column, column)
            finished = finished | (column[:, 0] == eos)
            pos = pos + 1
            report(on_frame, cancel, i + 1, total)
        return torch.stack(columns, dim=-1).cpu()


class RandomDraws:
    """The random numbers of each frame, in the reference's order and dtype: ``[V]`` normal,
    ``[V]`` high-temperature, then ``[C]`` per fast codebook.

    One generator for the whole batch (``seed`` or ``generator``: draws are ``[B, n]``), or one
    per row (``seeds``: row b draws ``[1, n]`` from its own, exactly as a one-row run would)."""

    def __init__(self, engine: Engine, batch: int, seed, seeds, generator):
        if seeds is not None and (seed is not None or generator is not None):
            raise GenerationError("give either seeds (one per prompt) or seed/generator, "
                                  "not both")
        self.device, self.dtype, c = engine.device, engine.dtype, engine.config
        self.vocab, self.codebook, self.fast = (c.text.vocab_size, c.codebook_size,
                                                c.num_codebooks - 1)
        if seeds is not None:
            seeds = list(seeds)
            if len(seeds) != batch:
                raise GenerationError(f"seeds must hold one seed per prompt: got {len(seeds)} "
                                      f"for {batch} prompts")
            self.seeds = [check_seed(s, f"seeds[{i}]") for i, s in enumerate(seeds)]
            self.groups = [(self.generator(s), 1) for s in self.seeds]
            return
        if generator is None:
            seed = random_seed() if seed is None else check_seed(seed)
            generator = self.generator(seed)
        self.seeds = [seed] * batch
        self.groups = [(generator, batch)]

    def generator(self, seed: int) -> torch.Generator:
        return torch.Generator(self.device).manual_seed(seed)

    def __call__(self) -> tuple[Tensor, Tensor, Tensor]:
        """``rand_main``, ``rand_high`` ``[B, V]`` and ``rand_fast`` ``[K - 1, B, C]``."""
        mains, highs, fasts = [], [], []
        for generator, rows in self.groups:
            def rand(n):
                return torch.rand(rows, n, generator=generator, device=self.device,
                                  dtype=self.dtype)

            mains.append(rand(self.vocab))
            highs.append(rand(self.vocab))
            fasts.append(torch.stack([rand(self.codebook) for _ in range(self.fast)]))
        return torch.cat(mains), torch.cat(highs), torch.cat(fasts, dim=1)


def trim(columns: Tensor, steps: int, prompt_length: int, seed: int | None, stop_on_eos: bool,
         eos: int) -> Generated:
    """One row's result from its columns ``[1 + K, n]``: cut at its own length limit and, when
    stopping on it, just after its first ``<|im_end|>``."""
    row = columns[:, :steps]
    hits = (row[0] == eos).nonzero() if stop_on_eos else []
    stopped = bool(len(hits))
    row = row[:, : int(hits[0]) + 1] if stopped else row
    codes = row[1:, :-1] if stopped else row[1:]
    return Generated(codes.clone(), row.clone(), stopped, prompt_length, seed)


def emit(on_column, column: Tensor) -> None:
    if on_column is not None:
        on_column(column.cpu().clone())


def report(on_frame, cancel, done: int, total: int) -> None:
    if on_frame is not None:
        on_frame(done, total)
    if cancel is not None and cancel():
        raise Cancelled(f"generation cancelled after {done} of up to {total} frames")


def tensor_addresses(module: torch.nn.Module) -> tuple[int, ...]:
    """The storage address of every parameter and buffer (of the plain tensors inside a tensor
    subclass, e.g. a torchao quantized weight): what a captured CUDA graph reads."""
    def addresses(t: Tensor):
        if t.is_mkldnn:  # oneDNN-packed (CPU, quant.packed): no data pointer, no CUDA graph
            return [id(t)]
        if not is_traceable_wrapper_subclass(t):
            return [t.data_ptr()]
        names, _ = t.__tensor_flatten__()
        return [a for name in names for a in addresses(getattr(t, name))]

    return tuple(a for t in [*module.parameters(), *module.buffers()] for a in addresses(t))


@contextmanager
def inductor_cache_dir(path: str | os.PathLike | None):
    """Keep inductor's compiled kernels in a persistent folder (``path``, e.g. from
    ``$SAILFISH_COMPILE_CACHE``) so a later process reuses them: a warm compile takes seconds
    instead of minutes. Inductor reads its folder from ``TORCHINDUCTOR_CACHE_DIR`` when it
    compiles, so the variable is set only while our compiled step runs and then restored: other
    packs in the same process (ComfyUI) keep their own. With no path, nothing is changed."""
    if not path:
        yield
        return
    os.makedirs(path, exist_ok=True)
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = before
