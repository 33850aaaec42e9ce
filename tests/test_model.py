"""Slow and fast AR parity with the reference (fp32, ≤1e-4 max-abs), and the real-size layout."""

import pytest
import torch

from fish_core.loading.checkpoint import build_meta, load_model, to_hf
from fish_core.engine.config import ModelConfig
from fish_core.engine.runner import Engine
from fish_core.engine.layers import rope_table

ATOL = 1e-4


@pytest.fixture(scope="module")
def model(ckpt_dir):
    return load_model(ckpt_dir, dtype=torch.float32)


def close(got, want, atol=ATOL):
    diff = (got.float() - want.float()).abs().max().item()
    assert diff <= atol, f"max-abs {diff:.3g} > {atol}"


@torch.inference_mode()
def test_prefill_embedding_layers_hidden_logits(model, golden):
    g = golden.tensors("slow_ar")
    prompt = g["prompt"][None]
    T = prompt.shape[-1]
    x = model.embed(prompt)
    close(x[0], g["embed_out"])
    pos = torch.arange(T)[None]
    rope = model.rope[pos]
    for i, layer in enumerate(model.layers):
        x = layer(x, rope, pos, None)
        close(x[0], g[f"layer{i}_out"])
    hidden = model.norm(x)[0]
    close(hidden, g["prefill_all_hidden"])
    close(model.vocab_logits(hidden), g["prefill_all_logits"])
    close(hidden[-1], g["prefill_last_hidden"])
    close(model.vocab_logits(hidden[-1]), g["prefill_last_logits"])


@torch.inference_mode()
def test_every_decode_step_with_kv_cache(model, golden):
    g = golden.tensors("slow_ar")
    engine = Engine(model)
    prompt = g["prompt"]
    steps = g["decode_step_inputs"].shape[0]
    engine.caches = model.make_caches(1, prompt.shape[-1] + steps + 1)
    hidden = engine.prefill(prompt[None], torch.tensor([prompt.shape[-1]]))
    close(hidden[0], g["prefill_last_hidden"])
    for i in range(steps):
        column = g["decode_step_inputs"][i].long()[None]
        pos = g["decode_step_input_pos"][i].long().reshape(1)
        hidden = engine.slow_step(column, pos)
        close(hidden[0], g["decode_step_hidden"][i])
        close(model.vocab_logits(hidden[0]), g["decode_step_logits"][i])


@torch.inference_mode()
def teacher_forced_fast_logits(model, hidden, codes):
    """Run the fast AR the way a frame does (hidden + c0 together, then one code at a time)."""
    caches = model.make_caches(1, 8)
    x = torch.stack([hidden, model.fast_embeddings(codes[0])])[None]
    rows = [model.fast_forward(x, 0, caches)[0]]
    for k in range(1, model.config.num_codebooks - 1):
        x = model.fast_embeddings(codes[k]).reshape(1, 1, -1)
        rows.append(model.fast_forward(x, k + 1, caches)[0])
    return torch.cat(rows)  # [K, C]: row k is the logit vector for codebook k (row 0 unused)


def test_fast_ar_teacher_forced(model, golden):
    g = golden.tensors("fast_ar")
    cases = sorted({k.split(".")[0] for k in g})
    assert cases
    for case in cases:
        got = teacher_forced_fast_logits(model, g[f"{case}.hidden"], g[f"{case}.codes"])
        close(got, g[f"{case}.logits"])


def test_fast_ar_every_frame_of_the_greedy_run(model, golden):
    g = golden.tensors("slow_ar")
    columns = golden.tensors("generation")["b_clone.batch0.raw_new_columns"]
    inputs, logits = g["greedy_fast_inputs_per_frame"], g["greedy_fast_logits_per_frame"]
    for f in range(inputs.shape[0]):
        codes = columns[1:, f]
        with torch.inference_mode():
            fed = model.fast_embeddings(codes[:-1])
        close(fed, inputs[f, 1:])
        got = teacher_forced_fast_logits(model, inputs[f, 0], codes)
        close(got, logits[f])


def test_rope_tables_are_bf16_rounded(model):
    t = model.config.text
    table = rope_table(64, t.head_dim, t.rope_base)
    assert torch.equal(table, table.to(torch.bfloat16).float())
    exact = torch.outer(torch.arange(64.0), 1.0 / t.rope_base ** (
        torch.arange(0, t.head_dim, 2).float() / t.head_dim))
    assert (table[..., 0] - exact.cos()).abs().max() > 0  # really rounded


def test_real_model_matches_the_manifest(fixtures):
    """The real S2-Pro built on the meta device has exactly the real checkpoint's tensors."""
    import json

    manifest = json.loads((fixtures / "real-s2-manifest.json").read_text())["llm"]
    config = ModelConfig.from_file(fixtures / "real-s2-config.json")
    model = build_meta(config, torch.bfloat16)
    mine = {to_hf(n): (list(p.shape), "BF16" if p.dtype == torch.bfloat16 else str(p.dtype))
            for n, p in model.named_parameters()}
    theirs = {t["key"]: (t["shape"], t["dtype"]) for t in manifest["tensors"]}
    assert mine == theirs
    assert len(mine) == manifest["n_tensors"] == 358
    assert sum(p.numel() for p in model.parameters()) == manifest["n_params"]


def test_bf16_model_tracks_fp32(ckpt_dir, model, golden):
    g = golden.tensors("slow_ar")
    bf16 = load_model(ckpt_dir, dtype=torch.bfloat16)
    prompt = g["prompt"][None]
    pos = torch.arange(prompt.shape[-1])[None]
    with torch.inference_mode():
        hidden = bf16.slow_forward(prompt, pos, None)[0, -1]
        logits = bf16.vocab_logits(hidden)
    assert logits.dtype == torch.bfloat16
    # bf16 keeps ~3 significant digits; the logits stay within a few percent of their scale.
    scale = g["prefill_last_logits"].abs().max()
    assert (logits.float() - g["prefill_last_logits"]).abs().max() < 0.05 * scale
