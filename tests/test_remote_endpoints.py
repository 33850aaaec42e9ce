"""``remote/endpoints.py``: the operator's endpoints file is parsed once per change, however many
times one prompt looks an endpoint up (the loader's check, the model load, the speaker rules,
the model manager: 3-4 reads per prompt before), and read again as soon as it changes."""

from __future__ import annotations

import json
import os
import time

import pytest

from fish_core.remote import endpoints


def write(path, entries: dict, settle: bool = True):
    path.write_text(json.dumps({"endpoints": entries}))
    if settle:  # saved a while ago (a file written in the last seconds is always re-read)
        past = time.time() - 60
        os.utime(path, (past, past))


def test_one_parse_per_change(tmp_path):
    path = tmp_path / "endpoints.json"
    write(path, {"farm": {"urls": "https://tts.example.com"}})
    before = endpoints.parses
    for _ in range(4):  # the look-ups of one prompt
        assert endpoints.load([path])["farm"].urls == ("https://tts.example.com",)
    assert endpoints.parses - before == 1
    write(path, {"farm": {"urls": "https://other.example.com"}})  # changed: read again
    assert endpoints.load([path])["farm"].urls == ("https://other.example.com",)
    assert endpoints.load([path])["farm"].urls == ("https://other.example.com",)
    assert endpoints.parses - before == 2


def test_a_file_just_written_is_never_trusted_unchanged(tmp_path):
    """Within the same tick of the file clock a rewrite of the same size keeps its stamp:
    a fresh file is parsed at every look-up until it has settled."""
    path = tmp_path / "endpoints.json"
    write(path, {"aaaa": {"urls": "https://a.example.com"}}, settle=False)
    assert list(endpoints.load([path])) == ["aaaa"]
    write(path, {"bbbb": {"urls": "https://b.example.com"}}, settle=False)  # same size
    assert list(endpoints.load([path])) == ["bbbb"]


def test_a_broken_file_is_an_error_at_every_look_up(tmp_path):
    path = tmp_path / "endpoints.json"
    write(path, {"farm": {"urls": "https://tts.example.com"}})
    endpoints.load([path])
    path.write_text("{not json")
    for _ in range(2):
        with pytest.raises(ValueError, match="not valid JSON"):
            endpoints.load([path])
    path.unlink()
    assert endpoints.load([path]) == {}
