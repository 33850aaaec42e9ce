"""Sampler parity on the recorded random tensors (exact indices), and RAS on a whole frame."""

import pytest
import torch

from fish_core.loading.checkpoint import load_model
from fish_core.engine.runner import Engine
from fish_core.engine.sampling import logits_to_probs, ras_select, sample


def sampler_cases(golden):
    return [name for name in golden.json("sampler") if name != "ras"]


def test_sampler_cases(golden):
    g, meta = golden.tensors("sampler"), golden.json("sampler")
    cases = sampler_cases(golden)
    assert cases
    for name in cases:
        logits, rand = g[f"{name}.logits"], g[f"{name}.rand"]
        temperature, top_p = g[f"{name}.temperature"], g[f"{name}.top_p"]
        top_k = meta[name]["top_k"]
        probs = logits_to_probs(logits, temperature, top_p, top_k)
        assert probs.dtype == logits.dtype
        want = g[f"{name}.probs"]
        assert torch.equal(probs > 0, want > 0), name
        tol = 1e-6 if logits.dtype == torch.float32 else 1e-2
        assert (probs.float() - want.float()).abs().max() <= tol, name
        index = sample(logits, temperature, top_p, top_k, rand)
        assert int(index) == int(g[f"{name}.index"]) == meta[name]["index"], name
        assert int((probs > 0).sum()) == meta[name]["n_nonzero_probs"], name


def test_sampler_scalars_round_in_model_dtype(golden):
    meta = golden.json("sampler")
    for name in sampler_cases(golden):
        dtype = getattr(torch, meta[name]["dtype"].split(".")[-1])
        assert (torch.tensor(meta[name]["temperature"], dtype=dtype).item() ==
                meta[name]["temperature_as_tensor"])


def test_batched_sampler_equals_rowwise(golden):
    g, meta = golden.tensors("sampler"), golden.json("sampler")
    names = [n for n in sampler_cases(golden) if g[f"{n}.logits"].dtype == torch.float32
             and g[f"{n}.logits"].shape == g[f"{sampler_cases(golden)[0]}.logits"].shape]
    logits = torch.stack([g[f"{n}.logits"] for n in names])
    rand = torch.stack([g[f"{n}.rand"] for n in names])
    temperature = torch.stack([g[f"{n}.temperature"] for n in names])
    top_p = torch.stack([g[f"{n}.top_p"] for n in names])
    top_k = torch.tensor([[meta[n]["top_k"]] for n in names])
    got = sample(logits, temperature, top_p, top_k, rand)
    assert got.tolist() == [int(g[f"{n}.index"]) for n in names]


def test_ras_select_rule():
    normal = torch.tensor([5, 5, 1, 7])
    high = torch.tensor([9, 9, 9, 9])
    window = torch.tensor([[5, 0], [0, 0], [1, 1], [7, 3]])
    got = ras_select(normal, high, window, semantic_lo=4, semantic_hi=8)
    # repeated semantic → high; not repeated → normal; repeated but not semantic → normal
    assert got.tolist() == [9, 5, 1, 9]


@pytest.fixture(scope="module")
def engine(ckpt_dir):
    return Engine(load_model(ckpt_dir, dtype=torch.float32))


@pytest.mark.parametrize("case", ["none", "zero", "hit"])
def test_ras_full_frame(engine, golden, case):
    """One whole frame (slow sample, RAS, 9 fast samples) with the recorded random tensors."""
    g, meta = golden.tensors("sampler"), golden.json("sampler")["ras"]
    prompt = g["ras.prompt"]
    engine.ensure_cache(1, prompt.shape[-1] + 1)
    window = None if case == "none" else g[f"ras.prev_{case}"][0].long()[None]
    dtype = engine.dtype
    temperature = torch.tensor([[meta["temperature"]]], dtype=dtype)
    top_p = torch.tensor([[meta["top_p"]]], dtype=dtype)
    top_k = torch.tensor([[meta["top_k"]]])
    # rand0: slow sample, rand1: RAS high-temperature sample, then one per residual codebook
    residual = engine.model.config.num_codebooks - 1
    fast = torch.stack([g[f"ras.rand{i}"] for i in range(2, 2 + residual)])[:, None]
    with torch.inference_mode():
        hidden = engine.prefill(prompt[None], torch.tensor([prompt.shape[-1]]))
        column = engine.frame_tail(hidden, window, temperature, top_p, top_k,
                                   g["ras.rand0"][None], g["ras.rand1"][None], fast)
    want = g[f"ras.out_prev_{case}"].long()
    assert column[0].tolist() == want.tolist() == meta[f"out_prev_{case}"]


def test_restricted_head_equals_masked_full_logits(engine, golden):
    """Logits are computed only for <|im_end|> and the semantic rows; they equal the
    reference's masked full-vocabulary logits there, and the bias leaves 0 probability
    everywhere else, so sampling from either gives the same token."""
    g = golden.tensors("sampler")
    bias = g["ras.semantic_logit_bias"]
    allowed = torch.isfinite(bias).nonzero().flatten()
    assert allowed.tolist() == engine.allowed_ids.tolist()
    hidden = torch.randn(4, engine.model.config.text.dim,
                         generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        full = engine.model.vocab_logits(hidden) + bias
        mine = torch.nn.functional.linear(hidden, engine.head)
    assert torch.allclose(full[:, allowed], mine, atol=1e-5)
    rand = torch.rand(4, full.shape[-1], generator=torch.Generator().manual_seed(1))
    t, p = torch.full((4, 1), 0.9), torch.full((4, 1), 0.95)
    ref = sample(full, t, p, 30, rand)
    ours = allowed[sample(mine, t, p, 30, rand[:, allowed])]
    assert torch.equal(ref, ours)
