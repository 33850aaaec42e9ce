"""``fish_core.access``: the one loopback rule and the one key reader ``serve`` and ``remote``
share (before, two loopback checks disagreed on ``::ffff:127.0.0.1`` and ``localhost.``, and three
key readers had three size policies)."""

from __future__ import annotations

import pytest

from fish_core import access
from fish_core.remote import endpoints, http, keys
from fish_core.serve import main
from fish_core.serve.http import guard

LOOPBACK = ["localhost", "LOCALHOST", "localhost.", "[localhost]", "127.0.0.1", "127.8.9.10",
            "::1", "[::1]", "::ffff:127.0.0.1", "[::ffff:127.0.0.1]", "0:0:0:0:0:0:0:1"]
NOT_LOOPBACK = ["", None, "evil.localhost", "localhost.evil.com", "localhost..", "0.0.0.0", "::",
                "10.0.0.7", "::ffff:10.0.0.7", "128.0.0.1", "tts.lan", "127.0.0.1.nip.io"]


@pytest.mark.parametrize("name", LOOPBACK)
def test_loopback_names(name):
    assert access.is_loopback(name)


@pytest.mark.parametrize("name", NOT_LOOPBACK)
def test_names_that_are_not_loopback(name):
    assert not access.is_loopback(name)


@pytest.mark.parametrize("host", ["localhost.", "::ffff:127.0.0.1", "127.0.0.1"])
def test_serve_and_remote_agree_on_loopback(host):
    """The two cases that used to disagree: a key-less bind and a voice-changing peer on the
    server side, a key over plain http on the client side, all take the one rule."""
    main.check_bind(host, None, allow_no_key=False)  # no error: loopback needs no key
    guard.require_loopback_peer(host, "changing the voice library")  # no error
    url = f"http://[{host}]:8080" if ":" in host else f"http://{host}:8080"
    http.Credential("k", [http.Endpoint.parse(url)])  # plain http to loopback: allowed


@pytest.mark.parametrize("host", ["evil.localhost", "10.0.0.7", "::ffff:10.0.0.7"])
def test_serve_and_remote_agree_on_not_loopback(host):
    with pytest.raises(ValueError, match="API key"):
        main.check_bind(host, None, allow_no_key=False)
    with pytest.raises(Exception, match="only from this machine"):
        guard.require_loopback_peer(host, "changing the voice library")
    url = f"http://[{host}]:8080" if ":" in host else f"http://{host}:8080"
    with pytest.raises(ValueError, match="plain http"):
        http.Credential("k", [http.Endpoint.parse(url)])


def key_readers(path):
    """The three places a key file is named (serve's option, remote's option, an endpoint)."""
    return [lambda: access.read_key_file(path, "--api-key-file"),
            lambda: keys.read_api_key(str(path)),
            lambda: endpoints.EndpointConfig("farm", ("https://x",),
                                             api_key_file=str(path)).api_key()]


def test_one_key_file_policy_everywhere(tmp_path):
    path = tmp_path / "key"
    path.write_text("  key-123\nsecond line ignored\n")
    assert [read() for read in key_readers(path)] == ["key-123"] * 3
    path.write_bytes(b"k" * (access.MAX_KEY_FILE_BYTES + 1))  # not a key file: refused, not cut
    for read in key_readers(path):
        with pytest.raises(ValueError, match="larger than a key file"):
            read()
    path.write_text("\n\n")
    for read in key_readers(path):
        with pytest.raises(ValueError, match="empty"):
            read()
    path.write_text("two words\n")  # not a header value
    for read in key_readers(path):
        with pytest.raises(ValueError, match="printable ASCII") as error:
            read()
        assert "two words" not in str(error.value)
    for read in key_readers(tmp_path / "missing"):
        with pytest.raises(ValueError, match="missing"):
            read()


def test_key_errors_name_the_source_never_the_key(monkeypatch):
    monkeypatch.setenv("K", "secret part")
    with pytest.raises(ValueError, match="K") as error:
        access.read_key_env("K", "K")
    assert "secret" not in str(error.value)
    monkeypatch.setenv("K", "x" * (access.MAX_KEY_CHARS + 1))
    with pytest.raises(ValueError, match="at most 1024"):
        access.read_key_env("K", "K")
    monkeypatch.delenv("K")
    assert access.read_key_env("K", "K", required=False) is None
    with pytest.raises(ValueError, match="K is not set"):
        access.read_key_env("K", "K")


def test_serve_checks_its_key_like_remote(monkeypatch):
    """``serve``'s key from the environment or ``--api-key`` passes the same check."""
    args = main.argparse.Namespace(api_key_file=None, api_key=None)
    monkeypatch.setenv(main.KEY_ENV, "bad key")
    with pytest.raises(ValueError, match=main.KEY_ENV):
        main.api_key(args)
    monkeypatch.setenv(main.KEY_ENV, " good-key ")
    assert main.api_key(args) == "good-key"
    with pytest.raises(ValueError, match="--api-key"):
        main.api_key(main.argparse.Namespace(api_key_file=None, api_key="a\nb"))
