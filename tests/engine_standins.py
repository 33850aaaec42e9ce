"""Stand-in remote engines for the tests: small aiohttp apps that answer as SGLang-Omni and
vLLM-Omni document (docs/engines.md), on a background loop on a free loopback port, recording
every speech request (``StandIn.requests``) and every voice registration
(``app["registered"]``). Used by the client's tests (test_remote_dialects.py), the nodes'
(test_nodes_remote.py) and the real-ComfyUI test (test_comfyui_e2e.py)."""

import asyncio
import base64
import io
import json
import threading

import numpy as np
import soundfile as sf
from aiohttp import web


class StandIn:
    """An aiohttp app on a background loop, on a free loopback port."""

    def __init__(self, app):
        self.app, self.loop = app, asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.requests: list[dict] = []
        app["seen"] = self.requests

    def __enter__(self):
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=30)
        return self

    async def _start(self):
        self.runner = web.AppRunner(self.app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)


def tone(rate: int, samples: int, hz: float = 300.0) -> np.ndarray:
    return (0.25 * np.sin(2 * np.pi * hz * np.arange(samples) / rate)).astype(np.float32)


def wav(x: np.ndarray, rate: int, subtype: str = "PCM_16") -> bytes:
    out = io.BytesIO()
    sf.write(out, x, rate, format="WAV", subtype=subtype)
    return out.getvalue()


def pcm(x: np.ndarray) -> bytes:
    return (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


def models(owner, ids=("s2-pro",)):
    async def handler(request):
        return web.json_response({"object": "list",
                                  "data": [{"id": i, "object": "model", "owned_by": owner}
                                           for i in ids]})
    return handler


def voice_store(app: web.Application) -> None:
    """SGLang-Omni's and vLLM-Omni's voice store: GET lists, POST multipart ``audio_sample``,
    ``consent`` (required), ``name`` ([A-Za-z0-9_.-]+), ``ref_text``; every POST recorded."""
    app["voices"], app["registered"] = [], []

    async def listing(request):
        return web.json_response({"voices": [{"name": n} for n in request.app["voices"]]})

    async def add(request):
        form = await request.post()
        fields = {k: (v if isinstance(v, str) else v.file.read()) for k, v in form.items()}
        request.app["registered"].append(fields)
        if not fields.get("consent"):
            return web.json_response({"error": {"message": "consent is required"}}, status=400)
        request.app["voices"].append(fields["name"])
        return web.json_response({"name": fields["name"]})

    app.router.add_get("/v1/audio/voices", listing)
    app.router.add_post("/v1/audio/voices", add)


def sglang_app(rate: int, pieces: list[np.ndarray], fail_first: int = 0, legacy: bool = False,
               model_ids=("s2-pro",)) -> web.Application:
    """Today's SGLang-Omni: ``stream`` needs ``response_format: "pcm"``; SSE
    ``audio.speech.chunk`` objects of base64 PCM, a finish chunk, ``data: [DONE]``; references
    by ``audio_path``; ``top_k`` -1 or 1..30. ``legacy``: the older answer (base64 WAV
    chunks). Speech requests' headers are kept in ``app["headers"]``."""
    app = web.Application()
    app["fails"] = fail_first
    app["headers"] = []  # of every speech request

    def refuse(message, param):
        return web.json_response({"error": {"message": message, "type": "BadRequestError",
                                            "param": param, "code": 400}}, status=400)

    async def speech(request):
        body = await request.json()
        request.app["seen"].append(body)
        request.app["headers"].append(dict(request.headers))
        if request.app["fails"] > 0:
            request.app["fails"] -= 1
            return web.json_response({"error": {"message": "engine overloaded"}}, status=503)
        if not body.get("input"):
            return refuse("input: field required", "input")
        if not legacy and body.get("stream") and body.get("response_format") != "pcm":
            return refuse("stream=true requires response_format='pcm'", "response_format")
        if not (body.get("top_k", 30) == -1 or 1 <= body.get("top_k", 30) <= 30):
            return refuse("top_k must be -1 or in [1, 30]", "top_k")
        if any("audio_path" not in r for r in body.get("references", [])):
            return refuse("references[].audio_path: field required", "references")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for index, piece in enumerate(pieces):
            if legacy:
                audio = {"data": base64.b64encode(wav(piece, rate)).decode()}
            else:
                audio = {"data": base64.b64encode(pcm(piece)).decode(), "format": "pcm",
                         "mime_type": "audio/pcm", "sample_rate": rate}
            event = {"id": "speech-1", "object": "audio.speech.chunk", "index": index,
                     "audio": audio, "finish_reason": None}
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        if not legacy:
            done = {"id": "speech-1", "object": "audio.speech.chunk", "index": len(pieces),
                    "audio": None, "finish_reason": "stop"}
            await response.write(f"data: {json.dumps(done)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    app.router.add_post("/v1/audio/speech", speech)
    app.router.add_get("/v1/models", models("sglang-omni", model_ids))
    voice_store(app)
    return app


def vllm_app(rate: int, audio: bytes, stream: bool = False, repeat: int = 1,
             sse: bool = False) -> web.Application:
    """vLLM-Omni: ``stream`` + ``stream_format: "audio"`` + ``pcm`` → a raw chunked s16le body
    (``audio`` sent ``repeat`` times, in odd-sized pieces); ``sse``: OpenAI
    ``speech.audio.delta`` events instead; otherwise ``audio`` whole (the older answer: WAV)."""
    app = web.Application()

    async def speech(request):
        body = await request.json()
        request.app["seen"].append(body)
        if not stream:
            return web.Response(body=audio, content_type="audio/wav")
        if body.get("response_format") != "pcm" or body.get("stream") is not True:
            return web.json_response({"error": {"message": "expected stream + pcm"}},
                                     status=400)
        if sse:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for at in range(0, len(audio), 1000):
                event = {"type": "speech.audio.delta", "response_format": "pcm",
                         "audio": base64.b64encode(audio[at:at + 1000]).decode()}
                await response.write(f"event: speech.audio.delta\ndata: {json.dumps(event)}"
                                     "\n\n".encode())
            await response.write(b'event: speech.audio.done\ndata: {"type": '
                                 b'"speech.audio.done"}\n\n')
            return response
        response = web.StreamResponse(headers={"Content-Type": "audio/pcm"})
        await response.prepare(request)
        for _ in range(repeat):
            for at in range(0, len(audio), 1001):  # odd sizes: a sample across two writes
                await response.write(audio[at:at + 1001])
        await response.write_eof()
        return response

    app.router.add_post("/v1/audio/speech", speech)
    app.router.add_get("/v1/models", models("vllm-omni"))
    voice_store(app)
    return app


def readme_endpoint(name: str) -> dict:
    """The endpoints-file entry ``name`` as the operator's docs show it (in one of the JSON
    blocks of docs/remote.md, linked from the README, or docs/security.md): what an example
    workflow that names ``name`` needs configured."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for page in (root / "docs" / "remote.md", root / "docs" / "security.md"):
        text = page.read_text(encoding="utf-8") if page.is_file() else ""
        for block in re.findall(r"```json\n(.*?)```", text, re.DOTALL):
            entries = json.loads(block).get("endpoints", {})
            if name in entries:
                return entries[name]
    raise LookupError(f"docs/remote.md and docs/security.md show no endpoints-file entry {name!r}")
