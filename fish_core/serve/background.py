"""A server on a background thread with its own event loop (tests, benchmarks, notebooks).

    with BackgroundServer(service) as server:      # 127.0.0.1, a free port
        requests.post(server.url + "/v1/audio/speech", json={...})
"""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web

from .http.logs import ACCESS_LOG
from .routes import create_app
from .service import Service


class BackgroundServer:
    def __init__(self, service: Service, host: str = "127.0.0.1", port: int = 0):
        self.service = service
        self.host, self.port = host, port
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="sailfish-http",
                                        daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> "BackgroundServer":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=60)
        return self

    async def _start(self) -> None:
        self._runner = web.AppRunner(create_app(self.service), access_log=ACCESS_LOG)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]  # the free port the OS picked

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=60)
        self.loop.close()

    def __enter__(self) -> "BackgroundServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
