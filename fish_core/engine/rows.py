"""The one decode loop: rows that requests join and leave at frame boundaries.

Every generation decodes here. ``RowBatch`` keeps a fixed number of rows of the engine's KV
cache (``runner.Engine``, the floor below, owns the cache and runs a frame: compiled, CUDA graph,
fallbacks)
and decides what runs: which rows are busy, at which positions, with which sampling settings
and random numbers, and what each row has generated.

* A static batch is rows that join together and decode to their ends (``run_to_end``, the
  one such loop): ``generate`` below, and the takes of a request (``local.driver.run_round``).
* Continuous batching is rows that join whenever one is free and leave as soon as they end
  (``local.driver.JobRows``, the HTTP scheduler's default; its static batching is an
  admission rule there: join only when no row is busy).

Prompts that join in the same frame are prefilled together (``Engine.prefill_rows``: one
batched run for those with a voice prefix, after it, and one for those without) and draw their
first column there; from the next frame on they decode with the others.

A compiled step or a CUDA graph decodes all rows every frame, a free row computing on stale
data that nobody reads: one row count means one shape, never a recompile or re-capture as
requests come and go, and the price, a few idle rows, is small on a GPU, where a frame is bound
by reading the weights once whatever the row count. An eager step (the CPU default) has no shape
to keep, and there idle rows cost compute, so it decodes only rows ``0 .. last busy`` (a joining
request takes the lowest free rows, which keeps that prefix short). The cache length is a
bucket (``cache_length``): sized to the prompts that join an empty batch, grown (rows copied
over) when a prompt joining a running one needs more.

Exactness: rows never mix (attention, sampling and every layer act per row). Each row draws its
random numbers from its own generator in the reference's order (``Draws``) and stops on its own
``<|im_end|>`` or length limit, so its codes are those of a one-prompt run with the same seed,
whenever it joins and whoever else is in the batch (bit for bit where a kernel gives a row the
same result whatever the batch around it, as the CPU kernels do on the test fixtures,
``tests/test_rows.py``; a GPU library may pick another kernel for another batch size and
round differently).

Host syncs: the frames' columns are copied to the host when a caller reads them (``step()``, as
a streaming job and ``on_column`` do), else every ``Engine.check_every`` frames (each frame on a
CPU, every 8 on CUDA); a row's ``<|im_end|>`` is noticed then, and the frames it made after it
are dropped. A join waits for the device once: when it reads its first columns (``place``, for
the caller and the ``<|im_end|>`` check). Its prompts, positions and settings go to the device
without a wait (``device.to_device``), and frames held unread stay held (``bench/count_ops.py``
counts a join's syncs).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import Tensor

from ..params import (Cancelled, Generated, GenerationError, SamplingParams, check_seed,
                      random_seed)
from .device import to_device
from .runner import Engine, cache_length
from .sampling import RAS_WINDOW


def row_bucket(n: int, rows: int) -> int:
    """The rows a fixed-shape frame decodes when rows ``0 .. n - 1`` are needed: the next power
    of two, at most ``rows`` (so a batch of 8 rows keeps at most 4 graphs: 1, 2, 4, 8)."""
    return min(rows, 1 << max(n - 1, 0).bit_length())


@dataclass
class Row:
    """One request in a row: what it may make and what it made."""

    steps: int  # frames it may make
    prompt_length: int
    seed: int | None
    stop_on_eos: bool
    columns: list[Tensor] = field(default_factory=list)  # [1 + K] each, CPU: the frames read
    made: int = 1  # frames made on the device (the first by the prefill)
    stopped: bool = False  # its <|im_end|> was read

    @property
    def ended(self) -> bool:
        return self.stopped or self.made >= self.steps


class Draws:
    """The random numbers of the rows one generator drives, each frame in the reference's order
    and dtype: ``[V]`` normal, ``[V]`` high-temperature, then ``[C]`` per fast codebook. A row
    with its own generator draws ``[1, n]``, exactly as a one-prompt run does; rows sharing one
    (consecutive rows) draw ``[rows, n]`` together, every frame while any of them runs.

    A frame's numbers are ONE ``torch.rand`` launch per generator (``rand_views``: a row's
    numbers lie side by side in one buffer). On the CPU one draw of ``2V + (K - 1)C`` numbers
    gives bit for bit the numbers of the reference's 11 draws, so the seeded goldens hold; on
    CUDA the Philox offsets of one launch differ from those of 11, so a seed gives other
    (equally random) numbers there than the reference's eager loop (no golden is on CUDA)."""

    def __init__(self, generator: torch.Generator, rows: slice, joined: slice):
        self.generator = generator
        self.rows = rows  # its rows of the batch
        self.joined = joined  # the same rows among the prompts of their join

    def __call__(self, rand: Tensor, vocab: int, codebook: int) -> None:
        """Draw into ``rand [n, 2V + (K - 1)C]``, its rows of a frame's buffer (``rand_views``).
        One row: one draw straight into its numbers. Rows sharing the generator: one draw in
        the reference's order (all rows' normal, then high, then each codebook), copied into
        the rows' views."""
        if rand.shape[0] == 1:
            torch.rand(rand.shape, generator=self.generator, out=rand)
            return
        drawn = torch.rand(rand.numel(), generator=self.generator, dtype=rand.dtype,
                           device=rand.device)
        for view in rand_views(rand, vocab, codebook):
            view.copy_(drawn[:view.numel()].view(view.shape))
            drawn = drawn[view.numel():]


def rand_width(config) -> int:
    """The random numbers of one row's frame: ``[V]`` normal, ``[V]`` high, ``[C]`` per fast
    codebook."""
    return 2 * config.text.vocab_size + (config.num_codebooks - 1) * config.codebook_size


def rand_views(rand: Tensor, vocab: int, codebook: int) -> tuple[Tensor, Tensor, Tensor]:
    """A frame's random numbers ``rand [n, 2V + (K - 1)C]`` (row by row) as what the frame
    reads: ``[n, V]`` normal, ``[n, V]`` high-temperature, ``[K - 1, n, C]`` fast (views)."""
    fast = rand[:, 2 * vocab:].unflatten(1, (-1, codebook)).transpose(0, 1)
    return rand[:, :vocab], rand[:, vocab:2 * vocab], fast


def make_draws(device, rows: list[int], seed, seeds, generator) -> tuple[list[Draws], list]:
    """The generators of prompts joining ``rows``, and each prompt's seed. ``seeds``: one per
    prompt, each row its own generator; ``seed`` or a ready ``generator``: one for them all;
    none: a random seed."""
    def new(s):
        return torch.Generator(device).manual_seed(s)

    if seeds is not None:
        if seed is not None or generator is not None:
            raise GenerationError("give either seeds (one per prompt) or seed/generator, "
                                  "not both")
        seeds = list(seeds)
        if len(seeds) != len(rows):
            raise GenerationError(f"seeds must hold one seed per prompt: got {len(seeds)} "
                                  f"for {len(rows)} prompts")
        return [Draws(new(s), slice(r, r + 1), slice(i, i + 1))
                for i, (s, r) in enumerate(zip(seeds, rows))], seeds
    if generator is None:
        seed = random_seed() if seed is None else seed
        generator = new(seed)
    if rows != list(range(rows[0], rows[0] + len(rows))):
        raise GenerationError("prompts sharing one generator need consecutive free rows")
    return ([Draws(generator, slice(rows[0], rows[-1] + 1), slice(0, len(rows)))],
            [seed] * len(rows))


def owning(method):
    """A ``RowBatch`` method that runs holding its engine's lock: a decode on another thread
    (a stream left open, a second stream on the same model) waits for the frame or prefill in
    progress, then finds the caches taken and stops (``check``) instead of running into them."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self.engine.lock:
            return method(self, *args, **kwargs)
    return run


class RowBatch:
    """``rows`` decode rows on ``engine``. The engine serves one decode at a time: a newer
    ``RowBatch`` on it (or ``Engine.release``) takes the cache over, and this one then refuses
    to go on."""

    @torch.inference_mode()
    def __init__(self, engine: Engine, rows: int):
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ValueError(f"rows must be an integer >= 1, got {rows!r}")
        engine.follow_model()
        self.engine, self.rows = engine, rows
        with engine.lock:
            self.ticket = engine.claim()
        self.eos = engine.config.eos_token_id
        self.slots: list[Row | None] = [None] * rows
        self.draws: list[Draws] = []
        self.pending: list[tuple[Tensor, list[int]]] = []  # frames not read yet, their rows
        c, d, dtype = engine.config, engine.device, engine.dtype
        self.column = torch.zeros(rows, 1 + c.num_codebooks, dtype=torch.long, device=d)
        self.pos = torch.zeros(rows, dtype=torch.long, device=d)
        self.window = torch.zeros(rows, RAS_WINDOW, dtype=torch.long, device=d)
        self.advance = torch.zeros(rows, dtype=torch.bool, device=d)  # pos moves on each frame
        # Free rows sample with harmless settings; their results are never read.
        self.temperature = torch.ones(rows, 1, dtype=dtype, device=d)
        self.top_p = torch.ones(rows, 1, dtype=dtype, device=d)
        self.top_k = torch.ones(rows, 1, dtype=torch.long, device=d)
        # Every frame's random numbers, drawn in place (a free row's are stale: never read):
        # one buffer, a row's numbers side by side (``Draws``), read through fixed views.
        self.rand = torch.zeros(rows, rand_width(c), dtype=dtype, device=d)
        self.rand_main, self.rand_high, self.rand_fast = rand_views(
            self.rand, c.text.vocab_size, c.codebook_size)

    # ---------------------------------------------------------------- rows
    @property
    def free(self) -> int:
        return self.slots.count(None)

    @property
    def active(self) -> list[int]:
        return [r for r, row in enumerate(self.slots) if row is not None]

    def ended(self, r: int) -> bool:
        """Whether row ``r`` has made its last frame (``<|im_end|>`` read, or its limit)."""
        return self.slots[r].ended

    def stopped(self, r: int) -> bool:
        """Whether row ``r``'s ``<|im_end|>`` has been read."""
        return self.slots[r].stopped

    def join(self, prompt: Tensor, params: SamplingParams, seed: int, prefix: int = 0
             ) -> tuple[int, Tensor]:
        """Prefill ``prompt [1 + K, T]`` into a free row; returns the row and its first column
        ``[1 + K]`` (CPU)."""
        rows, columns = self.join_many([prompt], [params], [seed], [prefix])
        return rows[0], columns[0]

    @owning
    @torch.inference_mode()
    def join_many(self, prompts: Sequence[Tensor],
                  params: SamplingParams | Sequence[SamplingParams],
                  seeds: Sequence[int] | None = None, prefixes: Sequence[int] | None = None, *,
                  seed: int | None = None, generator: torch.Generator | None = None,
                  stop_on_eos: bool = True) -> tuple[list[int], Tensor]:
        """Prefill the prompts (each ``[1 + K, T]``) together into the lowest free rows; returns
        the rows and their first columns ``[B, 1 + K]`` (CPU). ``seeds``/``seed``/``generator``,
        ``prefixes`` (0: none) and ``stop_on_eos`` as in ``generate``."""
        engine = self.engine
        self.check()
        prompts, params = check_requests(engine, prompts, params)
        check_prefixes(prefixes, prompts)
        rows = self.free_rows(len(prompts))
        draws, row_seeds = make_draws(engine.device, rows, seed, seeds, generator)
        lengths = [p.shape[1] for p in prompts]
        steps = [min(p.max_new_tokens, engine.max_context - T) for p, T in zip(params, lengths)]
        self.fit(max(lengths) + max(steps))
        sampling = self.set_sampling(rows, params)
        column = engine.prefill_rows(pad(prompts), lengths, rows, prefixes, *sampling,
                                     *first_draws(engine, draws, len(prompts)))
        joined = [Row(n, T, s, stop_on_eos) for n, T, s in zip(steps, lengths, row_seeds)]
        host = self.place(rows, column, joined)
        self.draws += draws
        return rows, host

    def set_sampling(self, rows: list[int], params: list[SamplingParams]
                     ) -> tuple[Tensor, Tensor, Tensor]:
        """Put the joining rows' settings in the batch's state; returns them (``[B, 1]`` each,
        ``sampling_tensors``)."""
        at = index(rows, self.engine.device)
        sampling = sampling_tensors(self.engine, params)
        for state, value in zip((self.temperature, self.top_p, self.top_k), sampling):
            state[at] = value
        return sampling

    def free_rows(self, n: int) -> list[int]:
        """The lowest ``n`` free rows (a joining request keeps the busy prefix short)."""
        free = [r for r, row in enumerate(self.slots) if row is None]
        if len(free) < n:
            raise GenerationError(f"no free row in the decode batch for {n} prompt(s) "
                                  f"({len(free)} free)")
        return free[:n]

    def place(self, rows: list[int], column: Tensor, joined: list[Row]) -> Tensor:
        """Put the joining rows, their first columns ``[B, 1 + K]`` drawn by the prefill, in
        the batch's state; returns those columns (CPU)."""
        d = self.engine.device
        at = index(rows, d)
        self.column[at] = column
        self.pos[at] = to_device(torch.tensor([row.prompt_length for row in joined]), d)
        self.window[at] = 0
        host = column.cpu()
        eos = (host[:, 0] == self.eos).tolist()
        for b, (r, row) in enumerate(zip(rows, joined)):
            row.columns.append(host[b])
            row.stopped = row.stop_on_eos and eos[b]
            self.slots[r] = row
        self.advance[at] = to_device(torch.tensor([not row.ended for row in joined]), d)
        return host

    @torch.inference_mode()
    def leave(self, r: int) -> Generated:
        """Free row ``r``; returns what it generated (cut at its ``<|im_end|>``)."""
        self.read()
        row, self.slots[r] = self.slots[r], None
        self.pos[r] = 0  # a free row keeps decoding at slot 0, inside the cache
        self.advance[r] = False
        self.draws = [d for d in self.draws if any(self.slots[d.rows])]  # rows still in
        return trim(torch.stack(row.columns, dim=-1), row.steps, row.prompt_length, row.seed,
                    row.stop_on_eos, self.eos)

    # ---------------------------------------------------------------- one frame
    @owning
    @torch.inference_mode()
    def step(self, read: bool = True) -> Tensor | None:
        """One frame for every busy row. Each row that has not ended gets the new column (once
        read). With ``read`` the frame is copied to the host at once and its columns returned,
        ``[n, 1 + K]`` for rows ``0 .. n - 1`` (every busy row among them); otherwise the
        frames are read every ``Engine.check_every`` frames and None is returned."""
        engine = self.engine
        self.check()
        busy = self.active
        n = busy[-1] + 1 if busy else 1
        if engine.fixed_rows:  # one shape (a graph, a compiled kernel) per bucket of rows
            n = row_bucket(n, self.rows)
        running = [r for r in busy if not self.slots[r].ended]
        self.draw()
        column, window = engine.frame(n, self.column[:n], self.pos[:n], self.window[:n],
                                      self.temperature[:n], self.top_p[:n], self.top_k[:n],
                                      self.rand_main[:n], self.rand_high[:n],
                                      self.rand_fast[:, :n])
        self.column[:n] = column
        self.window[:n] = window
        self.pos += self.advance
        self.count_frame(running)
        return self.hold(column, running, read)

    def hold(self, column: Tensor, running: list[int], read: bool) -> Tensor | None:
        """Keep a frame's columns ``[n, 1 + K]`` (of the ``running`` rows) to be read; held
        frames of another row count are read first. Read them now with ``read`` (returned), or
        once ``Engine.check_every`` frames are held (None returned, as when they wait)."""
        if self.pending and self.pending[-1][0].shape[0] != column.shape[0]:
            self.read()
        self.pending.append((column, running))
        if read or len(self.pending) >= self.engine.check_every:
            last = self.read()
            return last if read else None
        return None

    def draw(self) -> None:
        """This frame's random numbers, in place, for the generators of rows still running."""
        c = self.engine.config
        for d in self.draws:
            if any(row is not None and not row.ended for row in self.slots[d.rows]):
                d(self.rand[d.rows], c.text.vocab_size, c.codebook_size)

    def count_frame(self, running: list[int]) -> None:
        """Rows ``running`` made a frame; one that reached its limit stops moving on."""
        for r in running:
            row = self.slots[r]
            row.made += 1
            if row.made >= row.steps:
                self.advance[r] = False

    def read(self) -> Tensor | None:
        """Copy the frames made since the last read to the host (one copy) and hand each row
        that made them its columns, noticing ``<|im_end|>``; returns the last frame's columns
        (CPU), or None when nothing was pending."""
        if not self.pending:
            return None
        frames = [column for column, _ in self.pending]
        host = (frames[0][None] if len(frames) == 1 else torch.stack(frames)).cpu()
        eos = (host[:, :, 0] == self.eos).tolist()
        for t, (_, rows) in enumerate(self.pending):
            for r in rows:
                row = self.slots[r]
                if row.stopped:
                    continue
                row.columns.append(host[t, r])
                if row.stop_on_eos and eos[t][r]:
                    row.stopped = True
                    self.advance[r] = False
        self.pending.clear()
        return host[-1]

    # ---------------------------------------------------------------- the cache
    def fit(self, needed: int) -> None:
        """Size the engine's cache for a join needing ``needed`` slots: to the joining prompts'
        bucket when no row is busy, else grown (the rows' slots copied over) when it holds
        fewer."""
        engine = self.engine
        length = cache_length(needed, engine.max_context)
        if not self.active:
            engine.ensure_cache(self.rows, length)
        elif needed > engine.caches.shape[1]:
            engine.ensure_cache(self.rows, length, keep=True)

    def check(self) -> None:
        if not self.engine.current(self.ticket):
            raise GenerationError("another decode started on this engine (or its caches were "
                                  "released) while these rows were decoding")


def first_draws(engine: Engine, draws: list[Draws], n: int) -> tuple[Tensor, Tensor, Tensor]:
    """The random numbers of ``n`` joining prompts' first frames (drawn by the prefill):
    ``[n, V]`` normal, ``[n, V]`` high-temperature, ``[K - 1, n, C]`` fast (``rand_views``)."""
    c = engine.config
    rand = torch.empty(n, rand_width(c), dtype=engine.dtype, device=engine.device)
    for d in draws:
        d(rand[d.joined], c.text.vocab_size, c.codebook_size)
    return rand_views(rand, c.text.vocab_size, c.codebook_size)


def check_settings(params, seed, seeds) -> None:
    """The sampling settings and seeds of a direct ``generate`` call, checked once; the
    synthesizers' jobs come from a checked ``speech.request.Request`` and are not checked
    again (``join_many`` takes them as they are)."""
    for p in [params] if isinstance(params, SamplingParams) else params:
        p.validate()
    if seed is not None:
        check_seed(seed)
    for i, s in enumerate(seeds or ()):
        check_seed(s, f"seeds[{i}]")


def check_requests(engine: Engine, prompts: Tensor | Sequence[Tensor],
                   params: SamplingParams | Sequence[SamplingParams]
                   ) -> tuple[list[Tensor], list[SamplingParams]]:
    """Validate the prompts (each ``[1 + K, T]``, shorter than the engine's context) and pair
    them with their SamplingParams (one for all, or one each)."""
    prompts = prompt_list(prompts)
    params = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
    if len(params) != len(prompts):
        raise GenerationError(f"got {len(params)} SamplingParams for {len(prompts)} prompts")
    width = 1 + engine.config.num_codebooks
    for i, p in enumerate(prompts):
        if p.dim() != 2 or p.shape[0] != width or p.shape[1] == 0:
            raise GenerationError(f"prompt {i} must be a [{width}, T] integer tensor, "
                                  f"got {tuple(p.shape)}")
    longest = max(p.shape[1] for p in prompts)
    if longest >= engine.max_context:
        raise GenerationError(f"prompt is too long: {longest} tokens, the context "
                              f"length is {engine.max_context}")
    return prompts, params


def prompt_list(prompts: Tensor | Sequence[Tensor]) -> list[Tensor]:
    """One prompt or several, as a list of at least one."""
    prompts = [prompts] if isinstance(prompts, Tensor) else list(prompts)
    if not prompts:
        raise GenerationError("prompts must hold at least one prompt")
    return prompts


def check_prefixes(prefixes: Sequence[int] | None, prompts: list[Tensor]) -> None:
    """``prefixes``, when given, holds one voice-prefix length per prompt."""
    if prefixes is not None and len(prefixes) != len(prompts):
        raise GenerationError(f"prefixes must hold one length per prompt: got "
                              f"{len(prefixes)} for {len(prompts)} prompts")


def sampling_tensors(engine: Engine, params: list[SamplingParams]
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """temperature and top_p ``[B, 1]`` in the model dtype, top_k ``[B, 1]`` long."""
    def column(name, dtype):
        return to_device(torch.tensor([[getattr(p, name)] for p in params], dtype=dtype),
                         engine.device)

    return (column("temperature", engine.dtype), column("top_p", engine.dtype),
            column("top_k", torch.long))


def index(rows: list[int], device) -> slice | Tensor:
    """``rows`` as an index of the batch's state: a slice when consecutive."""
    if rows == list(range(rows[0], rows[0] + len(rows))):
        return slice(rows[0], rows[0] + len(rows))
    return to_device(torch.tensor(rows), device)


def pad(prompts: list[Tensor]) -> Tensor:
    """Right-pad the prompts into one batch ``[B, 1 + K, T]`` (on the CPU)."""
    T = max(p.shape[1] for p in prompts)
    batch = torch.zeros(len(prompts), prompts[0].shape[0], T, dtype=torch.long)
    for i, p in enumerate(prompts):
        batch[i, :, : p.shape[1]] = p
    return batch


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


@torch.inference_mode()
def generate(engine: Engine, prompts: Tensor | Sequence[Tensor],
             params: SamplingParams | Sequence[SamplingParams] = SamplingParams(), *,
             seed: int | None = None, seeds: Sequence[int] | None = None,
             generator: torch.Generator | None = None,
             on_frame: Callable[[int, int], None] | None = None,
             on_column: Callable[[Tensor], None] | None = None,
             cancel: Callable[[], bool] | None = None,
             stop_on_eos: bool = True,
             prefixes: Sequence[int] | None = None) -> list[Generated]:
    """One prompt ``[1 + K, T]`` or several, joining one ``RowBatch`` together and decoding
    until each has ended (``decode_rows``).

    Randomness: ``seed`` (or a ready ``generator``) drives the whole batch; ``seeds`` (one per
    prompt) gives each row its own generator, so row b draws exactly what a one-prompt run with
    ``seed=seeds[b]`` draws; with none of them, a random seed. ``on_frame``, ``on_column`` and
    ``cancel`` as in ``decode_rows``. ``stop_on_eos=False`` runs every row to its
    ``max_new_tokens`` (for benchmarks). ``prefixes``: each prompt's voice-prefix length
    (``Engine.prefill``), whose KV is reused from, or kept in, the prefix cache."""
    prompts = prompt_list(prompts)
    check_settings(params, seed, seeds)  # the engine's own door (a Request came checked)
    batch = RowBatch(engine, len(prompts))
    rows, column = batch.join_many(prompts, params, seeds, prefixes, seed=seed,
                                   generator=generator, stop_on_eos=stop_on_eos)
    decode_rows(batch, rows, column, on_frame, on_column, cancel)
    return [batch.leave(r) for r in rows]


def decode_rows(batch: RowBatch, rows: list[int], column: Tensor,
                on_frame: Callable[[int, int], None] | None,
                on_column: Callable[[Tensor], None] | None,
                cancel: Callable[[], bool] | None) -> None:
    """Decode the joined ``rows`` (first columns ``column``) until each has ended
    (``run_to_end``). ``on_frame(done, total)`` reports progress; ``on_column(column)`` receives
    each new column ``[B, 1 + K]`` (CPU, the first one from the prefill; one host sync per
    frame) for streaming — a row's columns past its own end are dropped from its result.
    ``cancel()`` returning True raises Cancelled."""
    show = on_column or (lambda column: None)
    show(column)
    total = max(batch.slots[r].steps for r in rows)
    run_to_end(lambda: show(batch.step(read=on_column is not None)),
               lambda: not all(batch.ended(r) for r in rows), total, on_frame, cancel)


def run_to_end(step: Callable[[], object], running: Callable[[], bool], total: int,
               on_frame: Callable[[int, int], None] | None = None,
               cancel: Callable[[], bool] | None = None) -> None:
    """The one "run to the end" of a static batch (rows that joined together, their first
    frame made by the prefill): ``step()``, one frame, while ``running()``. ``on_frame(done,
    total)`` reports each frame made, before the next; ``cancel()`` returning True raises
    Cancelled within a frame. Its two uses: ``generate`` (prompts) and the driver's
    ``run_round`` (jobs' text batches)."""
    done = 1
    while True:
        report(on_frame, cancel, done, total)
        if not running():
            return
        step()
        done += 1


def report(on_frame, cancel, done: int, total: int) -> None:
    if on_frame is not None:
        on_frame(done, total)
    if cancel is not None and cancel():
        raise Cancelled(f"generation cancelled after {done} of up to {total} frames")
