"""The voice library (``fish_core.speech.library``): one name rule, one folder rule and one
symlink policy for the ComfyUI nodes and the HTTP service, so a voice saved on one side is
found under the same name on the other."""

import os

import pytest
import torch

import comfy_stubs
from conftest import read_sizes
from fish_core.serve.http.errors import ApiError
from fish_core.serve.voicelib import VoiceLibrary
from fish_core.speech.library import MAX_PART, VoiceFolders, VoiceNameError, check_name
from fish_core.speech.voices import Voice
from fish_core.text.prompt import Reference


def a_voice(name: str) -> Voice:
    codes = torch.zeros(read_sizes().num_codebooks, 3, dtype=torch.int32)
    return Voice(name, [Reference("Bonjour.", codes)])


@pytest.fixture
def paths(tmp_path):
    """``nodes.paths`` of the pack loaded under ComfyUI stand-ins; its voices folder is
    ``tmp_path/models/fish_speech_voices``."""
    with comfy_stubs.pack_in_comfy(tmp_path, "sailfish_library") as (pack, _):
        yield pack.nodes.paths


@pytest.mark.parametrize("name", ["alice", "émile", "Zoë Dupont", "chœur/ténor-2",
                                  "sailfish/voice_00001", "v1.2", "日本語", "x" * MAX_PART])
def test_names_both_sides_accept(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name, words", [
    ("", "empty"), ("../alice", "inside"), ("/etc/passwd", "inside"), ("a//b", "inside"),
    (".hidden", "inside"), ("a/./b", "inside"), ("a\\b", "'\\\\'"), ("C:x", "':'"),
    ("a\x00b", "control"), (" alice", "space"), ("alice ", "space"), ("x" * (MAX_PART + 1), "long"),
    ("a/" * 200, "long"), ("who?", "'?'"), (5, "text"),
])
def test_names_both_sides_refuse(name, words):
    with pytest.raises(VoiceNameError, match="voice") as error:
        check_name(name, "voice")
    assert words in str(error.value)


def test_a_voice_saved_by_the_nodes_is_named_over_http(paths, tmp_path):
    path = a_voice("Émile").save(paths.new_voice_path("émile"))
    assert paths.voice_name(path) == "émile_00001.safetensors"
    assert paths.voice_choices() == ["émile_00001.safetensors"]
    served = VoiceLibrary(paths.roots(paths.VOICES))
    assert served.names() == ["émile_00001"]
    assert served.load("émile_00001").name == "Émile"


def test_a_voice_added_over_http_is_listed_by_the_nodes(paths):
    served = VoiceLibrary(paths.roots(paths.VOICES))
    served.add("chœur/zoë", a_voice("x"))
    assert paths.voice_choices() == ["chœur/zoë.safetensors"]
    assert Voice.load(paths.resolve_voice("chœur/zoë.safetensors")).name == "zoë"


def test_the_same_names_are_refused_on_both_sides(paths):
    for bad in ("../escape", "who?", ".hidden"):
        with pytest.raises(ValueError, match="filename_prefix"):
            paths.new_voice_path(bad)
        with pytest.raises(ApiError) as error:
            VoiceLibrary(paths.roots(paths.VOICES)).check_free(bad)
        assert error.value.status == 400 and error.value.param == "name"
        with pytest.raises(FileNotFoundError, match="voice"):
            paths.resolve_voice(bad + ".safetensors")


def test_symlinks_are_followed_only_inside_the_folder(tmp_path):
    root, elsewhere = tmp_path / "voices", tmp_path / "elsewhere"
    a_voice("in").save(root / "real" / "in.safetensors")
    a_voice("out").save(elsewhere / "out.safetensors")
    try:
        os.symlink(root / "real", root / "alias", target_is_directory=True)
        os.symlink(elsewhere, root / "outside", target_is_directory=True)
        os.symlink(elsewhere / "out.safetensors", root / "leak.safetensors")
        os.symlink(root, root / "real" / "loop", target_is_directory=True)
    except (OSError, NotImplementedError):
        pytest.skip("this file system cannot make symlinks")
    folders = VoiceFolders([root])
    assert folders.names() == ["alias/in", "real/in"]  # the loop is listed once, nothing outside
    assert folders.find("outside/out") is None and folders.find("leak") is None
    with pytest.raises(VoiceNameError, match="outside"):
        folders.path(root, "outside/out")
    served = VoiceLibrary([root])
    assert served.names() == folders.names()
    for name in ("outside/out", "leak"):
        with pytest.raises(ApiError) as error:
            served.delete(name)
        assert error.value.status == 400
    assert (elsewhere / "out.safetensors").is_file()


def test_a_symlinked_voices_folder_is_a_folder(tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    a_voice("a").save(real / "a.safetensors")
    try:
        os.symlink(real, link, target_is_directory=True)
    except (OSError, NotImplementedError):
        pytest.skip("this file system cannot make symlinks")
    assert VoiceFolders([link]).names() == ["a"]
    assert VoiceLibrary([link]).load("a").name == "a"


def test_a_name_through_a_voice_file_is_refused_on_both_sides(paths):
    """``victim.safetensors/x`` names a voice inside a file: refused before anything is written
    (Voice Save: an error naming filename_prefix; the service: a 409 naming the field), the
    file untouched (issue 36)."""
    served = VoiceLibrary(paths.roots(paths.VOICES))
    victim = served.add("victim", a_voice("victim"))
    before = victim.read_bytes()
    with pytest.raises(ValueError, match="filename_prefix: 'victim.safetensors/x' would be "
                                         "saved inside 'victim.safetensors', which is a file"):
        paths.new_voice_path("victim.safetensors/x")
    for call in (lambda: served.add("victim.safetensors/x", a_voice("x")),
                 lambda: served.rename("victim", "victim.safetensors/x", "name", "name")):
        with pytest.raises(ApiError) as error:
            call()
        assert error.value.status == 409 and error.value.param == "name"
    assert victim.read_bytes() == before and served.names() == ["victim"]
