"""Checkpoint loading: shards through the index, both naming styles, one clear error."""

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from fish_core.loading.checkpoint import (CheckpointError, iter_tensors, load_model, to_hf,
                                          to_internal)


def copy_ckpt(src, dst):
    shutil.copytree(src, dst)
    return dst


def all_tensors(folder):
    return dict(iter_tensors(folder))


def test_name_mapping_round_trips(ckpt_dir):
    names = list(all_tensors(ckpt_dir))
    assert any(n.startswith("text_model.model.") for n in names)
    for name in names:
        assert to_hf(to_internal(name)) == name
    assert to_internal("audio_decoder.codebook_embeddings.weight") == "codebook_embeddings.weight"
    assert to_internal("audio_decoder.output.weight") == "fast_output.weight"
    assert (to_internal("text_model.model.layers.3.attention.wqkv.weight") ==
            "layers.3.attention.wqkv.weight")


def test_internal_names_single_file_load_identically(ckpt_dir, tmp_path):
    """A fish-speech style checkpoint (internal names, one model.safetensors) gives the same
    model."""
    tensors = {to_internal(k): v for k, v in all_tensors(ckpt_dir).items()}
    folder = tmp_path / "internal"
    folder.mkdir()
    shutil.copy(ckpt_dir / "config.json", folder / "config.json")
    save_file(tensors, str(folder / "model.safetensors"))
    a = load_model(ckpt_dir, dtype=torch.float32).state_dict()
    b = load_model(folder, dtype=torch.float32).state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_weights_are_cast_and_placed(ckpt_dir):
    model = load_model(ckpt_dir, dtype=torch.float16)
    assert {p.dtype for p in model.parameters()} == {torch.float16}
    assert not any(p.is_meta for p in model.parameters())
    assert not any(b.is_meta for b in model.buffers())
    assert not any(p.requires_grad for p in model.parameters())


def test_one_error_lists_missing_unexpected_and_misshaped(ckpt_dir, tmp_path):
    folder = copy_ckpt(ckpt_dir, tmp_path / "broken")
    shard = folder / "model-00002-of-00002.safetensors"
    tensors = load_file(str(shard))
    tensors.pop("audio_decoder.output.weight")
    tensors["audio_decoder.extra.weight"] = torch.zeros(2)
    tensors["text_model.model.norm.weight"] = torch.zeros(3, dtype=torch.bfloat16)
    save_file(tensors, str(shard))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    with pytest.raises(CheckpointError) as err:
        load_model(folder)
    text = str(err.value)
    assert "missing (1): audio_decoder.output.weight" in text
    assert "unexpected (1): audio_decoder.extra.weight" in text
    assert "wrong shape (1): text_model.model.norm.weight: (3,)" in text
    assert index["weight_map"]  # the index itself was fine


def test_missing_shard_and_escaping_index(ckpt_dir, tmp_path):
    folder = copy_ckpt(ckpt_dir, tmp_path / "noshard")
    (folder / "model-00001-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="is missing"):
        load_model(folder)
    folder = copy_ckpt(ckpt_dir, tmp_path / "escape")
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "../outside.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="outside the model folder"):
        load_model(folder)


def test_corrupt_shard_is_named(ckpt_dir, tmp_path):
    folder = copy_ckpt(ckpt_dir, tmp_path / "corrupt")
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors"):
        load_model(folder)


def test_empty_folder(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(Exception, match="model_type"):
        load_model(tmp_path)


def test_inside_a_package_fish_core_loads_through_the_pack_quant(ckpt_dir, tmp_path):
    """As in ComfyUI: the repository root is package ``pack`` and not on sys.path, so fish_core
    must reach ``pack.quant`` (fish_core/loading/siblings.py), never a top-level ``quant``."""
    root = Path(__file__).resolve().parents[1]
    script = textwrap.dedent(f"""
        import sys, types
        pack = types.ModuleType("pack")
        pack.__path__ = [{str(root)!r}]
        sys.modules["pack"] = pack
        from pack.fish_core.loading.checkpoint import load_model
        model = load_model({str(ckpt_dir)!r}, quantization="fp8")
        assert sys.modules["pack.fish_core.loading.siblings"].quant is sys.modules["pack.quant"]
        assert "quant" not in sys.modules and "fish_core" not in sys.modules
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]
