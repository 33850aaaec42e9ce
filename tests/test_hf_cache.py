"""Checkpoint folders in the Hugging Face cache layout: every file of a snapshot is a symlink
into ``../../blobs/``. They load (shards, config, tokenizer, codec); shard NAMES that leave the
folder are still refused."""

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch

from fish_core.loading.checkpoint import CheckpointError, load_model
from fish_core.codec.model import Codec
from fish_core.engine.config import ModelConfig
from fish_core.loading.hub import resolve
from fish_core.loading.shards import INDEX_FILE, shard_files
from fish_core.text.tokenizer import FishTokenizer


def hf_snapshot(src: Path, cache: Path) -> Path:
    """``cache/models--x--y/{blobs/<sha256>, snapshots/<rev>/<name> -> ../../blobs/<sha256>}``,
    as ``huggingface_hub`` leaves a download."""
    repo = cache / "models--x--y"
    blobs, snapshot = repo / "blobs", repo / "snapshots" / ("0" * 40)
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for path in sorted(p for p in src.iterdir() if p.is_file()):
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        (blobs / sha).write_bytes(data)
        os.symlink(Path("..") / ".." / "blobs" / sha, snapshot / path.name)
    return snapshot


@pytest.fixture(scope="module")
def snapshot(ckpt_dir, tmp_path_factory) -> Path:
    return hf_snapshot(ckpt_dir, tmp_path_factory.mktemp("hf-cache"))


def test_snapshot_is_made_of_symlinks_out_of_the_folder(snapshot):
    files = list(snapshot.iterdir())
    assert files and all(p.is_symlink() for p in files)
    assert all(p.resolve().parent.name == "blobs" for p in files)


def test_shards_load_from_a_snapshot(ckpt_dir, snapshot):
    assert [p.name for p in shard_files(snapshot)] == [p.name for p in shard_files(ckpt_dir)]
    a = load_model(ckpt_dir, dtype=torch.float32).state_dict()
    b = load_model(snapshot, dtype=torch.float32).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_config_tokenizer_and_codec_load_from_a_snapshot(ckpt_dir, snapshot):
    assert resolve(snapshot) == snapshot  # recognised as a checkpoint folder
    assert ModelConfig.from_file(snapshot) == ModelConfig.from_file(ckpt_dir)
    text = "Hello from the cache."
    assert (FishTokenizer.from_dir(snapshot).encode(text) ==
            FishTokenizer.from_dir(ckpt_dir).encode(text))
    codec = Codec.from_file(ckpt_dir)
    codes = torch.zeros(1, codec.num_codebooks, 2, dtype=torch.long)
    assert torch.equal(Codec.from_file(snapshot).decode(codes), codec.decode(codes))


@pytest.mark.parametrize("name", ["../evil.safetensors", "/tmp/evil.safetensors",
                                  "sub/../../evil.safetensors", "..", "sub\\evil.safetensors"])
def test_shard_names_that_leave_the_folder_are_refused(snapshot, tmp_path, name):
    folder = tmp_path / "snapshot"
    folder.mkdir()
    for path in snapshot.iterdir():
        os.symlink(path.resolve(), folder / path.name)
    (folder / INDEX_FILE).unlink()
    index = json.loads((snapshot / INDEX_FILE).read_text())
    index["weight_map"][next(iter(index["weight_map"]))] = name
    (folder / INDEX_FILE).write_text(json.dumps(index))
    (tmp_path / "evil.safetensors").write_bytes((snapshot / shard_files(snapshot)[0].name)
                                                .read_bytes())  # it exists: only the name is wrong
    with pytest.raises(CheckpointError, match=r"points outside the model folder") as e:
        load_model(folder)
    assert repr(name) in str(e.value) and INDEX_FILE in str(e.value)
