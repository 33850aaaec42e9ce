"""hearing/asr_hub.py: the recogniser's folder or download, tested offline (no Hugging Face
here)."""

import shutil

import pytest

from fish_core.hearing.asr_hub import ASR, ASR_FILES, resolve_asr
from fish_core.loading import hub
from fish_core.loading.hub import ModelNotFound


def test_a_named_folder_is_used_as_it_is(aligner_fixtures):
    assert resolve_asr(aligner_fixtures / "tiny-asr") == aligner_fixtures / "tiny-asr"


def test_a_folder_without_the_files_says_what_it_lacks(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelNotFound, match="Qwen3-ASR.*model.safetensors"):
        resolve_asr(tmp_path)


def test_the_models_folder_copy_is_found_without_a_download(tmp_path, aligner_fixtures):
    (tmp_path / ASR.name).symlink_to(aligner_fixtures / "tiny-asr")
    assert resolve_asr(models_dir=tmp_path, download=False) == tmp_path / ASR.name


def test_offline_it_refuses_at_once_naming_the_way_out(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFound, match="HF_HUB_OFFLINE.*--asr FOLDER"):
        resolve_asr(models_dir=tmp_path)
    with pytest.raises(ModelNotFound, match="downloading is off"):
        resolve_asr(models_dir=tmp_path, download=False)
    assert not (tmp_path / ASR.name).exists()


def test_a_download_fetches_only_the_needed_files_at_the_pinned_commit(tmp_path, monkeypatch,
                                                                        capsys, aligner_fixtures):
    """The hub call is replaced by a copy of the tiny checkpoint: what is asked for, and the
    line said before it."""
    import huggingface_hub

    asked = {}

    def snapshot_download(repo_id, revision, local_dir, allow_patterns):
        asked.update(repo_id=repo_id, revision=revision, patterns=allow_patterns)
        shutil.copytree(aligner_fixtures / "tiny-asr", local_dir, dirs_exist_ok=True)
        return local_dir

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(hub, "unreachable", lambda url: None)
    assert resolve_asr(models_dir=tmp_path) == tmp_path / ASR.name
    assert asked == {"repo_id": "Qwen/Qwen3-ASR-0.6B", "revision": ASR.revision,
                     "patterns": list(ASR_FILES)}
    assert len(ASR.revision) == 40
    err = capsys.readouterr().err
    assert "downloading qwen3-asr-0.6b" in err and "--asr FOLDER" in err
