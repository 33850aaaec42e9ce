"""Headless-browser check of the live-playback extension (web/js/sailfish_playback.js) in a real
ComfyUI: the page loads with the pack, a Sailfish TTS workflow is queued, the node's player
goes waiting → live → done, the workflow's widget values are unchanged by the player, the
setting turns the stream off, and the console shows no error from the extension. Then the
"speech with captions" example (the TTS node's words on): a 'words' event comes before 'done'
and the player shows the words as they are spoken, in the text's order, each while the
playhead is within its times (live once the words came, and on a replay with Play).

A helper script, not a pytest test (it needs chromium and a ComfyUI checkout):

    COMFYUI_DIR=PATH/TO/ComfyUI COMFYUI_PYTHON=PATH/TO/ComfyUI/venv/bin/python \\
        PYTHONPATH=. python3 tests/browser_playback_check.py [--front-end-root DIR] \\
        [--chromium PATH] [--words-only]

``--front-end-root`` runs ComfyUI with another frontend (e.g. a ``pip install --target``
of ``comfyui-frontend-package``: ``…/comfyui_frontend_package/static``);
``SAILFISH_SCREENSHOT=FILE.png`` saves the page while the player shows a word. It prints every
console error and warning, marks the extension's own, and exits 1 if there is any of ours or a
check fails; exits 0 with a note when chromium is absent.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
WORKFLOW = TESTS.parent / "example_workflows" / "Sailfish TTS - text to speech.json"
CAPTIONS = TESTS.parent / "example_workflows" / "Sailfish TTS - speech with captions.json"
OURS = ("sailfish", "/sailfish/live")
PAGE_SECONDS = 120
LEAD = 0.12  # the player's lead before its first chunk (sailfish_playback.js)
TOLERANCE = 0.15  # seconds between the page's clock and the audio's
SCREENSHOT = os.environ.get("SAILFISH_SCREENSHOT")  # a PNG path: the player speaking a word


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Page:
    """One Chrome tab over the DevTools protocol: commands, console messages, evaluation."""

    def __init__(self, ws):
        self.ws, self.next_id, self.pending, self.console = ws, 0, {}, []

    async def pump(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            elif data.get("method") == "Runtime.consoleAPICalled":
                p = data["params"]
                if p["type"] in ("error", "warning", "assert"):
                    text = " ".join(str(a.get("value", a.get("description", "")))
                                    for a in p["args"])
                    where = " ".join(f["url"] for f in p.get("stackTrace", {})
                                     .get("callFrames", []))
                    self.console.append((p["type"], text, where))
            elif data.get("method") == "Runtime.exceptionThrown":
                d = data["params"]["exceptionDetails"]
                self.console.append(("exception", d.get("exception", {}).get("description", d[
                    "text"]), d.get("url", "")))
            elif data.get("method") == "Log.entryAdded":
                e = data["params"]["entry"]
                if e["level"] in ("error", "warning"):
                    self.console.append((e["level"], e["text"], e.get("url", "")))

    async def send(self, method: str, **params) -> dict:
        self.next_id += 1
        future = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = future
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        answer = await asyncio.wait_for(future, 60)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    async def eval(self, expression: str):
        result = await self.send("Runtime.evaluate", expression=expression, awaitPromise=True,
                                 returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page error: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def until(self, expression: str, seconds: float = PAGE_SECONDS):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = await self.eval(expression)
            if value:
                return value
            await asyncio.sleep(0.25)
        raise TimeoutError(f"page never reached: {expression}")

    async def click(self, x: int = 4, y: int = 4) -> None:
        """A real user gesture (what the Queue click is to the browser)."""
        for kind in ("mousePressed", "mouseReleased"):
            await self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left",
                            clickCount=1)


SETUP = """(async () => {
  const app = window.comfyAPI.app.app, api = window.comfyAPI.api.api;
  window.__live = [];
  window.__words = null;  // the words event's words
  api.addEventListener("sailfish.live", (e) => {
    window.__live.push(e.detail.state);
    if (e.detail.state === "words") window.__words = e.detail.words;
  });
  await app.loadGraphData(%s);
  for (const node of app.graph.nodes ?? app.graph._nodes) {
    for (const w of node.widgets ?? []) {
      if (w.name === "model") w.value = "tiny-s2";
      if (w.name === "max_new_tokens") w.value = 48;
      if (w.name === "control_after_generate") w.value = "fixed"; // we set the seed
      if (w.name === "text" && node.type === "SailfishTTS") {  // not the Note's text
        w.value = "Live in the browser. Every chunk is played as it comes.";
      }
    }
  }
  window.__reseed = () => { // a new seed: ComfyUI would serve an unchanged prompt from cache
    const tts = (app.graph.nodes ?? app.graph._nodes).find((n) => n.type === "SailfishTTS");
    tts.widgets.find((w) => w.name === "seed").value = Math.floor(Math.random() * 1e9);
    return true;
  };
  window.__reseed();
  return app.extensions.some((e) => e.name === "Sailfish.LivePlayback");  // ours loaded
})()"""
WIDGET_VALUES = """(() => {
  const app = window.comfyAPI.app.app;
  const tts = (app.graph.nodes ?? app.graph._nodes).find((n) => n.type === "SailfishTTS");
  const saved = app.graph.serialize().nodes.find((n) => String(n.id) === String(tts.id));
  return JSON.stringify(saved?.widgets_values ?? ["no such node", tts.id,
    app.graph.serialize().nodes.map((n) => n.id)]);
})()"""
PLAYER = """(() => {
  const el = document.querySelector(".sailfish-live");
  if (!el) return null;
  const [play, listen] = el.querySelectorAll("button");
  return {state: el.querySelector(".state").textContent, play: play.textContent,
          listen: listen.style.display !== "none",
          words: el.querySelector(".word").style.display !== "none"};
})()"""
LISTEN_AT = """(() => {
  const r = document.querySelector(".sailfish-live .listen").getBoundingClientRect();
  return [Math.round(r.x + r.width / 2), Math.round(r.y + r.height / 2)];
})()"""
EMPTY_CANVAS = """(() => {  // a point on the graph canvas with no node: a harmless click
  const app = window.comfyAPI.app.app;
  for (let y = 150; y < 850; y += 40) {
    for (let x = 150; x < 1300; x += 40) {
      const el = document.elementFromPoint(x, y);
      if (el?.id !== "graph-canvas") continue;
      const [cx, cy] = app.canvas.convertEventToCanvasOffset({clientX: x, clientY: y});
      if (!app.graph.getNodeOnPos(cx, cy)) return [x, y];
    }
  }
  return [700, 450];
})()"""
IDLE = ("fetch('/queue').then(r => r.json()).then(q => "
        "!q.queue_running.length && !q.queue_pending.length)")
DIAGNOSE = """(async () => {
  const api = window.comfyAPI.api.api;
  const history = await (await fetch("/history?max_items=1")).json();
  const last = Object.values(history)[0];
  return JSON.stringify({clientId: api.clientId, initial: api.initialClientId,
    live: window.__live, status: last?.status, queue: await (await fetch("/queue")).json()});
})()"""
QUEUE = "window.comfyAPI.app.app.queuePrompt(0).then(() => true)"
# Three batches between pauses: the words at three times apart, whatever the tiny models say.
SPEAK_WORDS = """(() => {
  const app = window.comfyAPI.app.app;
  const tts = (app.graph.nodes ?? app.graph._nodes).find((n) => n.type === "SailfishTTS");
  tts.widgets.find((w) => w.name === "text").value =
    "Live in the browser. [pause:600ms] Every word is shown. [pause:600ms] As it is spoken.";
  return tts.widgets.find((w) => w.name === "words").value;  // auto, as in the example
})()"""
# What the player's word element shows, each change with its page time (ms).
WATCH_WORDS = """(() => {
  window.__shown = [];
  let last = null;
  window.__watch = setInterval(() => {
    const el = document.querySelector(".sailfish-live .word");
    const text = el && el.style.display !== "none" ? el.textContent : null;
    const button = document.querySelector(".sailfish-live button")?.textContent;
    if (text !== last || button !== window.__button) {
      window.__shown.push([performance.now(), text, button]);
    }
    last = text;
    window.__button = button;
  }, 10);
  return true;
})()"""
REPLAY = """(() => {  // the player's Play button, pressed once the run is done and played
  const play = document.querySelector(".sailfish-live button");
  window.__shown = [];
  window.__t0 = performance.now();
  play.click();
  return play.textContent;
})()"""


@asynccontextmanager
async def headless_page(chromium: str, *flags: str):
    """A headless chromium showing one page, driven over the DevTools protocol: yields
    ``(page, session)`` (an aiohttp session the caller may use too); the browser and its
    profile are gone afterwards."""
    port = free_port()
    profile = tempfile.mkdtemp(prefix="sailfish-chrome-")
    proc = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={profile}", f"--remote-debugging-port={port}", *flags, "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async with aiohttp.ClientSession() as session:
            targets = []
            for _ in range(100):
                try:
                    async with session.get(f"http://127.0.0.1:{port}/json/list") as r:
                        targets = [t for t in await r.json() if t["type"] == "page"]
                    if targets:
                        break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.2)
            async with session.ws_connect(targets[0]["webSocketDebuggerUrl"],
                                          max_msg_size=64 << 20) as ws:
                page = Page(ws)
                pump = asyncio.create_task(page.pump())
                try:
                    yield page, session
                finally:
                    pump.cancel()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(profile, ignore_errors=True)


async def check(url: str, chromium: str, gesture: bool, baseline: bool = False
                ) -> tuple[list, list]:
    """One browser session; returns (failed checks, console messages). ``baseline``: only
    load the page, with the extension's file blocked (the console of ComfyUI without it)."""
    failed = []
    flags = ("--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--window-size=1400,900")
    async with headless_page(chromium, *flags) as (page, _):
        for domain in ("Runtime", "Log", "Page", "Network"):
            await page.send(f"{domain}.enable")
        # The whole 1400 x 900 as the page's viewport (new headless takes its own
        # bars off the window size): the player's buttons stay on screen to click.
        await page.send("Emulation.setDeviceMetricsOverride", width=1400, height=900,
                        deviceScaleFactor=1, mobile=False)
        if baseline:
            await page.send("Network.setBlockedURLs", urls=["*sailfish_playback.js"])
        await page.send("Page.navigate", url=url)
        await page.until("!!(window.comfyAPI?.app?.app?.graph && "
                         "window.comfyAPI.app.app.extensions?.length)")
        await asyncio.sleep(2)  # let the other extensions settle
        if not await page.eval(SETUP % WORKFLOW.read_text()) and not baseline:
            failed.append("the extension did not register")
        if baseline:  # the same workflow queued twice, without the extension
            for _ in range(2):
                await page.eval("(window.__reseed(), true)")
                await page.eval(QUEUE)
                await asyncio.sleep(1.0)
                await page.until(IDLE)
            await asyncio.sleep(2)
            return [], page.console
        before = await page.eval(WIDGET_VALUES)
        if gesture:
            await page.click(*await page.eval(EMPTY_CANVAS))
        await page.eval(QUEUE)
        try:
            await page.until("window.__live.includes('done') || "
                             "window.__live.includes('error')")
        except TimeoutError:
            print(f"    no live stream; page state: {await page.eval(DIAGNOSE)}")
            raise
        live = await page.eval("window.__live")
        if live[0] != "start" or live[-1] != "done" or "chunk" not in live:
            failed.append(f"events: {live}")
        player = await page.until(PLAYER)
        await asyncio.sleep(0.5)
        player = await page.eval(PLAYER)
        print(f"    player after the run: {player}")
        if player["words"]:
            failed.append("a word box on the player with the node's words off")
        if gesture and (player["state"] != "done" or player["listen"]):
            failed.append(f"with a gesture, the player should play: {player}")
        if not gesture:  # autoplay blocked: a Listen button, and a click on it plays
            if not player["listen"]:
                print("    (this browser let audio start without a gesture)")
            else:
                x, y = await page.eval(LISTEN_AT)
                await page.click(x, y)
                await asyncio.sleep(1.0)
                player = await page.eval(PLAYER)
                print(f"    player after clicking Listen: {player}")
                if player["listen"] or player["state"] != "done":
                    failed.append(f"Listen did not start the audio: {player}")
        if await page.eval(WIDGET_VALUES) != before:
            failed.append("the player changed the workflow's widget values")
        prompt = await page.eval("window.comfyAPI.app.app.graphToPrompt()"
                                 ".then((p) => JSON.stringify(p.output))")
        if "sailfish_live" in prompt:
            failed.append("the player leaked into the API prompt")
        # The setting off: the server is told, and sends nothing.
        await page.eval("window.comfyAPI.app.app.extensionManager.setting"
                        ".set('Sailfish.LivePlayback', false).then(() => true)")
        await asyncio.sleep(1.0)
        player = await page.eval(PLAYER)  # playback stopped by the setting
        await page.eval("(window.__live = [], window.__reseed())")
        await page.eval(QUEUE)
        await asyncio.sleep(1.0)
        await page.until(IDLE)
        if await page.eval("window.__live.length"):
            failed.append("events arrived with the setting off")
        if await page.eval(PLAYER) != player:
            failed.append("the player changed with the setting off")
        await page.eval("window.comfyAPI.app.app.extensionManager.setting"
                        ".set('Sailfish.LivePlayback', true).then(() => true)")
        await asyncio.sleep(1.0)
        return failed, page.console


def shown_words(shown: list, t0: float) -> list[tuple[float, str]]:
    """The word element's non-empty texts as (seconds after t0, word)."""
    return [((t - t0) / 1000, w) for t, w, *_ in shown if w]


def words_problems(words: list, seen: list[tuple[float, str]], lead: float,
                   tolerance: float = None, least: int = 3) -> list[str]:
    """What is wrong with the words ``seen`` (seconds after Play, text) against the words
    event: each is a word of the text, they come in the text's order, each is shown while
    its time (plus the player's ``lead``) is within ``tolerance`` (``TOLERANCE``) of the
    playhead, and at least ``least`` of them (as many as their distinct times) are shown."""
    tolerance = TOLERANCE if tolerance is None else tolerance
    failed, index = [], 0
    for at, text in seen:
        later = [i for i in range(index, len(words)) if words[i]["text"] == text]
        if not later:
            failed.append(f"{text!r} at {at:.2f} s is not the next word of {words}")
            continue
        index = later[0]
        w = words[index]
        start, end = w["start"] + lead, max(w["end"], w["start"] + 0.08) + lead
        if not start - tolerance <= at <= end + tolerance:
            failed.append(f"{text!r} shown at {at:.2f} s, spoken {start:.2f}-{end:.2f} s")
    distinct = {round(w["start"], 2) for w in words}
    if len({t for _, t in seen}) < min(least, len(distinct)):
        failed.append(f"only {[t for _, t in seen]} shown of {len(words)} words")
    return failed


async def check_words(url: str, chromium: str) -> tuple[list, list]:
    """The captions example (its TTS node's words on): the player shows the words as they are
    spoken, live and on a replay, from the words event's times."""
    failed = []
    flags = ("--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--window-size=1400,900")
    async with headless_page(chromium, *flags) as (page, _):
        for domain in ("Runtime", "Log", "Page"):
            await page.send(f"{domain}.enable")
        await page.send("Emulation.setDeviceMetricsOverride", width=1400, height=900,
                        deviceScaleFactor=1, mobile=False)
        await page.send("Page.navigate", url=url)
        await page.until("!!(window.comfyAPI?.app?.app?.graph && "
                         "window.comfyAPI.app.app.extensions?.length)")
        await asyncio.sleep(2)
        if not await page.eval(SETUP % CAPTIONS.read_text()):
            failed.append("the extension did not register")
        await page.eval(SPEAK_WORDS)
        before = await page.eval(WIDGET_VALUES)
        await page.click(*await page.eval(EMPTY_CANVAS))  # a gesture: audio may start
        await page.eval(WATCH_WORDS)
        await page.eval(QUEUE)
        await page.until("window.__live.includes('done') || window.__live.includes('error')")
        live = await page.eval("window.__live")
        words = await page.eval("window.__words") or []
        print(f"    events: {[s for i, s in enumerate(live) if s != 'chunk' or i < 2]}…")
        timed = [(w["text"], round(w["start"], 2), round(w["end"], 2)) for w in words]
        print(f"    words event: {timed}")
        if live[-1] != "done" or "words" not in live or live.index("words") > live.index("done"):
            failed.append(f"no words event before done: {live}")
        await page.until("!document.querySelector('.sailfish-live button')"
                         ".textContent.includes('Stop')", 60)  # the live play ends
        first = await page.eval("window.__shown")
        playing = next((t for t, _, button in first if "Stop" in button), first[0][0])
        live_seen = shown_words(first, playing)
        print("    shown while live (s after the audio started; the words come after the "
              f"last chunk): {[(round(a, 2), w) for a, w in live_seen]}")
        # Live, the chunks may wait for generation: the text's order, times not checked.
        failed += [f"live: {p}" for p in words_problems(words, live_seen, LEAD, 1e9, 0)]
        await asyncio.sleep(0.5)
        print(f"    Play pressed again: {await page.eval(REPLAY)}")
        await page.until("document.querySelector('.sailfish-live button')"
                         ".textContent.includes('Stop')", 10)
        if SCREENSHOT:  # a word on the player before and after the capture
            word = "document.querySelector('.sailfish-live .word').textContent"
            for _ in range(100):
                before_shot = await page.eval(word)
                if not before_shot:
                    await asyncio.sleep(0.02)
                    continue
                shot = await page.send("Page.captureScreenshot", format="png")
                if await page.eval(word) == before_shot:
                    Path(SCREENSHOT).write_bytes(base64.b64decode(shot["data"]))
                    print(f"    screenshot with {before_shot!r} on the player: {SCREENSHOT}")
                    break
        await page.until("!document.querySelector('.sailfish-live button')"
                         ".textContent.includes('Stop')", 60)
        t0, shown = await page.eval("[window.__t0, window.__shown]")
        seen = shown_words(shown, t0)
        print(f"    shown on replay (s after Play): {[(round(a, 2), w) for a, w in seen]}")
        failed += words_problems(words, seen, LEAD)
        if await page.eval(WIDGET_VALUES) != before:
            failed.append("the player changed the workflow's widget values")
        await page.eval("clearInterval(window.__watch), true")
        return failed, page.console


def normal(text: str) -> str:
    return re.sub(r"127\.0\.0\.1:\d+", "HOST", text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--front-end-root", help="a comfyui_frontend_package/static folder")
    parser.add_argument("--chromium", default=shutil.which("chromium")
                        or shutil.which("chromium-browser") or shutil.which("google-chrome"))
    parser.add_argument("--words-only", action="store_true",
                        help="only the check of the words shown as they are spoken")
    args = parser.parse_args()
    if not args.chromium:
        print("SKIP: no chromium on PATH (Debian: apt-get install chromium)")
        return 0
    if not os.environ.get("COMFYUI_DIR"):
        print("SKIP: set COMFYUI_DIR (and COMFYUI_PYTHON) to a ComfyUI checkout")
        return 0
    from test_comfyui_e2e import Server  # the e2e test's server, with the tiny checkpoint

    extra = ("--front-end-root", args.front_end_root) if args.front_end_root else ()
    server = Server(Path(tempfile.mkdtemp(prefix="sailfish-browser-")),
                    Path(os.environ["COMFYUI_DIR"]).resolve(), extra)
    server.start()
    bad = 0
    try:
        _, base = asyncio.run(check(server.url, args.chromium, False, baseline=True))
        known = {normal(text) for _, text, _ in base}
        print(f"-- baseline (the extension blocked, the workflow queued twice): {len(base)} "
              "console errors/warnings")
        for kind, text, where in base:
            print(f"    {kind}: {text[:200]} {where[:100]}")
        front = args.front_end_root or "bundled"
        runs = [] if args.words_only else [
            (f"frontend {front}, with a user gesture before Queue",
             lambda: check(server.url, args.chromium, True)),
            (f"frontend {front}, without a user gesture before Queue",
             lambda: check(server.url, args.chromium, False))]
        runs.append((f"frontend {front}, the words as they are spoken ({CAPTIONS.stem})",
                     lambda: check_words(server.url, args.chromium)))
        for title, run in runs:
            print(f"-- {title}")
            failed, console = asyncio.run(run())
            for kind, text, where in console:
                if normal(text) in known:
                    continue  # also there without the extension
                ours = any(o in (text + " " + where).lower() for o in OURS)
                bad += kind in ("error", "exception", "assert")
                print(f"    NEW {'(ours) ' if ours else ''}{kind}: {text[:300]} {where[:120]}")
            for f in failed:
                print(f"    FAILED: {f}")
            bad += len(failed)
            new = sum(normal(text) not in known for _, text, _ in console)
            print(f"    {new} console errors/warnings beyond the baseline, "
                  f"{len(failed)} failed checks")
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)
    print("OK" if not bad else f"{bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
