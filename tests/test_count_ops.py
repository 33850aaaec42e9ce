"""``bench/count_ops.py``: kernels a decode frame and int4 quantize kernels, counted on the CPU
(each non-view ATen op or ``torch.ops.sailfish`` op is about one CUDA kernel in eager and
CUDA-graph mode). Counts, not timings: a regression in the launch-bound part of a GPU frame
shows up here."""

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import count_ops  # noqa: E402

from fish_core.engine.runner import Engine  # noqa: E402
from fish_core.loading.checkpoint import join_feed_forwards  # noqa: E402

FRAME_KERNELS = 900  # issue 46: from ~4,460 (counted as here) to at most this
INT4_QUANTIZE_KERNELS = 10_000  # issue 46: from ~5.1 M (256 KiB chunks on the GPU)


def test_a_decode_frame_of_s2_pro_depth_is_at_most_900_kernels():
    """The fixture's config widened to S2-Pro's 36 + 4 layers (the count does not depend on
    the widths), bf16, as CUDA runs it: the fused ops and w1/w3 joined."""
    config = count_ops.widened_config()
    slow, fast = count_ops.s2_pro_depth()
    assert (config.text.n_layer, config.fast.n_layer) == (slow, fast)
    model = count_ops.random_model(config, torch.bfloat16)
    assert join_feed_forwards(model) == slow + fast
    engine = Engine(model, cuda_graph=False)
    counts = count_ops.frame_counts(engine, count_ops.prompt_for(config, 32))
    frame = counts["decode_frame"]
    assert 0 < frame["ops"] <= FRAME_KERNELS, frame
    # the matrix products: 4 a layer pass (wqkv, wo, w13, w2) over the slow layers and the
    # K - 1 fast passes, and the heads: the main token's and K - 1 codebooks'
    K = config.num_codebooks
    products = sum(n for name, n in frame["top"].items() if name in ("mm", "addmm", "bmm"))
    assert products == 4 * (slow + (K - 1) * fast) + K, frame["top"]
    assert counts["prefill"]["ops"] < counts["join"]["ops"]
    # padded to its bucket (as CUDA runs it, where a graph per bucket replays it): the same
    # kernels, and the padding of the host's prompt
    assert counts["prefill"]["ops"] <= counts["prefill_bucketed"]["ops"] <= (
        counts["prefill"]["ops"] + 1), (counts["prefill"], counts["prefill_bucketed"])


def test_int4_quantize_of_s2_pro_is_at_most_10000_kernels():
    """int4 of every S2-Pro Linear (the fast AR int8) on the real shapes, on meta tensors."""
    int4 = count_ops.quantize_counts("int4")
    slow, fast = count_ops.s2_pro_depth()  # 5 Linears a layer; the fast AR and its head int8
    assert int4["layers"] == {"int4": 5 * slow, "int8": 5 * fast + 1}
    assert 0 < int4["ops"] <= INT4_QUANTIZE_KERNELS, int4


JOIN_SYNCS = 1  # issue 46: from 8 (9 into a running batch) to the first columns' read


def test_a_join_waits_for_the_device_only_to_read_its_first_columns():
    """A join (prefill, first frame, first columns read) into an empty batch and into a running
    one (frames held unread) makes one host sync: the read of its first columns
    (``RowBatch.place``). Its prompt, positions and settings reach the device without one."""
    config = count_ops.widened_config((2, 1))
    model = count_ops.random_model(config, torch.float32)
    syncs = count_ops.join_syncs(model, count_ops.prompt_for(config, 24))
    assert syncs["join"] == syncs["join_running"] == JOIN_SYNCS, syncs
    assert syncs["join_ops"] == syncs["join_running_ops"] == {"to": 1}, syncs


def test_the_sync_counter_sees_blocking_copies_and_value_reads():
    """What ``count_ops`` counts as a host sync, on the CPU: a blocking ``.to(device)`` or
    ``.cpu()``, ``torch.tensor(..., device=...)``, ``item``/``bool``/``nonzero``; not a
    ``non_blocking`` copy nor a tensor made on the host."""
    x = torch.arange(4)
    with torch.inference_mode(), count_ops.counting_syncs() as counter:
        x.cpu(), x.to("cpu", non_blocking=True), torch.tensor([1, 2])
        torch.tensor([1, 2], device="cpu"), x[1].item(), bool(x[1]), x.nonzero()
    assert counter.syncs == {"to": 1, "tensor(device=)": 1, "item": 1, "is_nonzero": 1,
                             "nonzero": 1}, counter.syncs
