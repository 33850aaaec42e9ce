"""``python -m fish_core serve``: the standalone HTTP server (binds 127.0.0.1 unless told).

Safe by default: a non-loopback address needs an API key (or ``--allow-no-key``), the key comes
from ``SAILFISH_SERVE_API_KEY`` or ``--api-key-file`` (``--api-key`` works but shows in ``ps``),
the Host header must be one the server answers to (``--allowed-hosts``), and ``--max-queue``
bounds the requests in progress. Everything is checked before the model loads.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ..access import check_key, is_loopback, read_key_env, read_key_file
from ..loading import hub
from .http.guard import Guard
from .limits import Limits

DEFAULT_VOICES = hub.DEFAULT_MODELS_DIR.parent / "voices"  # where the nodes save outside ComfyUI
KEY_ENV = "SAILFISH_SERVE_API_KEY"
HANDLERS_GRACE_SECONDS = 2.0  # after the drain, for told handlers to finish before cancelling


def add_serve_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("server")
    add_access_args(g)
    add_work_args(g)
    add_decode_args(g)
    add_limit_args(g)
    add_stream_limit_args(g)


def add_access_args(g) -> None:
    """Where the server listens and who may use it."""
    g.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default loopback only); any other address needs an "
                        "API key or --allow-no-key")
    g.add_argument("--port", type=int, default=8080, help="TCP port to listen on")
    keys = g.add_mutually_exclusive_group()
    keys.add_argument("--api-key-file", default=None, metavar="PATH",
                      help="require Authorization: Bearer KEY, KEY read from this file (first "
                           f"line); default: the environment variable {KEY_ENV}, if set")
    keys.add_argument("--api-key", default=None, metavar="KEY",
                      help=f"the key on the command line: avoid it, any local user sees it in "
                           f"`ps` and it stays in shell history; prefer {KEY_ENV} or "
                           "--api-key-file")
    g.add_argument("--allow-no-key", action="store_true",
                   help="serve a non-loopback --host without an API key: anyone who can reach "
                        "the port may generate speech (voice changes still only from this "
                        "machine)")
    g.add_argument("--allowed-hosts", default="", metavar="NAME[,NAME]",
                   help="Host header names the server answers to besides localhost, "
                        "127.0.0.1, [::1] and the bound address (bound to 0.0.0.0 or ::, any "
                        "IP address too), e.g. the name clients or a load balancer use; '*' "
                        "turns this DNS-rebinding check off")


def add_work_args(g) -> None:
    """The voices, the lexicon and the models."""
    g.add_argument("--voices", default=str(DEFAULT_VOICES), help="voice library folder")
    g.add_argument("--default-voice", default=None,
                   help="saved voice used when a request names none")
    g.add_argument("--lexicon", default=None, metavar="FILE",
                   help="pronunciation lexicon (word<TAB>respelling lines) applied to every "
                        "request; a saved voice's own lexicon goes over it")
    g.add_argument("--lazy", action="store_true", help="load the model on the first request")
    g.add_argument("--aligner", default=None, metavar="FOLDER",
                   help="a Qwen3-ForcedAligner-0.6B folder for word timestamps (default: "
                        "downloaded into --models-dir on the first request for them)")


def add_decode_args(g) -> None:
    """The model's decode: its batches, its queue and its memory."""
    g.add_argument("--max-batch", type=int, default=4,
                   help="requests that arrive together are decoded as one batch of up to this "
                        "many (1: one at a time)")
    g.add_argument("--batching", choices=["continuous", "static"], default="continuous",
                   help="continuous: requests join the running decode at the next frame and "
                        "leave it when done; static: each batch runs to the end of its text "
                        "batch (default continuous)")
    g.add_argument("--prefix-cache-mb", type=float, default=None, metavar="MB",
                   help="memory for the KV of recent voice prefixes, reused by the next "
                        "request in the same voice (default 512; 0 = off)")
    g.add_argument("--max-queue", type=int, default=None,
                   help="requests in progress or waiting at once; more get 429 with "
                        "Retry-After (default 4 x --max-batch, at least 16)")
    g.add_argument("--context-length", type=int, default=None,
                   help="cap prompt + generated tokens (bounds the KV cache)")


def add_limit_args(g) -> None:
    """The bounds every request is held to (``Limits``; their defaults shown)."""
    limits = Limits()
    g.add_argument("--max-text-length", type=int, default=limits.max_text_chars,
                   help="characters of text one request may ask to speak (more: 400)")
    g.add_argument("--max-body-mb", type=float, default=limits.max_body_bytes / 2**20,
                   help="largest request body, MB, reference clips included (more: 413)")
    g.add_argument("--max-references", type=int, default=limits.max_references,
                   help="reference clips one request may send to clone a voice")
    g.add_argument("--max-reference-seconds", type=float, default=limits.max_reference_seconds,
                   help="longest reference clip a request may send, seconds")
    g.add_argument("--timeout", type=float, default=limits.timeout_seconds,
                   help="seconds a request may take, queueing included")
    g.add_argument("--body-timeout", type=float, default=limits.body_timeout_seconds,
                   help="seconds to receive a request body")


def add_stream_limit_args(g) -> None:
    """The bounds of the speech streams (WebSocket sessions) and of the shutdown (``Limits``;
    their defaults shown)."""
    limits = Limits()
    g.add_argument("--stream-idle-timeout", type=float, default=limits.stream_idle_seconds,
                   help="seconds a WS /v1/audio/speech/stream session may go without completing "
                        "a sentence while nothing is being spoken before it is closed")
    g.add_argument("--max-streams-per-client", type=int, default=limits.max_streams_per_client,
                   help="WS /v1/audio/speech/stream sessions one peer address may hold open "
                        "(behind a proxy every client is the proxy: raise it there)")
    g.add_argument("--max-streams", type=int, default=limits.max_streams,
                   help="WS /v1/audio/speech/stream sessions open at once from all clients "
                        "together; more get 503 with Retry-After")
    g.add_argument("--shutdown-timeout", type=float, default=limits.shutdown_seconds,
                   metavar="SECONDS",
                   help="on SIGTERM or Ctrl-C: new requests get 503 at once, those in progress "
                        "may finish within this many seconds; what is left is ended (503, a "
                        "cut stream, a WebSocket error and close) and the server exits")


def api_key(args) -> str | None:
    """The key: --api-key-file, else --api-key, else $SAILFISH_SERVE_API_KEY, else none."""
    if args.api_key_file:
        return read_key_file(args.api_key_file, "--api-key-file")
    if args.api_key:
        return check_key(args.api_key.strip(), "--api-key")
    return read_key_env(KEY_ENV, KEY_ENV, required=False)


def check_bind(host: str, key: str | None, allow_no_key: bool) -> None:
    """A non-loopback address is reachable by the network: it needs a key, or the explicit
    --allow-no-key."""
    if key is None and not allow_no_key and not is_loopback(host):
        raise ValueError(
            f"--host {host} is reachable from the network and no API key is set: set "
            f"{KEY_ENV} or --api-key-file, or pass --allow-no-key to serve it without one "
            "(anyone who can reach the port may then use it)")


def guard(args) -> Guard:
    allowed = [name.strip() for name in args.allowed_hosts.split(",") if name.strip()]
    return Guard.for_bind(args.host, allowed, hint="start the server with --allowed-hosts "
                                                  "NAME to answer to it")


def build_service(args, key: str | None = None):
    from ..local.synthesizer import Synthesizer
    from .service import Service

    def load():
        return Synthesizer.from_pretrained(
            args.model, device=args.device, dtype=args.precision, compile=args.compile,
            compile_cache=args.compile_cache, quantization=args.quantization,
            models_dir=args.models_dir, download=not args.no_download,
            context_length=args.context_length, prefix_cache_mb=args.prefix_cache_mb,
            threads=getattr(args, "threads", None),  # the CLI's count: a server keeps it
            aligner=getattr(args, "aligner", None))

    return Service.standalone(load, lazy=args.lazy, voices=[Path(args.voices).expanduser()],
                              model_name=Path(str(args.model)).name, api_key=key,
                              limits=limits_of(args), max_batch=args.max_batch,
                              default_voice=args.default_voice, guard=guard(args),
                              max_queue=args.max_queue, batching=args.batching,
                              lexicon=lexicon_of(args))


def limits_of(args) -> Limits:
    return Limits(max_body_bytes=int(args.max_body_mb * 2**20),
                  max_text_chars=args.max_text_length, max_references=args.max_references,
                  max_reference_seconds=args.max_reference_seconds,
                  timeout_seconds=args.timeout, body_timeout_seconds=args.body_timeout,
                  stream_idle_seconds=args.stream_idle_timeout,
                  max_streams_per_client=args.max_streams_per_client,
                  max_streams=args.max_streams, shutdown_seconds=args.shutdown_timeout)


def lexicon_of(args):
    """The operator's lexicon (``--lexicon``), read once, or None."""
    if not args.lexicon:
        return None
    from ..text.lexicon import Lexicon

    return Lexicon.load(args.lexicon, "--lexicon")


def serve(args) -> str:
    from aiohttp import web

    from .http.logs import ACCESS_LOG
    from .routes import create_app

    key = api_key(args)
    check_bind(args.host, key, args.allow_no_key)
    if args.max_queue is not None and args.max_queue < 1:
        raise ValueError(f"--max-queue must be at least 1, got {args.max_queue}")
    if args.max_streams_per_client < 1:
        raise ValueError(f"--max-streams-per-client must be at least 1, got "
                         f"{args.max_streams_per_client}")
    if args.max_streams < 1:
        raise ValueError(f"--max-streams must be at least 1, got {args.max_streams}")
    if not args.shutdown_timeout >= 0:
        raise ValueError(f"--shutdown-timeout must be 0 or more seconds, got "
                         f"{args.shutdown_timeout}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    service = build_service(args, key)
    # SIGTERM/SIGINT: the app's on_shutdown drains and ends every request (Service.shutdown);
    # the handlers, told, end at once: aiohttp waits a moment more for them, not a minute
    web.run_app(create_app(service), host=args.host, port=args.port, access_log=ACCESS_LOG,
                shutdown_timeout=HANDLERS_GRACE_SECONDS)
    return "server stopped"
