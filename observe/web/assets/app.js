// The mrlab web view: wires the fabric drawing, the side panel, the ladder
// and the timeline to the server's frames. Frames arrive as server-sent
// events (/api/stream) while playing or live, or one at a time
// (/api/frame) when stepping or seeking a replay. Whatever the arrival
// rate, the page draws at most once per animation frame, the latest
// frame only.
//
// URL parameters (handy for scripts and screenshots): host=H&conn=N
// selects a connection, k=FRAME starts a replay there (t=460us: at the
// last frame at or before that lab time; neither: at the first frame with
// traffic, not an empty frame 0), pick=link:NAME (or
// switch:NAME, plane:N, host:NAME) opens that item, play=1 starts playing.

import { Fabric } from "./fabric.js";
import { Panels } from "./panels.js";
import { Ladder, setDirNames } from "./ladder.js";
import { Timeline } from "./timeline.js";
import { html, svg, clear, fmtTime, rampStops } from "./util.js";

const $ = (id) => document.getElementById(id);

const state = {
  info: null,
  sel: null, // {host, id} of the selected connection
  frame: null, // the frame drawn
  pending: null, // the newest frame not yet drawn
  es: null, // the open EventSource
  playing: false,
  hover: null, // the path whose route is emphasised
  picked: null, // the link, switch, plane or host shown in the detail box
};

// Exposed for tests and scripts: drawing statistics and a few controls.
const stats = { frames: 0, drawMs: 0, maxDrawMs: 0, errors: [] };
window.mrlab = { stats, ready: false };

async function getJSON(url, opts) {
  const r = await fetch(url, opts);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || `${url}: HTTP ${r.status}`);
  return body;
}

function status(text, cls = "") {
  const s = $("status");
  s.textContent = text;
  s.className = `status ${cls}`;
}

function selParams() {
  return state.sel ? `host=${encodeURIComponent(state.sel.host)}&conn=${state.sel.id}` : "";
}

// --- streams and frames ---

function closeStream() {
  if (state.es) state.es.close();
  state.es = null;
}

// openStream starts pushing frames: live, or a replay from lab time
// from (default: the frame shown).
function openStream(from) {
  closeStream();
  const info = state.info;
  let url = `api/stream?${selParams()}`;
  if (info.mode === "replay") {
    const t = from ?? (state.frame ? state.frame.t : info.start);
    url += `&t=${t}&speed=${$("speed").value}`;
  }
  const es = new EventSource(url);
  state.es = es;
  es.addEventListener("frame", (e) => {
    state.pending = JSON.parse(e.data);
  });
  es.addEventListener("end", () => {
    closeStream();
    setPlaying(false);
  });
  es.addEventListener("error", (e) => {
    if (e.data) {
      status(JSON.parse(e.data).error, "error");
      return;
    }
    // The connection itself failed: a replay stops, a live stream retries.
    if (info.mode === "replay") {
      closeStream();
      setPlaying(false);
    } else {
      status("lost the server; retrying…", "error");
    }
  });
  es.addEventListener("open", () => status(""));
}

// loadFrame fetches one replay frame (by index) and draws it.
async function loadFrame(k) {
  const info = state.info;
  k = Math.max(0, Math.min(info.frames - 1, k));
  try {
    state.pending = await getJSON(`api/frame?k=${k}&${selParams()}`);
  } catch (e) {
    status(String(e), "error");
  }
}

function setPlaying(on, from) {
  state.playing = on;
  $("play").textContent = on ? "❚❚" : "▶";
  if (state.info.mode !== "replay") return;
  if (on) openStream(from);
  else closeStream();
}

function select(host, id) {
  state.sel = host ? { host, id } : null;
  state.hover = null;
  if (state.info.mode === "live" || state.playing) openStream();
  else if (state.frame) loadFrame(state.frame.i);
}

// --- drawing ---

// draw runs once per animation frame. Its statistics (window.mrlab.stats)
// time each update from the start of the script's work to the next
// animation frame, so the browser's style, layout and paint are counted.
let applied = 0;
function draw(now) {
  requestAnimationFrame(draw);
  if (applied) {
    const ms = now - applied;
    stats.frames++;
    stats.drawMs += ms;
    stats.maxDrawMs = Math.max(stats.maxDrawMs, ms);
    applied = 0;
  }
  const f = state.pending;
  if (!f) return;
  state.pending = null;
  applied = performance.now();
  apply(f);
}

function apply(f) {
  state.frame = f;
  // Sizes first, before anything is written: reading them after a write
  // would force a layout in the middle of the frame.
  const sizes = { ladder: size($("ladder-svg")), timeline: size($("faults-svg")) };
  fabric.update(f);
  panels.update(f);
  ladder.update(f.sel, f.t, sizes.ladder);
  timeline.update(f, sizes.timeline);
  highlight();
  const info = state.info;
  if (info.mode === "replay") {
    $("slider").value = f.i;
    $("clock").textContent = `${fmtTime(f.t)} / ${fmtTime(info.end)} · frame ${f.i + 1} of ${info.frames}`;
  } else {
    $("clock").textContent = `lab time ${fmtTime(f.t)}`;
  }
  window.mrlab.t = f.t;
  window.mrlab.k = f.i;
}

function size(el) {
  return { w: el.clientWidth, h: el.clientHeight };
}

function highlight() {
  const sel = state.frame && state.frame.sel;
  const rows = (sel && sel.path_rows) || [];
  const emph = state.hover !== null && rows[state.hover] ? rows[state.hover].route : null;
  fabric.highlight(rows.map((p) => p.route), emph);
}

// --- controls ---

function step(delta) {
  setPlaying(false);
  const k = state.frame ? state.frame.i : 0;
  loadFrame(k + delta);
}

function setupReplayControls(info) {
  const slider = $("slider");
  slider.max = info.frames - 1;
  slider.addEventListener("input", () => {
    setPlaying(false);
    loadFrame(Number(slider.value));
  });
  $("back").addEventListener("click", () => step(-1));
  $("fwd").addEventListener("click", () => step(1));
  $("play").addEventListener("click", () => {
    // Play from the start again once at the end.
    const atEnd = state.frame && state.frame.i >= info.frames - 1;
    setPlaying(!state.playing, atEnd ? info.start : undefined);
  });
  // Speeds: lab time per wall-clock second, as multiples of the
  // sampling interval. The default plays the run in about 20 seconds.
  const sel = $("speed");
  const want = Math.max(1, info.frames / 20);
  let best = null;
  for (const n of [1, 2, 5, 10, 20, 50, 100, 200]) {
    const o = html(sel, "option", { value: String(info.interval * n) }, `${fmtTime(info.interval * n)}/s`);
    if (best === null || Math.abs(Math.log(n / want)) < Math.abs(Math.log(best.n / want))) best = { n, o };
  }
  best.o.selected = true;
  sel.addEventListener("change", () => state.playing && openStream());
  document.addEventListener("keydown", (e) => {
    if (e.target.tagName === "INPUT") return;
    if (e.key === " ") {
      e.preventDefault();
      $("play").click();
    } else if (e.key === "ArrowLeft") step(-1);
    else if (e.key === "ArrowRight") step(1);
  });
}

function legend(info) {
  const el = clear($("legend"));
  const s = svg(el, "svg", { width: 150, height: 28 });
  const grad = svg(svg(s, "defs"), "linearGradient", { id: "ramp" });
  for (const [u, c] of rampStops()) svg(grad, "stop", { offset: `${u * 100}%`, "stop-color": c });
  svg(s, "rect", { x: 0, y: 2, width: 150, height: 8, fill: "url(#ramp)" });
  svg(s, "text", { x: 0, y: 24, class: "legend-text" }).textContent = "0";
  svg(s, "text", { x: 150, y: 24, class: "legend-text end" }).textContent = "100% util";
  html(el, "span", { class: "key down" }, "down");
  html(el, "span", { class: "key impaired" }, "impaired");
  html(el, "span", { class: "key drop" }, "drops");
  html(el, "span", { class: "key mark" }, "ECN marks");
  html(el, "span", { class: "key halo" }, "selected conn");
  html(el, "span", { class: "muted" }, "width: queue depth · each link: two directions");
}

// --- start ---

let fabric, panels, ladder, timeline;

function onPick(kind, name) {
  state.picked = { kind, name };
  fabric.mark(kind, name);
  panels.pick(kind, name);
}

function newFabric() {
  return new Fabric($("topo"), state.info, onPick);
}

// A new window shape may suit another arrangement of the planes: redraw
// the fabric, then the frame shown.
let resizeTimer = 0;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => {
    fabric = newFabric();
    if (state.picked) fabric.mark(state.picked.kind, state.picked.name);
    if (state.frame) state.pending = state.pending || state.frame;
  }, 150);
});

async function main() {
  const info = await getJSON("api/info");
  state.info = info;
  document.title = `mrlab · ${info.title}`;
  $("title").textContent = info.title;
  $("mode").textContent = info.mode === "live" ? "LIVE" : "REPLAY";
  $("mode").classList.add(info.mode);
  document.body.classList.add(info.mode);
  const names = [];
  for (const l of info.topology.links) names.push(`${l.name}:AtoB`, `${l.name}:BtoA`);
  setDirNames(names);
  fabric = newFabric();
  panels = new Panels(info, {
    select,
    conns: (host) => getJSON(`api/conns?host=${encodeURIComponent(host)}${state.frame && state.frame.i >= 0 ? `&k=${state.frame.i}` : ""}`),
    fault: (req) => getJSON("api/fault", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(req) }),
    hoverPath: (i) => {
      state.hover = i;
      highlight();
    },
  });
  ladder = new Ladder($("ladder-svg"), info);
  timeline = new Timeline($("faults-svg"), info);
  legend(info);

  const q = new URLSearchParams(location.search);
  if (q.get("host") && q.get("conn")) state.sel = { host: q.get("host"), id: Number(q.get("conn")) };
  if (q.get("pick")) {
    const [kind, ...rest] = q.get("pick").split(":");
    onPick(kind, rest.join(":"));
  }
  requestAnimationFrame(draw);
  if (info.mode === "live") {
    openStream();
  } else {
    setupReplayControls(info);
    await loadFrame(startFrame(q, info));
    if (q.get("play")) setPlaying(true);
  }
  window.mrlab.ready = true;
  window.mrlab.select = select;
  window.mrlab.seek = loadFrame;
}

// startFrame is the frame a replay opens on: k=, else t=, else the
// server's choice (the first frame with traffic).
function startFrame(q, info) {
  if (q.has("k")) return Number(q.get("k"));
  const m = /^([\d.]+)\s*(ns|us|µs|ms|s)?$/.exec(q.get("t") || "");
  if (m) {
    const ns = Number(m[1]) * { ns: 1, us: 1e3, "µs": 1e3, ms: 1e6, s: 1e9 }[m[2] || "ns"];
    let k = 0;
    while (k + 1 < info.times.length && info.times[k + 1] <= ns) k++;
    return k;
  }
  return info.open || 0;
}

window.addEventListener("error", (e) => stats.errors.push(String(e.message)));
main().catch((e) => {
  status(String(e), "error");
  console.error(e);
});
