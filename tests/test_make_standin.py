"""bench/make_standin.py: the random stand-in is a checkpoint our loader takes, in the real
layout (two shards + index), with the end-of-speech row scaled, and its tokenizer has the real
ids (the real config's check passes)."""

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import make_standin  # noqa: E402
from fish_core.engine.config import ModelConfig  # noqa: E402
from fish_core.loading.checkpoint import load_model  # noqa: E402
from fish_core.loading.shards import INDEX_FILE, shard_files  # noqa: E402
from fish_core.text.tokenizer import FishTokenizer  # noqa: E402


def test_tiny_standin_loads_with_the_stop_row_scaled(tmp_path):
    info = make_standin.make_standin(tmp_path, "tiny", seed=3, eos_scale=0.0, codec=False)
    assert [p.name for p in shard_files(tmp_path)] == list(make_standin.SHARD_NAMES)
    index = json.loads((tmp_path / INDEX_FILE).read_text())
    assert index["metadata"]["total_size"] == info["llm_bytes"]
    model = load_model(tmp_path, "cpu", torch.float32)
    assert sum(p.numel() for p in model.parameters()) == info["llm_params"]
    eos = model.config.eos_token_id
    assert not model.embeddings.weight[eos].any() and model.embeddings.weight[eos - 1].any()
    std = float(model.layers[0].attention.wqkv.weight.std())
    expected = json.loads((tmp_path / "config.json").read_text())["text_config"][
        "initializer_range"]
    assert abs(std - expected) < 0.1 * expected
    again = tmp_path / "again"
    make_standin.make_standin(again, "tiny", seed=3, codec=False)  # deterministic
    assert ((again / make_standin.SHARD_NAMES[1]).read_bytes() ==
            (tmp_path / make_standin.SHARD_NAMES[1]).read_bytes())


def test_real_tokenizer_ids_and_shard_split(tmp_path):
    config = make_standin.standin_config("real")
    make_standin.write_tokenizer(tmp_path, config)
    tok = FishTokenizer.from_dir(tmp_path)
    assert tok.im_end_id == config["eos_token_id"] == 151645
    assert (tok.semantic_begin_id, tok.semantic_end_id) == (151678, 155773)
    tok.check_config(ModelConfig.from_dict(config))
    assert all(i < 151643 for i in tok.encode_text("Hello, world"))
    tensors = make_standin.llm_tensors(ModelConfig.from_dict(config))
    make_standin.check_manifest(tensors)  # every real key and shape
    first, rest = make_standin.split_shards(tensors, make_standin.FIRST_SHARD_BYTES)
    assert first + rest == tensors and rest
    assert sum(torch.Size(s).numel() * 2 for _, s in first) <= make_standin.FIRST_SHARD_BYTES
