"""hearing/text_model.py: positions, rotary tables and every decoder layer against the
reference's activations (golden/hidden/en_short__aligner)."""

import torch

from fish_core.hearing.checkpoint import load_thinker
from fish_core.hearing.config import HearingConfig
from fish_core.hearing.text_model import attention_mask, positions_from_mask

# fp32, measured ~1e-6 on residuals of magnitude up to ~7 (see test_hearing_audio_encoder)
ATOL = 1e-4


def test_layers_match_the_reference(aligner_fixtures, aligner_golden):
    hidden = aligner_golden.tensors("hidden/en_short__aligner")
    case = aligner_golden.tensors("aligner/en_short")
    model = load_thinker(aligner_fixtures / "tiny-aligner", "cpu", "fp32")
    positions = positions_from_mask(case["attention_mask"])
    assert torch.equal(positions, hidden["text.position_ids"])
    assert torch.equal(positions, case["position_ids"])
    cos, sin = model.model.rope(positions, torch.float32)
    torch.testing.assert_close(cos, hidden["text.rope_cos"], rtol=0, atol=1e-6)
    torch.testing.assert_close(sin, hidden["text.rope_sin"], rtol=0, atol=1e-6)
    layers = []
    with torch.inference_mode():
        embeds = model.embed(case["input_ids"], [case["audio_embeds"]])
        torch.testing.assert_close(embeds, hidden["text.inputs_embeds"], rtol=0, atol=ATOL)
        out = model.model(hidden["text.inputs_embeds"], positions, None, layers_out=layers)
    for i, x in enumerate(layers):
        torch.testing.assert_close(x, hidden[f"text.layers.{i}"], rtol=0, atol=ATOL)
    torch.testing.assert_close(out, hidden["text.norm"], rtol=0, atol=ATOL)


def test_padding_changes_nothing_for_the_real_tokens(aligner_fixtures):
    """A left-padded row gives its tokens the same hidden states as the row alone."""
    config = HearingConfig.from_dir(aligner_fixtures / "tiny-aligner")
    model = load_thinker(aligner_fixtures / "tiny-aligner", "cpu", "fp32").model
    gen = torch.Generator().manual_seed(0)
    length, pad = 9, 4
    embeds = torch.randn(1, length, config.text.hidden_size, generator=gen)
    alone_mask = torch.ones(1, length, dtype=torch.long)
    padded = torch.cat([torch.randn(1, pad, config.text.hidden_size, generator=gen), embeds], 1)
    mask = torch.cat([torch.zeros(1, pad, dtype=torch.long), alone_mask], 1)
    with torch.inference_mode():
        alone = model(embeds, positions_from_mask(alone_mask), None)
        both = model(padded, positions_from_mask(mask), attention_mask(mask))
    torch.testing.assert_close(both[:, pad:], alone, rtol=1e-5, atol=1e-5)


def test_a_kv_cache_decodes_as_the_full_pass(aligner_fixtures):
    """Prefill then one token at a time through the static cache = one causal pass."""
    config = HearingConfig.from_dir(aligner_fixtures / "tiny-aligner")
    model = load_thinker(aligner_fixtures / "tiny-aligner", "cpu", "fp32").model
    length, total = 6, 10
    embeds = torch.randn(1, length, config.text.hidden_size,
                         generator=torch.Generator().manual_seed(1))
    full_mask = torch.ones(1, length, dtype=torch.long)
    with torch.inference_mode():
        full = model(embeds, positions_from_mask(full_mask), None)
        model.setup_cache(1, total)
        cache_mask = torch.zeros(1, total, dtype=torch.long)
        cache_mask[:, :length] = 1
        split = 4
        pos = torch.arange(split)
        first = model(embeds[:, :split], positions_from_mask(full_mask)[..., :split],
                      attention_mask(cache_mask, split, total, pos), input_pos=pos)
        outs = [first]
        for i in range(split, length):
            pos = torch.tensor([i])
            outs.append(model(embeds[:, i:i + 1], positions_from_mask(full_mask)[..., i:i + 1],
                              attention_mask(cache_mask, 1, total, pos), input_pos=pos))
        model.drop_cache()
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=1e-5, atol=1e-5)
