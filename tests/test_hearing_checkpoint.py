"""hearing/checkpoint.py + config.py: the real on-disk names load, every mismatch is reported,
and the model built from the real checkpoints' dims has the shapes real-manifest.json states."""

import json
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from fish_core.hearing.checkpoint import HearingCheckpointError, internal_name, load_thinker
from fish_core.hearing.config import ConfigError, HearingConfig
from fish_core.hearing.thinker import Thinker


def test_both_kinds_load_with_every_stored_tensor(aligner_fixtures):
    for name, kind in (("tiny-aligner", "qwen3_forced_aligner"), ("tiny-asr", "qwen3_asr")):
        folder = aligner_fixtures / name
        model = load_thinker(folder, "cpu", "fp32")
        assert model.config.kind == kind
        stored = load_file(str(folder / "model.safetensors"))
        params = dict(model.named_parameters())
        assert set(params) == {internal_name(k) for k in stored}
        for key, tensor in stored.items():
            assert torch.equal(params[internal_name(key)], tensor.float()), key
        head = stored["thinker.lm_head.weight"].shape[0]
        assert head == model.config.head_size
    assert load_thinker(aligner_fixtures / "tiny-aligner", "cpu", "bf16").dtype == torch.bfloat16


def test_the_wrong_kind_and_bad_weights_are_clear(aligner_fixtures, tmp_path):
    with pytest.raises(HearingCheckpointError, match="qwen3_asr model, not a qwen3_forced_aligner"):
        load_thinker(aligner_fixtures / "tiny-asr", expect="qwen3_forced_aligner")
    folder = tmp_path / "broken"
    shutil.copytree(aligner_fixtures / "tiny-aligner", folder)
    tensors = load_file(str(folder / "model.safetensors"))
    tensors.pop("thinker.model.norm.weight")
    tensors["thinker.lm_head.weight"] = tensors["thinker.lm_head.weight"][:-1].clone()
    tensors["thinker.extra.weight"] = torch.zeros(1)
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(HearingCheckpointError) as e:
        load_thinker(folder)
    message = str(e.value)
    assert "thinker.model.norm.weight" in message and "thinker.extra.weight" in message
    assert "thinker.lm_head.weight" in message and "wrong shape" in message


def test_a_bad_config_names_the_field(aligner_fixtures, tmp_path):
    raw = json.loads((aligner_fixtures / "tiny-aligner" / "config.json").read_text())
    raw["thinker_config"]["text_config"]["num_hidden_layers"] = 0
    with pytest.raises(ConfigError, match="text_config.num_hidden_layers"):
        HearingConfig.from_dict(raw)
    raw = json.loads((aligner_fixtures / "tiny-aligner" / "config.json").read_text())
    raw["thinker_config"]["model_type"] = "whisper"
    with pytest.raises(ConfigError, match="model_type"):
        HearingConfig.from_dict(raw)
    with pytest.raises(ConfigError, match="config.json not found"):
        HearingConfig.from_dir(tmp_path)


def test_the_real_aligner_dims_give_the_real_shapes(aligner_fixtures):
    """real-manifest.json's dims, on the meta device: the head is [classify_num, hidden] and
    the bf16 weights weigh what the official file does (within 2 %)."""
    manifest = json.loads((aligner_fixtures / "real-manifest.json").read_text(encoding="utf-8"))
    real = manifest["Qwen/Qwen3-ForcedAligner-0.6B"]
    tiny = json.loads((aligner_fixtures / "tiny-aligner" / "config.json").read_text())
    thinker = dict(tiny["thinker_config"])
    for key in ("classify_num", "audio_token_id", "audio_start_token_id", "audio_end_token_id"):
        thinker[key] = real["config"]["thinker_config"][key]
    thinker["audio_config"] = {**tiny["thinker_config"]["audio_config"],
                               **real["config"]["thinker_config"]["audio_config"]}
    thinker["text_config"] = {**tiny["thinker_config"]["text_config"],
                              **real["config"]["thinker_config"]["text_config"]}
    config = HearingConfig.from_dict({**tiny, "thinker_config": thinker,
                                      "timestamp_token_id": real["config"]["timestamp_token_id"]})
    with torch.device("meta"):
        model = Thinker(config)
    head = re.search(r"\[(\d+), (\d+)\]", real["config"]["lm_head"]).groups()
    assert tuple(model.lm_head.weight.shape) == tuple(int(x) for x in head)
    listed = next(x for x in real["files"]["listing"] if x.startswith("model.safetensors"))
    gigabytes = float(re.search(r"([\d.]+) GB", listed).group(1))
    size = sum(p.numel() for p in model.parameters()) * 2
    assert abs(size / 1e9 - gigabytes) / gigabytes < 0.02, size


def test_a_tied_vocabulary_head_may_be_left_out(aligner_fixtures, tmp_path):
    folder = tmp_path / "tied"
    shutil.copytree(aligner_fixtures / "tiny-asr", folder)
    raw = json.loads((folder / "config.json").read_text())
    raw["thinker_config"]["text_config"]["tie_word_embeddings"] = True
    (folder / "config.json").write_text(json.dumps(raw))
    tensors = load_file(str(folder / "model.safetensors"))
    tensors.pop("thinker.lm_head.weight")
    save_file(tensors, str(folder / "model.safetensors"))
    model = load_thinker(folder)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
