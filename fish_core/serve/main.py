"""``python -m fish_core serve``: the standalone HTTP server (binds 127.0.0.1 unless told)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ..loading import hub
from .requests import Limits

DEFAULT_VOICES = hub.DEFAULT_MODELS_DIR.parent / "voices"  # where the nodes save outside ComfyUI


def add_serve_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    g.add_argument("--port", type=int, default=8080)
    g.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY")
    g.add_argument("--voices", default=str(DEFAULT_VOICES), help="voice library folder")
    g.add_argument("--default-voice", default=None,
                   help="saved voice used when a request names none")
    g.add_argument("--lazy", action="store_true", help="load the model on the first request")
    g.add_argument("--max-batch", type=int, default=4,
                   help="requests that arrive together are decoded as one batch of up to this "
                        "many (1: one at a time)")
    g.add_argument("--context-length", type=int, default=None,
                   help="cap prompt + generated tokens (bounds the KV cache)")
    limits = Limits()
    g.add_argument("--max-text-length", type=int, default=limits.max_text_chars)
    g.add_argument("--max-body-mb", type=float, default=limits.max_body_bytes / 2**20)
    g.add_argument("--max-references", type=int, default=limits.max_references)
    g.add_argument("--max-reference-seconds", type=float, default=limits.max_reference_seconds)
    g.add_argument("--timeout", type=float, default=limits.timeout_seconds,
                   help="seconds a request may take, queueing included")


def build_service(args):
    from ..synthesis.synthesizer import Synthesizer
    from .service import Service

    def load():
        return Synthesizer.from_pretrained(
            args.model, device=args.device, dtype=args.precision, compile=args.compile,
            compile_cache=args.compile_cache, quantization=args.quantization,
            models_dir=args.models_dir, download=not args.no_download,
            context_length=args.context_length)

    limits = Limits(max_body_bytes=int(args.max_body_mb * 2**20),
                    max_text_chars=args.max_text_length, max_references=args.max_references,
                    max_reference_seconds=args.max_reference_seconds,
                    timeout_seconds=args.timeout)
    return Service.standalone(load, lazy=args.lazy, voices=[Path(args.voices).expanduser()],
                              model_name=Path(str(args.model)).name, api_key=args.api_key,
                              limits=limits, max_batch=args.max_batch,
                              default_voice=args.default_voice)


def serve(args) -> str:
    from aiohttp import web

    from .routes import create_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    service = build_service(args)
    web.run_app(create_app(service), host=args.host, port=args.port)
    return "server stopped"
