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


def test_the_readmes_tiny_switch_runs_every_template_offline(env, monkeypatch, tmp_path):
    """The README's line for ComfyUI (run in a ComfyUI folder, the pack in custom_nodes) links
    the tiny checkpoint as ``models/fish_speech/s2-pro``; every template's model is then that
    folder, loaded with no download (HF_HUB_OFFLINE would refuse one)."""
    import json
    import re
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    (line,) = re.findall(r"^mkdir -p models/fish_speech && ln .*$", readme, re.MULTILINE)
    comfy = tmp_path / "ComfyUI"
    (comfy / "custom_nodes").mkdir(parents=True)
    (comfy / "custom_nodes" / "sailfish-tts").symlink_to(root)
    subprocess.run(["bash", "-e", "-c", line], cwd=comfy, check=True, timeout=60)
    linked = comfy / "models" / "fish_speech" / "s2-pro"
    assert (linked / "config.json").is_file()
    models = set()
    for path in (root / "example_workflows").glob("*.json"):
        for node in json.loads(path.read_text(encoding="utf-8"))["nodes"]:
            if node["type"] == "SailfishModelLoader":
                models.add(node["widgets_values"][0])
    assert models == {"s2-pro (download)"}
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (env.models / "s2-pro").symlink_to(linked.resolve(), target_is_directory=True)
    try:
        assert env.pack.nodes.paths.resolve_model("s2-pro (download)") == env.models / "s2-pro"
        (handle,) = run_v1(env, "SailfishModelLoader", **{**LOADER, "model": "s2-pro (download)"})
        assert handle is not None
    finally:
        (env.models / "s2-pro").unlink()
        env.manager.unload()
