"""Sailfish Model Loader (``nodes/model.py``, ``nodes/paths.py``): the model combo, downloads,
quantization choices, errors, the handle it returns."""

from __future__ import annotations

import pytest

from conftest import link_checkpoint
from node_env import LOADER, loaded, run_v1


def test_model_combo_lists_local_folders_then_downloads(env):
    options = env.v1["SailfishModelLoader"].INPUT_TYPES()["required"]["model"][0]
    assert options == ["tiny-s2", "s2-pro (download)"]  # FP8: quantization fp8 on s2-pro
    # another pack's tts folder
    shared = link_checkpoint(env.base / "models" / "tts" / "fishaudio", "s2")
    try:
        assert env.pack.nodes.paths.model_choices()[:2] == ["tiny-s2", "fishaudio/s2"]
    finally:
        (shared / "s2").unlink()


def test_download_entry_is_offline_safe_and_targets_our_folder(env, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE") as e:
        run_v1(env, "SailfishModelLoader", **{**LOADER, "model": "s2-pro (download)"})
    assert str(env.models) in str(e.value)  # the first fish_speech folder


def test_quantization_choices_are_what_quant_offers(env):
    quantization = env.v1["SailfishModelLoader"].INPUT_TYPES()["required"]["quantization"]
    assert quantization[0] == list(env.pack.quant.MODES) and quantization[1]["default"] == "none"


def test_loader_errors_name_the_field(env):
    with pytest.raises(FileNotFoundError, match="model: 'nope'"):
        run_v1(env, "SailfishModelLoader", **{**LOADER, "model": "nope"})


def test_loader_returns_a_small_handle(env, model):
    assert isinstance(model, env.pack.nodes.manager.ModelHandle)
    assert model.folder.endswith("tiny-s2") and model.device == "auto"
    assert len(loaded(env.manager)) == 1


def test_threads_input_sets_torch_threads_for_a_cpu_model(env, monkeypatch):
    import torch

    optional = env.v1["SailfishModelLoader"].INPUT_TYPES()["optional"]
    assert optional["threads"][0] == "INT" and optional["threads"][1]["default"] == 0
    policy = env.pack.fish_core.engine.threads
    applied = []
    monkeypatch.setattr(policy, "apply", lambda n: applied.append(n))
    before = torch.get_num_threads()
    run_v1(env, "SailfishModelLoader", **{**LOADER, "device": "cpu", "threads": 0})
    run_v1(env, "SailfishModelLoader", **{**LOADER, "device": "cpu", "threads": 2})
    assert applied == [None, 2]  # auto (the free physical cores), then as asked
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads: threads must be a positive integer"):
        run_v1(env, "SailfishModelLoader", **{**LOADER, "threads": -3})
