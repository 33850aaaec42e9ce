"""Continuous batching: a decode whose rows join and leave at frame boundaries.

``RowBatch`` keeps the engine's static KV cache with a **fixed number of rows** (the serving
batch size). A compiled step or a CUDA graph decodes all of them every frame, a free row
computing on stale data that nobody reads (rows never mix: attention, sampling and every layer
act per row): one row count means one shape, never a recompile or re-capture as requests come
and go, and the price, a few idle rows, is small on a GPU, where decoding is bound by reading
the weights once per frame whatever the row count. An eager step (the CPU default) has no
shape to keep, and there idle rows cost compute, so it decodes only rows ``0 .. last busy``
(a joining request takes the lowest free row, which keeps that prefix short). The cache **length** is a bucket
(``generate.cache_length``) that grows, rows copied over, when a joining request needs more:
a handful of sizes over a server's life.

A request joins by being prefilled alone into a free row (with its voice prefix reused from the
prefix cache when kept), drawing its first column there; from the next frame it decodes with
the others. Each row draws its random numbers from its own generator in the reference's order,
and stops on its own ``<|im_end|>`` or length limit, so its codes are those of a one-prompt
``Engine.generate`` with the same seed, whenever it joins and whoever else is in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..params import Generated, GenerationError, SamplingParams
from .generate import Engine, RandomDraws, cache_length, trim
from .sampling import RAS_WINDOW


@dataclass
class Row:
    draws: RandomDraws
    steps: int  # frames this row may make
    prompt_length: int
    seed: int
    eos: int
    columns: list[Tensor] = field(default_factory=list)  # [1 + K] each, CPU

    @property
    def ended(self) -> bool:
        return len(self.columns) >= self.steps or bool(self.columns[-1][0] == self.eos)


class RowBatch:
    """``rows`` decode rows on ``engine`` (which it then owns: no other generation may run on
    that engine until it is dropped)."""

    @torch.inference_mode()
    def __init__(self, engine: Engine, rows: int):
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ValueError(f"rows must be an integer >= 1, got {rows!r}")
        engine.follow_model()
        self.engine, self.rows = engine, rows
        self.eos = engine.config.eos_token_id
        self.slots: list[Row | None] = [None] * rows
        engine.ensure_cache(rows, engine.caches.shape[1] if engine.caches is not None
                            and engine.caches.shape[0] == rows else cache_length(1, 1 << 30))
        d, K1 = engine.device, 1 + engine.config.num_codebooks
        self.column = torch.zeros(rows, K1, dtype=torch.long, device=d)
        self.pos = torch.zeros(rows, dtype=torch.long, device=d)
        self.window = torch.zeros(rows, RAS_WINDOW, dtype=torch.long, device=d)
        # Free rows sample with harmless settings; their results are never read.
        self.temperature = torch.ones(rows, 1, dtype=engine.dtype, device=d)
        self.top_p = torch.ones(rows, 1, dtype=engine.dtype, device=d)
        self.top_k = torch.ones(rows, 1, dtype=torch.long, device=d)
        self.caches = engine.caches

    # ---------------------------------------------------------------- rows
    @property
    def free(self) -> int:
        return self.slots.count(None)

    @property
    def active(self) -> list[int]:
        return [r for r, row in enumerate(self.slots) if row is not None]

    @torch.inference_mode()
    def join(self, prompt: Tensor, params: SamplingParams, seed: int, prefix: int = 0
             ) -> tuple[int, Tensor]:
        """Prefill ``prompt [1 + K, T]`` into a free row; returns the row and its first column
        ``[1 + K]`` (CPU)."""
        engine = self.engine
        self.check_engine()
        if not self.free:
            raise GenerationError("no free row in the decode batch")
        (prompt,), (params,) = engine.check_request([prompt], [params])
        T = prompt.shape[1]
        steps = min(params.max_new_tokens, engine.max_context - T)
        self.fit(T + steps)
        r = self.slots.index(None)
        view = self.caches.rows(r, r + 1)
        draws = RandomDraws(engine, 1, None, [seed], None)
        sampling = engine.sampling_tensors([params])
        hidden = engine.prefill(prompt[None].to(engine.device),
                                torch.tensor([T], device=engine.device),
                                [prefix] if prefix else None, caches=view)
        column = engine.frame_tail(hidden, None, *sampling, *draws(), caches=view)
        for state, value in zip((self.temperature, self.top_p, self.top_k), sampling):
            state[r] = value[0]
        self.column[r] = column[0]
        self.pos[r] = T
        self.window[r] = 0
        row = Row(draws, steps, T, draws.seeds[0], self.eos)
        row.columns.append(column[0].cpu())
        self.slots[r] = row
        return r, row.columns[-1]

    def ended(self, r: int) -> bool:
        """Whether row ``r`` has made its last frame (``<|im_end|>`` or its length limit)."""
        return self.slots[r].ended

    @torch.inference_mode()
    def leave(self, r: int) -> Generated:
        """Free row ``r``; returns what it generated, as ``Engine.generate`` would."""
        row, self.slots[r] = self.slots[r], None
        self.pos[r] = 0  # a free row keeps decoding at slot 0, inside the cache
        return trim(torch.stack(row.columns, dim=-1), row.steps, row.prompt_length, row.seed,
                    True, self.eos)

    # ---------------------------------------------------------------- one frame
    @torch.inference_mode()
    def step(self) -> Tensor:
        """One frame for every row; returns the new columns ``[rows, 1 + K]`` (CPU), appended
        to each busy row that has not ended."""
        engine = self.engine
        self.check_engine()
        fixed = engine.compiled or engine.cuda_graph
        n = self.rows if fixed else max(self.active, default=0) + 1
        draws = [self.draws(row) for row in self.slots[:n]]
        rand = [torch.cat([d[0] for d in draws]), torch.cat([d[1] for d in draws]),
                torch.cat([d[2] for d in draws], dim=1)]
        state = [t[:n] for t in (self.column, self.pos, self.window, self.temperature,
                                 self.top_p, self.top_k)]
        if n < self.rows:  # eager: the step runs on a view of the first n rows
            engine.caches = self.caches.rows(0, n)
        try:
            column, window = engine.step(*state, *rand)
        finally:
            engine.caches = self.caches
        # Out of the step's (possibly CUDA-graph-owned) output buffers, as Engine.decode does.
        self.column[:n], self.window[:n] = column, window
        busy = torch.tensor([row is not None for row in self.slots], device=engine.device)
        self.pos = torch.where(busy, self.pos + 1, self.pos)
        columns = self.column.to("cpu", copy=True)  # never a view of the state
        for row, col in zip(self.slots, columns):
            if row is not None and not row.ended:
                row.columns.append(col.clone())
        return columns

    def draws(self, row: Row | None) -> tuple[Tensor, Tensor, Tensor]:
        if row is not None and not row.ended:
            return row.draws()
        e, c = self.engine, self.engine.config
        zeros = torch.zeros
        return (zeros(1, c.text.vocab_size, dtype=e.dtype, device=e.device),
                zeros(1, c.text.vocab_size, dtype=e.dtype, device=e.device),
                zeros(c.num_codebooks - 1, 1, c.codebook_size, dtype=e.dtype, device=e.device))

    # ---------------------------------------------------------------- the cache
    @torch.inference_mode()
    def fit(self, needed: int) -> None:
        """Grow the cache (to the next bucket; the rows' slots copied over) when a joining
        row needs more than it holds."""
        rows, length = self.caches.shape
        if needed <= length:
            return
        engine = self.engine
        old = self.caches
        engine.release_graph()  # the graph holds the old cache's addresses
        engine.caches = None
        engine.ensure_cache(rows, cache_length(needed, engine.max_context))
        for new, was in zip([*engine.caches.slow, *engine.caches.fast], [*old.slow, *old.fast]):
            n = min(was.k.shape[2], new.k.shape[2])
            new.k[:, :, :n] = was.k[:, :, :n]
            new.v[:, :, :n] = was.v[:, :, :n]
        self.caches = engine.caches

    def check_engine(self) -> None:
        if self.engine.caches is not self.caches:
            raise GenerationError("the engine ran another generation while rows were decoding")
