"""``serve/scheduler.py``: a model loaded on the first request (``sailfish serve --lazy``) that
fails to load answers every request waiting on it with a 503 saying so (no server path), nothing
hangs, and the next request tries the load again."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("aiohttp")
try:  # the HTTP client the openai SDK depends on (httpx2 in newer releases)
    import httpx2 as httpx
except ImportError:
    httpx = pytest.importorskip("httpx")

from fish_core.serve.background import BackgroundServer  # noqa: E402
from fish_core.serve.service import Service  # noqa: E402
from test_settings import broken  # noqa: E402, F401 - the fixture: weights that cannot be read

ANSWERED_WITHIN = 20.0  # seconds: a request still waiting then has hung
SPEECH = {"model": "tiny-s2", "input": "Nobody will hear this.", "max_new_tokens": 8}
REQUESTS = [  # (path, body): whole and streamed answers of both dialects, said together
    ("/v1/audio/speech", SPEECH),
    ("/v1/audio/speech", {**SPEECH, "response_format": "pcm", "stream_format": "audio"}),
    ("/v1/audio/speech", {**SPEECH, "stream_format": "sse"}),
    ("/v1/tts", {"text": "Nor this.", "max_new_tokens": 8}),
    ("/v1/tts", {"text": "Nor this one.", "streaming": True, "format": "pcm"}),
]


class Loader:
    """``Synthesizer.from_pretrained`` on ``folder``, counted; the first try waits until
    ``wait_for`` requests are queued, so that they all wait on that one load."""

    def __init__(self, folder, wait_for: int):
        self.folder, self.wait_for, self.tries = folder, wait_for, 0
        self.service: Service | None = None

    def __call__(self):
        from fish_core.local.synthesizer import Synthesizer

        self.tries += 1
        deadline = time.monotonic() + ANSWERED_WITHIN / 2
        while (self.tries == 1 and self.service.scheduler.waiting < self.wait_for
               and time.monotonic() < deadline):
            time.sleep(0.01)
        return Synthesizer.from_pretrained(self.folder, device="cpu", dtype="fp32")


def unavailable(response, folder) -> str:
    """The 503 of a model that cannot be loaded: one line, no server path."""
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "model_unavailable" and error["type"] == "server_error"
    message = error["message"]
    assert "could not be loaded" in message and "\n" not in message
    assert str(folder) not in response.text and folder.name not in response.text
    return message


@pytest.fixture
def lazy_server(request, tmp_path):
    loader = Loader(request.getfixturevalue("broken"), wait_for=len(REQUESTS))
    service = Service.standalone(loader, lazy=True, voices=[tmp_path], model_name="tiny-s2",
                                 max_batch=2)
    loader.service = service
    with BackgroundServer(service) as running:
        yield running, loader
    service.close()


def test_a_model_that_cannot_load_answers_every_waiting_request(lazy_server):
    running, loader = lazy_server
    folder = loader.folder
    with ThreadPoolExecutor(len(REQUESTS)) as pool:
        answers = list(pool.map(lambda item: httpx.post(running.url + item[0], json=item[1],
                                                        timeout=ANSWERED_WITHIN), REQUESTS))
    for response in answers:
        unavailable(response, folder)
    assert loader.tries == 1  # every request waited on the one load
    assert running.service.scheduler.waiting == 0 and not running.service.loaded()
    health = httpx.get(running.url + "/v1/health", timeout=ANSWERED_WITHIN)
    assert health.status_code == 200  # the server still answers
    # the next request tries the load again (the folder may have been mended meanwhile)
    unavailable(httpx.post(running.url + "/v1/tts", json={"text": "Again."},
                           timeout=ANSWERED_WITHIN), folder)
    assert loader.tries == 2


def test_word_timing_on_a_model_that_cannot_load_is_the_same_503(lazy_server):
    """Timed answers (through the queue) and a WebSocket session's word timer
    (``Service.word_timer``, loaded at ``session.config``) get the same answer."""
    import asyncio

    import aiohttp

    running, loader = lazy_server
    folder = loader.folder
    loader.tries = 1  # no wait for a queue
    response = httpx.post(running.url + "/v1/tts/stream/with-timestamp",
                          json={"text": "Timed words."}, timeout=ANSWERED_WITHIN)
    unavailable(response, folder)

    async def session() -> dict:
        url = running.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
        async with aiohttp.ClientSession() as client, client.ws_connect(url) as ws:
            await ws.send_json({"type": "session.config", "word_timestamps": True})
            return await ws.receive_json(timeout=ANSWERED_WITHIN)

    message = asyncio.run(session())
    assert message["type"] == "error" and message["error"]["code"] == "model_unavailable"
    assert str(folder) not in message["error"]["message"]
    assert loader.tries == 3


def test_a_providers_own_refusal_reaches_every_waiting_task(tmp_path):
    """A model provider that refuses with its own ``ApiError`` (ComfyUI's, without a checkpoint)
    is said as it is to every task waiting on it, never left unanswered."""
    import queue
    from contextlib import contextmanager

    from fish_core.serve.http.errors import ApiError
    from fish_core.serve.limits import Limits
    from fish_core.serve.request import SpeechRequest
    from fish_core.serve.scheduler import Scheduler
    from fish_core.serve.voicelib import VoiceLibrary

    @contextmanager
    def no_model():
        raise ApiError(503, "no model: put a checkpoint folder into models/fish_speech",
                       code="model_not_found")
        yield

    scheduler = Scheduler(no_model, VoiceLibrary([tmp_path]), Limits(), max_batch=2)
    answers: queue.Queue = queue.Queue()
    for i in range(3):
        scheduler.submit(SpeechRequest(f"Request {i}."),
                         lambda kind, value: answers.put((kind, value)))
    for _ in range(3):
        kind, error = answers.get(timeout=ANSWERED_WITHIN)
        assert kind == "error" and (error.status, error.code) == (503, "model_not_found")
        assert error.message.startswith("no model: ")
    scheduler.close()
    assert answers.empty()


def test_checked_answers_and_voice_uploads_on_a_model_that_cannot_load_are_the_same_503(
        lazy_server):
    """The two routes that hold the model outside the queue (a checked answer's recogniser, a
    voice upload's encoder) answer a failed load as every other route does."""
    import io

    import soundfile as sf
    import torch

    running, loader = lazy_server
    loader.tries = 1  # no wait for a queue
    response = httpx.post(running.url + "/v1/audio/speech", json={**SPEECH, "check": True},
                          timeout=ANSWERED_WITHIN)
    unavailable(response, loader.folder)
    clip = io.BytesIO()
    sf.write(clip, torch.sin(torch.arange(8000) * 0.05).numpy(), 16000, format="WAV")
    response = httpx.post(running.url + "/v1/audio/voices", data={"name": "me", "text": "Hi."},
                          files={"audio": ("me.wav", clip.getvalue(), "audio/wav")},
                          timeout=ANSWERED_WITHIN)
    unavailable(response, loader.folder)
