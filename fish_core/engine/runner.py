"""``Engine``: one ``DualAR`` model, its decode step and its KV cache.

A frame is one slow-AR step (the main token, constrained to the semantic ids and ``<|im_end|>``)
followed by the fast AR over the codebooks. ``Engine.decode_frame`` is that whole frame as one
function: static shapes, no host sync, no data-dependent Python branches, so it compiles with
``fullgraph=True`` (and, on CUDA, is captured as a CUDA graph). The engine runs it (``frame``:
compiled, CUDA graph and their recorded fallbacks), prefills prompts into rows of its cache
(``prefill_rows``, reusing kept voice prefixes; padded to a length bucket and graphed per
bucket on CUDA: ``run_prefill``) and sizes the cache (``ensure_cache``, in
``cache_length`` buckets). It schedules nothing and knows nothing of the floor above it: which
rows run, with which random numbers, and for how long is decided by the one decode loop,
``rows.RowBatch`` (``rows.generate`` runs prompts to their ends).

Random numbers are drawn outside the step, per frame and in the reference's order and dtype
(``[V]`` normal, ``[V]`` high-temperature, then ``[C]`` per fast codebook), so a seed replays
fish-speech exactly in eager mode.
"""

from __future__ import annotations

import os
import threading
import warnings
from contextlib import contextmanager
from typing import Sequence

import torch
from torch import Tensor

from .compile_choice import MeasuredStep, compile_mode, compile_options, warn_cpu_compile
from .config import ModelConfig
from .cuda_graph import FrameGraph, tensor_addresses
from .device import to_device
from .model import CacheRows, Caches, DualAR
from .prefix_cache import PrefixCache, PrefixEntry, megabytes
from .sampling import RAS_HIGH_TEMPERATURE, RAS_HIGH_TOP_P, draw, prepare, ras_select


CACHE_BUCKET = 256  # the KV cache length is rounded up to a multiple of this (then to a power of 2)
PREFILL_BUCKET = 64  # a bucketed prefill runs a power of two of tokens, at least this many
# Bucketed prefills by default on CUDA with graphs: off until a GPU run shows them equal to the
# goldens and quicker to first audio (bench/gpu_first.py: parity "graph-buckets", ttfa, and its
# decisions). Not bit for bit on the CPU: its attention sums a padded row in another order.
PREFILL_BUCKETS_ON_CUDA = False
PACKED_NO_COMPILE = ("bf16 weights packed for oneDNN do not compile; on a CPU the eager step "
                     "with them is the faster one")


def cache_length(needed: int, limit: int) -> int:
    """Round ``needed`` slots up to a bucket (multiple of 256, then power of two) so that the
    compiled decode step sees few distinct cache shapes."""
    length = max(CACHE_BUCKET, -(-needed // CACHE_BUCKET) * CACHE_BUCKET)
    length = 1 << (length - 1).bit_length()
    return max(needed, min(length, -(-limit // 8) * 8))


def prefill_bucket(tokens: int, limit: int) -> int:
    """The tokens a bucketed prefill of ``tokens`` runs: the next power of two from
    ``PREFILL_BUCKET``, at most ``limit`` (the cache length), so that a prefill sees few shapes
    (``Engine.prefill_buckets``)."""
    return max(tokens, min(limit, max(PREFILL_BUCKET, 1 << (tokens - 1).bit_length())))


def packed_weights(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds weights in oneDNN's packed layout (``quant.packed``)."""
    return any(p.is_mkldnn for p in model.parameters())


def sampled_rows(c: ModelConfig) -> list[int]:
    """Rows of the tied head that can be sampled: <|im_end|> and the semantic range, in
    vocabulary order. Logits are computed for these rows only; every other row carries the
    reference's -inf bias, so its probability is exactly 0 and it can never be drawn."""
    return sorted({c.eos_token_id, *range(c.semantic_start_token_id,
                                          c.semantic_end_token_id + 1)})


class Engine:
    """Runs one ``DualAR`` model: its decode step and its KV cache. Not thread-safe: one decode
    at a time (``claim``).

    The engine owns its state (KV caches, CUDA graph, compiled step, kept voice prefixes), so
    several engines can share one model. What really ran is recorded: ``compiled`` (False after
    a compile failure), ``cuda_graph`` (False after a capture failure), ``graph_captures`` and
    ``fallbacks`` (one human-readable line per fallback taken)."""

    def __init__(self, model: DualAR, compile: bool | str = False,
                 eos_check_every: int | None = None, max_context: int | None = None,
                 compile_cache: str | os.PathLike | None = None, cuda_graph: bool | None = None,
                 prefix_cache_mb: float | None = None, prefill_buckets: bool | None = None):
        self.model = model
        self.config = c = model.config
        self.allowed = sampled_rows(c)
        self.max_context = min(max_context or c.text.max_seq_len, c.text.max_seq_len)
        self.eos_check_every = eos_check_every
        self.empty_state()
        # Reference-prefix KV reuse (prefix_cache.py): None = the default budget, 0 = off.
        self.prefixes = PrefixCache(megabytes(prefix_cache_mb))
        self.follow_model()
        self.compile_cache = compile_cache or os.environ.get("SAILFISH_COMPILE_CACHE")
        self.choose_step(compile)
        self.cuda_graph = self.device.type == "cuda" if cuda_graph is None else cuda_graph
        # The first frame of a one-prompt join (fast AR + samplers after the prefill) replayed
        # from a CUDA graph per row (``first_column``); off after a failed capture.
        self.prefill_graph = self.cuda_graph and self.device.type == "cuda"
        # A prompt's tokens padded to a ``prefill_bucket`` (few shapes), and with CUDA graphs
        # each one-row bucketed prefill replayed from a graph (``run_prefill``); by default
        # only where ``PREFILL_BUCKETS_ON_CUDA`` says.
        self.prefill_buckets = (self.prefill_graph and PREFILL_BUCKETS_ON_CUDA
                                if prefill_buckets is None else prefill_buckets)
        self.bucket_graphs = self.prefill_graph

    def empty_state(self) -> None:
        """What a new engine starts with: no caches, graphs, weights seen, claim or fallback."""
        self.caches: Caches | None = None
        self._views: dict[int, CacheRows] = {}  # rows 0 .. n - 1 of the caches, by n
        self._graphs: dict[int, FrameGraph] = {}  # by row count, for these caches and weights
        self._first_graphs: dict[int, FrameGraph] = {}  # by cache row (``first_column``)
        self.first_captures = 0
        self._prefill_graphs: dict[tuple, tuple] = {}  # (graph, its caches) by row and shape
        self._prefill_pool = None  # the memory pool they share
        self.prefill_captures = 0
        self._weights = None
        self._claims = 0  # the decode that holds the caches now (``claim``)
        # Held through a decode's frame or prefill (``rows.owning``) and a release: one
        # thread at a time touches the caches, and a decode that lost them finds out.
        self.lock = threading.RLock()
        self.graph_captures = 0
        self.fallbacks: list[str] = []

    def choose_step(self, compile: bool | str) -> None:
        """The decode step: eager (``None``), compiled, or measured and picked (``"auto"``).
        It is kept as a function of (engine, ...) rather than a bound method, so the engine
        holds no reference cycle and its model is freed as soon as it is dropped."""
        self._step = None
        self.compile_choice = compile_mode(compile)  # what was asked; "auto" says what it chose
        if self.compile_choice != "off" and packed_weights(self.model):
            self.refuse_compile()
        elif self.compile_choice != "off":
            self._step = torch.compile(Engine.decode_frame, fullgraph=True,
                                       options=compile_options(self.model))
        if self.compile_choice == "on" and self._step is not None:
            warn_cpu_compile(self.device, self.dtype)
        elif self.compile_choice == "auto" and self._step is not None:
            self._step = MeasuredStep(self._step, Engine.decode_frame, self._chose_step)

    def refuse_compile(self) -> None:
        """Weights packed for oneDNN (bf16 on a CPU, ``quant.packed``) cannot be compiled: say
        so plainly (not dynamo's "Unsupported: Observed exception") and decode eagerly, which
        with packed weights is the faster step on a CPU anyway."""
        if self.compile_choice == "auto":
            self.compile_choice = f"auto: eager: {PACKED_NO_COMPILE}"
            return
        reason = (f"torch.compile of the decode step: {PACKED_NO_COMPILE}; decoding without "
                  "compile (SAILFISH_CPU_PACK=0 leaves the weights plain, to compile them)")
        self.fallbacks.append(reason)
        warnings.warn(reason, stacklevel=3)

    def _chose_step(self, step, reason: str) -> None:
        """``compile="auto"``: the step it measured faster (``None``: eager) and why."""
        self._step, self.compile_choice = step, f"auto: {reason}"

    @property
    def compiled(self) -> bool:
        """Whether the decode step runs compiled (False after a compile failure)."""
        return self._step is not None

    @property
    def fixed_rows(self) -> bool:
        """Whether a frame decodes a bucket of rows (``row_bucket``: a power of two, or all
        rows) rather than exactly the first busy ones: a compiled step or a CUDA graph keeps
        one shape per bucket (an eager step may decode any number of first rows)."""
        return self.compiled or self.cuda_graph

    @property
    def graph_rows(self) -> list[int]:
        """The row counts with a captured frame graph (for these caches and weights)."""
        return sorted(self._graphs)

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
        """One decode frame on the first ``n`` cache rows (``n`` = the rows the arguments
        hold): replayed from a CUDA graph when enabled (captured on first use per row count for
        the current caches and weights, which fix every argument's shape and address), else
        ``run_step``. A graph that cannot be captured, or whose replay differs from the direct
        run, is dropped and the fallback recorded. A graph's outputs are its own buffers,
        overwritten by the next replay."""
        n = args[0].shape[0]
        caches = self.first_rows(n)
        if not self.cuda_graph:
            return self.run_step(*args, caches)
        graph = self._graphs.get(n)
        if graph is None:
            try:
                graph = FrameGraph(lambda *a: self.run_step(*a, caches), args)
            except Exception as e:  # noqa: BLE001 - no graph: keep decoding without one
                self.fall_back("CUDA graph capture", e, "decoding without CUDA graphs")
                self.cuda_graph = False
                return self.run_step(*args, caches)
            self._graphs[n] = graph
            self.graph_captures += 1
        return graph(*args)

    def follow_model(self) -> None:
        """Re-derive the device-side state (head rows, ids) after the model's weights were moved
        or replaced, e.g. by ComfyUI offloading it to the CPU and back. A CUDA graph holds the
        addresses of every weight it read, so any change drops it; the caches go with a new
        device or dtype."""
        key = (self.model.device, self.model.dtype, tensor_addresses(self.model))
        if key == self._weights:
            return
        if self._weights is None or key[:2] != self._weights[:2]:
            self.drop_caches()
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
        for graph in [*self._graphs.values(), *self._first_graphs.values(),
                      *(graph for graph, _ in self._prefill_graphs.values())]:
            graph.release()
        self._graphs.clear()
        self._first_graphs.clear()
        self._prefill_graphs.clear()
        self._prefill_pool = None

    def release(self) -> None:
        """Free the KV caches and the CUDA graph (and its memory pool); both are re-made, sized
        to the request, on the next call. Kept reference prefixes are freed too. A decode still
        holding rows (``claim``) refuses to go on."""
        with self.lock:
            self.release_graph()
            self.drop_caches()
            self.prefixes.clear()
            self._claims += 1

    # ------------------------------------------------------------------ the cache
    def claim(self) -> int:
        """Hand the caches to a new decode (a ``RowBatch``); returns its ticket. An earlier
        decode's ticket stops being ``current``: it must not touch rows it no longer owns."""
        self._claims += 1
        return self._claims

    def current(self, ticket: int) -> bool:
        return ticket == self._claims

    def drop_caches(self) -> None:
        self._views.clear()
        self.caches = None

    def ensure_cache(self, rows: int, length: int, keep: bool = False) -> None:
        """KV caches of ``rows`` rows and ``length`` slots (kept when they already are). With
        ``keep`` the old caches' rows and slots are copied over (a running decode that needs a
        longer cache); without, the old caches are freed first."""
        old = self.caches
        if old is not None and old.shape == (rows, length):
            return
        self.release_graph()  # it holds the old caches' addresses (kept prefixes stay: their
        self.drop_caches()  # KV depends on neither the row count nor the length)
        if not keep:
            old = None
        new = self.model.make_caches(rows, length, self.dtype, self.device)
        if old is not None:
            for cache, was in zip([*new.slow, *new.fast], [*old.slow, *old.fast]):
                n, slots = min(rows, was.k.shape[0]), min(cache.k.shape[2], was.k.shape[2])
                cache.k[:n, :, :slots] = was.k[:n, :, :slots]
                cache.v[:n, :, :slots] = was.v[:n, :, :slots]
        self.caches = new

    def first_rows(self, n: int) -> Caches | CacheRows:
        """Rows ``0 .. n - 1`` of the caches (the caches themselves when that is all)."""
        if n == self.caches.shape[0]:
            return self.caches
        if n not in self._views:
            self._views[n] = self.caches.rows(slice(0, n))
        return self._views[n]

    def cache_rows(self, rows: Sequence[int]) -> Caches | CacheRows:
        rows = list(rows)
        if rows == list(range(self.caches.shape[0])):
            return self.caches
        return self.caches.rows(rows)

    # ------------------------------------------------------------------ one frame
    def frame(self, n: int, column: Tensor, pos: Tensor, window: Tensor, temperature: Tensor,
              top_p: Tensor, top_k: Tensor, rand_main: Tensor, rand_high: Tensor,
              rand_fast: Tensor) -> tuple[Tensor, Tensor]:
        """One decode frame for cache rows ``0 .. n - 1`` (the arguments hold those rows;
        ``fixed_rows``: ``n`` is a ``row_bucket``). Returns the next columns ``[n, 1 + K]``, a
        tensor the caller may keep, and the RAS windows (to copy out before the next frame)."""
        args = (column, pos, window, temperature, top_p, top_k, rand_main, rand_high, rand_fast)
        if not self.fixed_rows:  # eager: any number of first rows
            return self.decode_frame(*args, caches=self.first_rows(n))
        column, window = self.step(*args)
        return (column.clone() if n in self._graphs else column), window

    def frame_tail(self, hidden: Tensor, window: Tensor | None, temperature: Tensor,
                   top_p: Tensor, top_k: Tensor, rand_main: Tensor, rand_high: Tensor,
                   rand_fast: Tensor, caches: Caches | CacheRows | None = None) -> Tensor:
        """From the slow AR's last hidden state ``[B, D]`` to the frame column ``[B, 1 + K]``
        (the fast AR runs in ``caches``, default the engine's).

        ``rand_main``/``rand_high`` ``[B, V]`` (full vocabulary, as the reference draws them),
        ``rand_fast`` ``[K - 1, B, C]``; ``window [B, W]`` or None (prefill: no RAS)."""
        c = self.config
        caches = self.caches if caches is None else caches
        main = self.main_token(hidden, window, temperature, top_p, top_k, rand_main, rand_high)

        # Fast AR: position 0 is the slow hidden state, position 1 the semantic code c0; both
        # go in one pass (the reference runs them one by one and discards position 0's logits).
        # The codebooks' settings are made ready once and their random numbers' logs taken in
        # one kernel (``sampling.draw``).
        settings = prepare(temperature, top_p, top_k, c.codebook_size)
        codes = self.fast_codes(hidden, main, settings, torch.log(rand_fast), caches)
        return torch.stack([main, *codes], dim=1)

    def fast_codes(self, hidden: Tensor, main: Tensor, settings, log_fast: Tensor,
                   caches: Caches | CacheRows) -> list[Tensor]:
        """The fast AR's codes ``K x [B]`` after the main token ``[B]``: the semantic code c0,
        then one drawn per codebook (``log_fast [K - 1, B, C]``)."""
        c, model = self.config, self.model
        code = torch.clamp(main - c.semantic_start_token_id, 0, c.codebook_size - 1)
        codes = [code]
        x = torch.stack([hidden, model.fast_embeddings(code)], dim=1)  # [B, 2, D]
        logits = model.fast_forward(x, 0, caches)[:, -1]
        for k in range(1, c.num_codebooks):
            code = draw(logits, settings, log_fast[k - 1])
            codes.append(code)
            if k + 1 < c.num_codebooks:
                x = model.fast_embeddings(code).unsqueeze(1)
                logits = model.fast_forward(x, k + 1, caches)[:, -1]
        return codes

    def main_token(self, hidden: Tensor, window: Tensor | None, temperature: Tensor,
                   top_p: Tensor, top_k: Tensor, rand_main: Tensor, rand_high: Tensor) -> Tensor:
        """The slow AR's token ``[B]`` from its hidden state ``[B, D]``: sampled among the
        allowed rows of the head, then RAS against ``window`` (None, a prefill: no RAS, its
        high draw goes unused)."""
        c = self.config
        logits = torch.nn.functional.linear(hidden, self.head)  # [B, N_allowed]
        settings = prepare(temperature, top_p, top_k, logits.shape[-1])
        log_main = torch.log(rand_main.index_select(-1, self.allowed_ids))
        main = self.allowed_ids[draw(logits, settings, log_main)]
        if window is None:
            return main
        high_t = torch.full_like(temperature, RAS_HIGH_TEMPERATURE)
        high_p = torch.full_like(top_p, RAS_HIGH_TOP_P)
        high = prepare(high_t, high_p, top_k, logits.shape[-1], cut=settings.cut)
        log_high = torch.log(rand_high.index_select(-1, self.allowed_ids))
        high = self.allowed_ids[draw(logits, high, log_high)]
        return ras_select(main, high, window, c.semantic_start_token_id, c.semantic_end_token_id)

    def slow_step(self, column: Tensor, pos: Tensor,
                  caches: Caches | CacheRows | None = None) -> Tensor:
        """Slow AR for one column ``[B, 1 + K]`` at ``pos [B]``, attending to every cached slot
        up to ``pos``; returns the final-normed hidden state ``[B, D]``."""
        caches = self.caches if caches is None else caches
        slots = torch.arange(caches.shape[1], device=pos.device)
        mask = (slots <= pos[:, None])[:, None, None, :]  # [B, 1, 1, L]
        return self.model.slow_forward(column.unsqueeze(-1), pos[:, None], mask, caches)[:, -1]

    def decode_frame(self, column: Tensor, pos: Tensor, window: Tensor, temperature: Tensor,
                     top_p: Tensor, top_k: Tensor, rand_main: Tensor, rand_high: Tensor,
                     rand_fast: Tensor, caches: Caches | CacheRows | None = None
                     ) -> tuple[Tensor, Tensor]:
        """One decode step. ``column [B, 1 + K]`` was produced last frame and sits at ``pos [B]``.
        Returns the next column and the updated RAS window."""
        hidden = self.slow_step(column, pos, caches)
        nxt = self.frame_tail(hidden, window, temperature, top_p, top_k, rand_main, rand_high,
                              rand_fast, caches)
        window = torch.cat([window[:, 1:], nxt[:, :1]], dim=1)
        return nxt, window

    # ------------------------------------------------------------------ prefill
    def prefill_rows(self, prompts: Tensor, lengths: Sequence[int], rows: Sequence[int],
                     prefixes: Sequence[int] | None, temperature: Tensor, top_p: Tensor,
                     top_k: Tensor, rand_main: Tensor, rand_high: Tensor,
                     rand_fast: Tensor) -> Tensor:
        """Prefill the prompts into cache rows ``rows`` and draw each one's first column
        ``[B, 1 + K]`` (``prefill``, then ``frame_tail`` without RAS in those rows)."""
        hidden = self.prefill(prompts, lengths, prefixes, rows)
        return self.first_column(hidden, list(rows), temperature, top_p, top_k, rand_main,
                                 rand_high, rand_fast)

    def first_column(self, hidden: Tensor, rows: list[int], *args: Tensor) -> Tensor:
        """The prefill's frame tail (``frame_tail`` without RAS) in cache rows ``rows``.

        With ``prefill_graph`` (CUDA graphs on CUDA) and one row, it is replayed from a graph
        captured once per row for the current caches and weights: eager, its fast-AR passes
        and samplers are ~1,000 small kernels launched one by one from Python, most of a
        request's set-up on a big GPU. The replay runs the same kernels: the same column."""
        caches = self.cache_rows(rows)
        if not self.prefill_graph or len(rows) != 1:
            return self.frame_tail(hidden, None, *args, caches)
        graph = self._first_graphs.get(rows[0])
        if graph is None:
            def tail(hidden, *args):
                return (self.frame_tail(hidden, None, *args, caches),)

            try:
                graph = FrameGraph(tail, (hidden, *args))
            except Exception as e:  # noqa: BLE001 - no graph: run the first frame eagerly
                self.fall_back("CUDA graph capture of a prefill's first frame", e,
                               "running first frames without a graph")
                self.prefill_graph = False
                return self.frame_tail(hidden, None, *args, caches)
            self._first_graphs[rows[0]] = graph
            self.first_captures += 1
        return graph(hidden, *args)[0].clone()

    def prefill(self, prompts: Tensor, lengths: Tensor | Sequence[int],
                prefixes: Sequence[int] | None = None,
                rows: Sequence[int] | None = None) -> Tensor:
        """Run the right-padded prompts ``[B, 1 + K, T]`` (CPU or device) into cache rows
        ``rows`` (default ``0 .. B - 1``); returns each prompt's last hidden state ``[B, D]``.
        Padding sits after the real tokens: causal attention never sees it, and generated frames
        overwrite its cache slots before any query can reach them.

        ``prefixes`` (one length per prompt, 0 = none) marks each prompt's voice prefix: its KV
        is put in the row's first slots first (``load_prefixes``: reused, or run on its own) and
        only the rest of the prompt is run after it, attending through a per-row mask. The
        prompts with a prefix and those without run apart, each kind in one batch, so how a
        prompt is prefilled never depends on the prompts it joins with."""
        rows = list(range(prompts.shape[0])) if rows is None else list(rows)
        lengths = lengths.tolist() if isinstance(lengths, Tensor) else list(lengths)
        starts = self.load_prefixes(prompts, lengths, prefixes, rows)
        on_device = to_device(self.bucket_padded(prompts, max(lengths)), self.device)
        groups = prefill_groups(starts)
        parts = [self.prefill_group(on_device, group, lengths, starts, rows) for group in groups]
        if len(parts) == 1:
            return parts[0]
        hidden = parts[0].new_empty(prompts.shape[0], parts[0].shape[-1])
        for group, part in zip(groups, parts):
            hidden[group] = part
        return hidden

    def prefill_group(self, prompts: Tensor, group: list[int], lengths: list[int],
                      starts: list[int], rows: list[int]) -> Tensor:
        """The last hidden states ``[G, D]`` of the prompts ``group`` (all with a prefix, or
        all without) of ``prompts [B, 1 + K, T]``, run into their cache rows."""
        run = self.prefill_after if starts[group[0]] else self.prefill_whole
        return run(prompts if len(group) == prompts.shape[0] else prompts[group],
                   [lengths[b] for b in group], [starts[b] for b in group],
                   [rows[b] for b in group])

    def prefill_whole(self, prompts: Tensor, lengths: list[int], starts: list[int],
                      rows: list[int]) -> Tensor:
        """Prompts without a voice prefix: one causal run from slot 0 (of ``bucket(T)`` tokens
        when bucketed: the padding after the real ones, which causal attention keeps from
        them)."""
        caches = self.cache_rows(rows)
        B, T = prompts.shape[0], self.bucket(max(lengths), caches)
        last = to_device(torch.tensor(lengths), self.device) - 1

        def run(tokens: Tensor, last: Tensor) -> Tensor:
            pos = torch.arange(T, device=self.device).expand(B, T)
            hidden = self.model.slow_forward(tokens, pos, None, caches)
            return hidden[torch.arange(B, device=self.device), last]

        return self.run_prefill(run, ("whole", tuple(rows), T), caches, prompts[..., :T], last)

    def bucket(self, tokens: int, caches: Caches | CacheRows) -> int:
        """The tokens a prefill of ``tokens`` runs: ``prefill_bucket`` when bucketing."""
        return prefill_bucket(tokens, caches.shape[1]) if self.prefill_buckets else tokens

    def bucket_padded(self, prompts: Tensor, longest: int) -> Tensor:
        """``prompts [B, 1 + K, T]`` right-padded (zeros) to the bucket of ``longest`` tokens
        when bucketing, so that every prefill's slice of them is there."""
        width = self.bucket(longest, self.caches)
        if width <= prompts.shape[-1]:
            return prompts
        return torch.nn.functional.pad(prompts, (0, width - prompts.shape[-1]))

    def run_prefill(self, run, key: tuple, caches: Caches | CacheRows, *args: Tensor) -> Tensor:
        """``run(*args)``, a prefill's slow AR (the last hidden states ``[B, D]``). Bucketed on
        CUDA with graphs on, a one-row prefill replays a graph captured once per (row, shapes)
        ``key`` for these caches and weights, the graphs sharing one memory pool (at most
        rows x buckets of them; the replay's output is copied out, the next replay of another
        graph may reuse its memory). A failed capture or self-check: eager from then on,
        recorded."""
        if not (self.prefill_buckets and self.bucket_graphs and len(key[1]) == 1):
            return run(*args)
        entry = self._prefill_graphs.get(key)
        if entry is None:
            try:
                self._prefill_pool = self._prefill_pool or torch.cuda.graph_pool_handle()
                graph = FrameGraph(lambda *a: (run(*a),), args, pool=self._prefill_pool)
            except Exception as e:  # noqa: BLE001 - no graph: prefill eagerly
                self.fall_back("CUDA graph capture of a bucketed prefill", e,
                               "prefilling without graphs")
                self.bucket_graphs = False
                return run(*args)
            entry = self._prefill_graphs[key] = (graph, caches)  # caches kept: the graph's
            self.prefill_captures += 1
        return entry[0](*args)[0].clone()

    def load_prefixes(self, prompts: Tensor, lengths: list[int],
                      prefixes: Sequence[int] | None, rows: list[int]) -> list[int]:
        """Put every prompt's voice prefix KV in its row's first cache slots and return, per
        prompt, the slot it resumes from (0: no prefix). A prefix not in ``self.prefixes`` is
        run on its own in the row (``[1, 1 + K, P]`` from slot 0: the same computation every
        time) and kept when the cache is on; prompts sharing a prefix (takes) run it once and
        the others copy it from that row. So a prompt's rest always runs the same way, whether
        its prefix was reused or not, the cache on or off: reuse never changes a result, in any
        precision."""
        starts = [0] * prompts.shape[0]
        if not prefixes:
            return starts
        done: dict[tuple, int] = {}  # this call's prefixes: key → the row that holds it
        for b, (length, total) in enumerate(zip(prefixes, lengths)):
            if not 0 < length < total:
                continue
            ids = prompts[b, :, :length].cpu()  # no sync: prompts come from the host
            key, row = PrefixCache.key(self.model_key, ids), rows[b]
            if key in done:
                self.copy_prefix(done[key], row, length)
            else:
                self.place_prefix(key, ids, prompts[b:b + 1, :, :length], row)
                done[key] = row
            starts[b] = length
        return starts

    def place_prefix(self, key: tuple, ids: Tensor, prefix: Tensor, row: int) -> None:
        """Put the KV of one prefix ``prefix [1, 1 + K, P]`` (``ids`` on the CPU) in cache row
        ``row``: the kept copy when the prefix cache holds it, else run (and kept when on)."""
        entry = self.prefixes.get(key, ids) if self.prefixes.enabled else None
        if entry is not None:
            length = ids.shape[-1]
            for cache, keys, values in zip(self.caches.slow, entry.keys, entry.values):
                cache.k[row, :, :length] = keys
                cache.v[row, :, :length] = values
            return
        self.run_prefix(to_device(prefix, self.device), row)
        if self.prefixes.enabled:
            self.prefixes.put(key, self.kept_prefix(ids, row))

    def run_prefix(self, prefix: Tensor, row: int) -> None:
        """The slow AR's KV of one prefix ``[1, 1 + K, P]``, run alone from slot 0 into cache
        row ``row``."""
        P = prefix.shape[-1]
        pos = torch.arange(P, device=self.device)[None]
        self.model.slow_forward(prefix, pos, None, self.caches.rows([row]))

    def kept_prefix(self, ids: Tensor, row: int) -> PrefixEntry:
        """A copy of the prefix ``ids`` KV that cache row ``row`` holds, to keep."""
        P = ids.shape[-1]
        return PrefixEntry(ids, [c.k[row, :, :P].clone() for c in self.caches.slow],
                           [c.v[row, :, :P].clone() for c in self.caches.slow])

    def copy_prefix(self, source: int, row: int, length: int) -> None:
        for cache in self.caches.slow:
            cache.k[row, :, :length] = cache.k[source, :, :length]
            cache.v[row, :, :length] = cache.v[source, :, :length]

    def prefill_after(self, prompts: Tensor, lengths: list[int], starts: list[int],
                      rows: list[int]) -> Tensor:
        """Run each prompt from slot ``starts[b]`` on (the slots before it are already in the
        cache), attending through a per-row causal mask over the slots filled so far (up to
        the longest prompt's end), not the whole cache. Bucketed, the tokens run and the
        slots attended are each a ``prefill_bucket``."""
        caches = self.cache_rows(rows)
        B, L = prompts.shape[0], caches.shape[1]
        rest = [n - s for n, s in zip(lengths, starts)]  # tokens left to run, per prompt
        S, width = self.bucket(max(rest), caches), self.bucket(max(lengths), caches)
        tokens = rest_tokens(prompts, starts, rest, S)
        start = to_device(torch.tensor(starts), self.device)
        last = to_device(torch.tensor(rest), self.device) - 1

        def run(tokens: Tensor, start: Tensor, last: Tensor) -> Tensor:
            # Padding goes past the prompt, the last slot at most (never read before a
            # generated frame overwrites it); a padded query sees slots it never writes.
            pos = (start[:, None] + torch.arange(S, device=self.device)).clamp(max=L - 1)
            slots = torch.arange(width, device=self.device)
            mask = (slots[None, None, :] <= pos[:, :, None])[:, None]  # [B, 1, S, width]
            hidden = self.model.slow_forward(tokens, pos, mask, caches)
            return hidden[torch.arange(B, device=self.device), last]

        return self.run_prefill(run, ("after", tuple(rows), S, width), caches, tokens, start,
                                last)


def rest_tokens(prompts: Tensor, starts: list[int], rest: list[int], width: int) -> Tensor:
    """The tokens each prompt of ``prompts [B, 1 + K, T]`` has left after its prefix (``rest[b]``
    from ``starts[b]``), left-aligned in ``[B, 1 + K, width]`` (zeros after)."""
    B, rows = prompts.shape[:2]
    tokens = torch.zeros(B, rows, width, dtype=prompts.dtype, device=prompts.device)
    for b, (s, n) in enumerate(zip(starts, rest)):
        tokens[b, :, :n] = prompts[b, :, s:s + n]
    return tokens


def prefill_groups(starts: list[int]) -> list[list[int]]:
    """The prompts without a voice prefix, then those with one (``starts``: 0 = none), each
    kind when there is any."""
    groups = ([b for b, s in enumerate(starts) if not s], [b for b, s in enumerate(starts) if s])
    return [group for group in groups if group]


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
