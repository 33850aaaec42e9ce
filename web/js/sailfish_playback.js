// Sailfish live playback: hear the speech while a Sailfish node generates it.
//
// The server sends the node's audio, piece by piece, to this tab only (the one that queued the
// prompt) as "sailfish.live" websocket events (nodes/playback.py). It does so only while this tab
// says it listens: we post {client_id, listen} to /sailfish/live when the socket (re)connects
// and when the setting "Sailfish.LivePlayback" changes, so with the setting off the server does
// no live work at all.
//
// Playback: Web Audio, one AudioBufferSourceNode per chunk scheduled at a running time, so the
// chunks join without gaps (unless generation is slower than real time). The AudioContext is
// made or resumed on a user gesture (the Queue click or key); if the browser still blocks it,
// the node's player shows a "Listen" button. Cancel stops playback.
//
// Only stable extension APIs: app.registerExtension (with its settings field), api events and
// fetchApi, app.extensionManager.setting, node.addDOMWidget (skipped when missing).

import { app } from "../../../scripts/app.js";
import { api } from "../../../scripts/api.js";

const EVENT = "sailfish.live";
const SETTING = "Sailfish.LivePlayback";
const ROUTE = "/sailfish/live";
const LEAD = 0.12; // seconds between "now" and the first scheduled chunk
const IDLE_SUSPEND_MS = 15000; // suspend the AudioContext after this long without audio
const PEAK_BLOCK = 256; // samples per waveform peak
const FINAL = new Set(["done", "cancelled", "error"]);
const LABEL = {
  waiting: "waiting for audio…", live: "live", done: "done", cancelled: "cancelled",
  error: "stopped by an error", blocked: "the browser blocked audio",
};

const RESUME_WAIT_MS = 600; // how long a resume may take before we call audio blocked
let ctx = null; // the AudioContext
let idleTimer = null;
const current = new Map(); // node id -> its latest Stream
const playing = new Set(); // Streams with scheduled sources

// ---------------------------------------------------------------- setting and server
let wanted = null; // the setting as its onChange last gave it (called before it is stored)

function enabled() {
  if (wanted !== null) return wanted;
  try {
    const value = app.extensionManager?.setting?.get?.(SETTING);
    return value !== false;
  } catch {
    return true;
  }
}

let told = null; // {clientId, listen} the server last accepted
let telling = null;
let again = false;

async function tellServer(force = false) {
  const clientId = api.clientId ?? api.initialClientId;
  if (!clientId) return;
  const listen = enabled();
  if (!force && told && told.clientId === clientId && told.listen === listen) return;
  if (telling) {
    again = true; // one request at a time: check again when this one is answered
    return;
  }
  telling = { clientId, listen };
  try {
    const response = await api.fetchApi(ROUTE, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ client_id: clientId, listen }),
    });
    told = response.ok ? telling : { ...telling, failed: true }; // no retry loop
  } catch {
    told = { ...telling, failed: true };
  } finally {
    telling = null;
    if (again) {
      again = false;
      tellServer(false);
    }
  }
}

// ---------------------------------------------------------------- audio context
function makeContext() {
  const Context = window.AudioContext ?? window.webkitAudioContext;
  if (!Context) return null;
  try {
    return new Context({ sampleRate: 44100, latencyHint: "playback" }); // the codec's rate
  } catch {
    return new Context();
  }
}

function unlock() {
  // Called on user gestures: make or resume the context while the browser allows it.
  if (!enabled()) return;
  if (!ctx) ctx = makeContext();
  if (ctx && ctx.state === "suspended") {
    ctx.resume().then(resumeBlocked, () => {});
    keepAwake();
  }
}

function anyLive() {
  for (const s of current.values()) if (s.state === "waiting" || s.state === "live") return true;
  return false;
}

function resumeBlocked() {
  for (const s of current.values()) if (s.blocked && s.wanted) s.play();
}

function queueEnd(except) {
  // ctx time at which the audio already scheduled by other streams ends.
  let end = 0;
  for (const s of playing) if (s !== except && s.sources.size) end = Math.max(end, s.time);
  return end;
}

function keepAwake() {
  clearTimeout(idleTimer);
  idleTimer = setTimeout(() => {
    if (ctx && !playing.size && !anyLive() && ctx.state === "running") ctx.suspend();
  }, IDLE_SUSPEND_MS);
}

// ---------------------------------------------------------------- one node run's audio
class Stream {
  constructor(nodeId, promptId) {
    this.nodeId = nodeId;
    this.promptId = promptId;
    this.state = "waiting";
    this.sampleRate = 44100;
    this.pieces = []; // {offset, length, samples: Float32Array | null (silence)}
    this.total = 0; // samples received
    this.peaks = []; // one per PEAK_BLOCK samples
    this.wanted = enabled(); // the user wants to hear it (Stop clears it)
    this.blocked = false;
    this.sources = new Set();
    this.scheduled = 0; // pieces scheduled so far
    this.time = 0; // ctx time at which the next piece starts
    this.marks = []; // [ctx time, sample offset] of each scheduled piece, for the playhead
    this.words = []; // [{text, start, end}] seconds, when the node timed its words
  }

  wordAt(samples) {
    // The word being spoken at this playhead (samples), or "".
    const t = samples / this.sampleRate;
    for (const w of this.words) {
      if (w.start <= t && t < Math.max(w.end, w.start + 0.08)) return String(w.text);
    }
    return "";
  }

  add(event) {
    const length = event.samples | 0;
    if (length <= 0 || event.offset !== this.total) return; // out of order: ignore
    this.sampleRate = event.sample_rate || this.sampleRate;
    let samples = null;
    if (!event.silence && typeof event.pcm === "string") {
      const bytes = Uint8Array.from(atob(event.pcm), (c) => c.charCodeAt(0));
      const ints = new Int16Array(bytes.buffer, 0, Math.min(length, bytes.length >> 1));
      samples = new Float32Array(length);
      for (let i = 0; i < ints.length; i++) samples[i] = ints[i] / 32767;
    }
    this.pieces.push({ offset: this.total, length, samples });
    for (let i = 0; i < length; i += PEAK_BLOCK) {
      let peak = 0;
      if (samples) {
        for (let j = i; j < Math.min(i + PEAK_BLOCK, length); j++) {
          peak = Math.max(peak, Math.abs(samples[j]));
        }
      }
      this.peaks.push(peak);
    }
    this.total += length;
    this.state = "live";
    if (this.wanted) this.play();
  }

  play() {
    // Start (or keep) scheduling from where scheduling stopped.
    this.wanted = true;
    if (!ctx && navigator.userActivation?.hasBeenActive === false) {
      this.blocked = true; // no gesture yet: the browser would refuse; ask for a click
      return;
    }
    if (!ctx) ctx = makeContext();
    if (!ctx) return;
    if (ctx.state !== "running") {
      this.resuming(); // allowed once the page has had a user gesture; else "Listen"
      return;
    }
    this.blocked = false;
    if (!this.sources.size && this.scheduled === 0) {
      this.time = Math.max(queueEnd(this), ctx.currentTime + LEAD); // after other nodes' audio
      this.marks = []; // a replay: the last play's marks would put the playhead past the end
    }
    for (; this.scheduled < this.pieces.length; this.scheduled++) {
      const piece = this.pieces[this.scheduled];
      if (this.time < ctx.currentTime + 0.01) this.time = ctx.currentTime + LEAD; // underrun
      this.marks.push([this.time, piece.offset]);
      if (piece.samples) {
        const buffer = ctx.createBuffer(1, piece.length, this.sampleRate);
        buffer.getChannelData(0).set(piece.samples);
        const source = ctx.createBufferSource();
        source.buffer = buffer;
        source.connect(ctx.destination);
        source.onended = () => {
          this.sources.delete(source);
          this.settle();
        };
        source.start(this.time);
        this.sources.add(source);
      }
      this.time += piece.length / this.sampleRate;
    }
    playing.add(this);
    keepAwake();
    animate();
  }

  resuming() {
    if (this.waiting) return;
    this.waiting = true;
    const again = () => {
      this.waiting = false;
      if (ctx.state === "running") {
        if (this.wanted) this.play();
      } else {
        this.blocked = true; // shown as a Listen button: a click is a gesture
      }
      draw(this);
    };
    const timer = setTimeout(again, RESUME_WAIT_MS);
    ctx.resume().then(() => {
      clearTimeout(timer);
      again();
    }, () => {});
  }

  stop() {
    this.wanted = false;
    this.blocked = false;
    for (const source of this.sources) {
      try {
        source.stop();
      } catch {
        /* not started yet */
      }
    }
    this.sources.clear();
    this.scheduled = 0; // Play starts again from the beginning
    this.marks = [];
    this.settle();
  }

  settle() {
    if (!this.sources.size && (FINAL.has(this.state) || !this.wanted)) {
      playing.delete(this);
      if (this.wanted && this.scheduled >= this.pieces.length) this.scheduled = 0; // replayable
    }
    draw(this);
  }

  close(state) {
    this.state = state;
    if (state === "cancelled") this.stop();
    this.settle();
  }

  get isPlaying() {
    return this.sources.size > 0;
  }

  get playhead() {
    // Samples played so far (for drawing), from the last piece that has started.
    if (!ctx || !this.isPlaying) return null;
    let at = null;
    for (const [time, offset] of this.marks) {
      if (time <= ctx.currentTime) at = offset + (ctx.currentTime - time) * this.sampleRate;
    }
    return at;
  }
}

// ---------------------------------------------------------------- events from the server
function onLive(event) {
  const data = event.detail;
  if (!enabled() || !data || typeof data !== "object" || data.node == null) return;
  const nodeId = String(data.node);
  let stream = current.get(nodeId);
  if (data.state === "start" || !stream || stream.promptId !== data.prompt_id) {
    stream = new Stream(nodeId, data.prompt_id);
    current.set(nodeId, stream);
  }
  if (data.state === "chunk") stream.add(data);
  else if (data.state === "words") stream.words = Array.isArray(data.words) ? data.words : [];
  else if (FINAL.has(data.state)) stream.close(data.state);
  draw(stream);
}

function onInterrupted() {
  for (const stream of current.values()) {
    if (stream.state === "waiting" || stream.state === "live") stream.close("cancelled");
    else stream.stop();
  }
}

// ---------------------------------------------------------------- the player on the node
const STYLE = `
.sailfish-live { display: flex; align-items: center; gap: 6px; width: 100%; height: 100%;
  box-sizing: border-box; padding: 2px 4px; font: 11px sans-serif; color: var(--fg-color, #ddd); }
.sailfish-live button { font: inherit; padding: 1px 8px; border-radius: 4px; cursor: pointer;
  border: 1px solid var(--border-color, #555); background: var(--comfy-input-bg, #222);
  color: inherit; }
.sailfish-live canvas { flex: 1; min-width: 40px; height: 28px; }
.sailfish-live .state { min-width: 64px; opacity: 0.8; }
.sailfish-live .word { min-width: 72px; font-weight: bold; white-space: nowrap; overflow: hidden; }
.sailfish-live .listen { border-color: #4a9; }
`;

function addStyle() {
  if (document.getElementById("sailfish-live-style")) return;
  const style = document.createElement("style");
  style.id = "sailfish-live-style";
  style.textContent = STYLE;
  document.head.appendChild(style);
}

function findNode(nodeId) {
  const graph = app.graph;
  if (!graph?.getNodeById) return null;
  return graph.getNodeById(nodeId) ?? graph.getNodeById(Number(nodeId)) ?? null;
}

function player(stream) {
  // The node's player element (made on first use), or null if the node is not on the canvas.
  const node = findNode(stream.nodeId);
  if (!node) return null;
  if (node.sailfishLive) return node.sailfishLive;
  if (typeof node.addDOMWidget !== "function") return null;
  addStyle();
  const root = document.createElement("div");
  root.className = "sailfish-live";
  const button = document.createElement("button");
  const listen = document.createElement("button");
  listen.className = "listen";
  listen.textContent = "🔊 Listen";
  const canvas = document.createElement("canvas");
  const state = document.createElement("span");
  state.className = "state";
  const word = document.createElement("span");
  word.className = "word"; // the word being spoken (the node's words input on)
  root.append(button, listen, canvas, word, state);
  const ui = { root, button, listen, canvas, word, state, node };
  button.addEventListener("click", () => {
    const s = current.get(stream.nodeId);
    if (!s) return;
    if (s.isPlaying || (s.wanted && s.state === "live")) s.stop();
    else s.play();
    draw(s);
  });
  listen.addEventListener("click", () => {
    unlock();
    const s = current.get(stream.nodeId);
    if (s) s.play();
    if (s) draw(s);
  });
  const widget = node.addDOMWidget("sailfish_live", "sailfish_live", root, {
    serialize: false, hideOnZoom: false, getMinHeight: () => 36, getMaxHeight: () => 36,
    getValue: () => undefined, setValue: () => {},
  });
  if (widget) {
    widget.serialize = false; // never part of the workflow's widget values
    widget.computeLayoutSize = () => ({ minHeight: 36, maxHeight: 36, minWidth: 0 });
  }
  node.sailfishLive = ui;
  node.setSize?.([node.size[0], Math.max(node.size[1], node.computeSize?.()[1] ?? 0)]);
  app.graph.setDirtyCanvas?.(true, true);
  return ui;
}

function draw(stream) {
  if (current.get(stream.nodeId) !== stream) return;
  const ui = player(stream);
  if (!ui) return;
  const label = stream.blocked ? "blocked" : stream.state;
  ui.state.textContent = LABEL[label] ?? label;
  ui.button.textContent = stream.isPlaying || (stream.wanted && stream.state === "live")
    ? "■ Stop" : "▶ Play";
  ui.button.disabled = stream.total === 0 && stream.state !== "live";
  ui.listen.style.display = stream.blocked ? "" : "none";
  const canvas = ui.canvas;
  const ratio = window.devicePixelRatio || 1;
  const width = Math.max(1, Math.round(canvas.clientWidth * ratio));
  const height = Math.max(1, Math.round(canvas.clientHeight * ratio));
  if (canvas.width !== width || canvas.height !== height) {
    canvas.width = width;
    canvas.height = height;
  }
  const g = canvas.getContext("2d");
  if (!g) return;
  g.clearRect(0, 0, width, height);
  const peaks = stream.peaks;
  const live = stream.state === "live" || stream.state === "waiting";
  g.fillStyle = live ? "#4a9" : stream.state === "done" ? "#69c" : "#888";
  if (peaks.length) {
    const per = peaks.length / width;
    for (let x = 0; x < width; x++) {
      let peak = 0;
      const end = Math.min(peaks.length, Math.ceil((x + 1) * per));
      for (let i = Math.floor(x * per); i < end; i++) peak = Math.max(peak, peaks[i]);
      const h = Math.max(1, peak * height);
      g.fillRect(x, (height - h) / 2, 1, h);
    }
  }
  const at = stream.playhead;
  ui.word.textContent = at != null && stream.words.length ? stream.wordAt(at) : "";
  ui.word.style.display = stream.words.length ? "" : "none";
  if (at != null && stream.total) {
    g.fillStyle = "#fff";
    g.fillRect(Math.min(width - 1, (at / stream.total) * width), 0, Math.max(1, ratio), height);
  }
}

let animating = false;

function animate() {
  if (animating) return;
  animating = true;
  const frame = () => {
    for (const stream of playing) draw(stream);
    if (playing.size) requestAnimationFrame(frame);
    else animating = false;
  };
  requestAnimationFrame(frame);
}

// ---------------------------------------------------------------- registration
api.addEventListener(EVENT, onLive);
api.addEventListener("execution_interrupted", onInterrupted);
api.addEventListener("status", () => tellServer(false));
api.addEventListener("reconnected", () => tellServer(true));

app.registerExtension({
  name: "Sailfish.LivePlayback",
  settings: [
    {
      id: SETTING,
      category: ["Sailfish", "Live playback", "Enabled"],
      name: "Play speech live while Sailfish nodes generate",
      tooltip: "Sailfish TTS, Voice Clone, Multi-Speaker and Subtitles send their audio to this "
        + "tab as it is made, and a small player on the node plays it. Off: nothing is sent.",
      type: "boolean",
      defaultValue: true,
      onChange: (value) => {
        wanted = value !== false;
        if (value === false) for (const stream of current.values()) stream.stop();
        tellServer(false);
      },
    },
  ],
  setup() {
    // A Queue click or key press is a user gesture: the browser lets audio start then.
    for (const type of ["pointerdown", "keydown"]) {
      window.addEventListener(type, unlock, { capture: true, passive: true });
    }
    tellServer(true);
  },
});
