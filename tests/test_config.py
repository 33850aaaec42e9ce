import json

import pytest

from fish_core.engine.config import ConfigError, ModelConfig


def load(ckpt_dir):
    return json.loads((ckpt_dir / "config.json").read_text())


def test_fixture_and_real_configs_parse(ckpt_dir, fixtures, sizes):
    tiny = ModelConfig.from_file(ckpt_dir)
    assert tiny.num_codebooks == sizes.num_codebooks
    assert tiny.codebook_size == tiny.num_semantic_tokens
    real = ModelConfig.from_file(fixtures / "real-s2-config.json")
    assert (real.text.n_layer, real.text.dim, real.fast.n_layer) == (36, 2560, 4)
    assert (real.eos_token_id, real.semantic_start_token_id) == (151645, 151678)
    assert real.codebook_size == 4096


def test_round_trip(ckpt_dir):
    config = ModelConfig.from_file(ckpt_dir)
    assert ModelConfig.from_dict(config.to_dict()) == config


def test_hf_bookkeeping_keys_are_tolerated(ckpt_dir):
    data = load(ckpt_dir)
    data["architectures"] = ["FishQwen3OmniForCausalLM"]
    data["transformers_version"] = "4.57.0"
    data["text_config"]["torch_dtype"] = "bfloat16"
    config = ModelConfig.from_dict(data)
    assert "config.json.architectures" in config.ignored_keys


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("eos_token_id"), r"missing required field\(s\) \['eos_token_id'\]"),
    (lambda d: d["text_config"].pop("n_layer"), r"text_config: missing.*n_layer"),
    (lambda d: d["audio_decoder_config"].update(use_flash=True),
     r"audio_decoder_config.*use_flash"),
    (lambda d: d.update(model_type="llama"), "model_type must be 'fish_qwen3_omni'"),
    (lambda d: d["text_config"].update(n_head="32"), r"text_config.n_head must be a non-negative"),
    (lambda d: d["text_config"].update(n_local_heads=d["text_config"]["n_head"] + 1),
     "multiple of n_local_heads"),
    (lambda d: d.update(semantic_end_token_id=d["semantic_end_token_id"] - 1),
     "semantic token range"),
    (lambda d: d.pop("text_config"), "text_config"),
])
def test_bad_configs_name_the_field(ckpt_dir, edit, message):
    data = load(ckpt_dir)
    edit(data)
    with pytest.raises(ConfigError, match=message):
        ModelConfig.from_dict(data)


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        ModelConfig.from_file(tmp_path)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        ModelConfig.from_file(tmp_path)
