// Small helpers shared by the page's modules: SVG/HTML element builders
// and number formatting. No dependencies.

const SVG = "http://www.w3.org/2000/svg";

// svg creates an SVG element with attributes and appends it to parent.
export function svg(parent, tag, attrs = {}) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (parent) parent.appendChild(el);
  return el;
}

// html creates an HTML element with attributes and text.
export function html(parent, tag, attrs = {}, text) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  if (parent) parent.appendChild(el);
  return el;
}

// clear removes an element's children.
export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

// fmtTime spells lab time (ns) as the CLI does: 12.3us, 1.46ms.
export function fmtTime(ns) {
  if (ns < 1e3) return `${Math.round(ns)}ns`;
  if (ns < 1e6) return `${trim(ns / 1e3)}us`;
  if (ns < 1e9) return `${trim(ns / 1e6)}ms`;
  return `${trim(ns / 1e9)}s`;
}

// fmtRate spells bits per second: 12.3 Gb/s.
export function fmtRate(bps) {
  if (!bps) return "0";
  const u = [[1e12, "Tb/s"], [1e9, "Gb/s"], [1e6, "Mb/s"], [1e3, "kb/s"]];
  for (const [d, s] of u) if (bps >= d) return `${trim(bps / d)} ${s}`;
  return `${Math.round(bps)} b/s`;
}

// fmtBytes spells a byte count: 64 KiB.
export function fmtBytes(b) {
  if (b < 1024) return `${b} B`;
  if (b < 1 << 20) return `${trim(b / 1024)} KiB`;
  if (b < 1 << 30) return `${trim(b / (1 << 20))} MiB`;
  return `${trim(b / (1 << 30))} GiB`;
}

// fmtCount spells a counter compactly: 1.2k, 3.4M.
export function fmtCount(n) {
  if (n < 1e4) return String(n);
  if (n < 1e6) return `${trim(n / 1e3)}k`;
  return `${trim(n / 1e6)}M`;
}

function trim(x) {
  return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);
}

// utilColor maps a utilisation in [0,1] to a colour: grey when idle, then
// blue, teal, yellow, orange and red at line rate.
const RAMP = [
  [0.0, [176, 186, 197]],
  [0.05, [107, 174, 214]],
  [0.3, [33, 145, 140]],
  [0.6, [222, 190, 40]],
  [0.85, [240, 120, 30]],
  [1.0, [200, 20, 30]],
];
export function utilColor(u) {
  u = Math.max(0, Math.min(1, u));
  for (let i = 1; i < RAMP.length; i++) {
    const [u1, c1] = RAMP[i];
    if (u <= u1) {
      const [u0, c0] = RAMP[i - 1];
      const f = (u - u0) / (u1 - u0);
      const c = c0.map((x, j) => Math.round(x + f * (c1[j] - x)));
      return `rgb(${c[0]},${c[1]},${c[2]})`;
    }
  }
  return "rgb(200,20,30)";
}

// rampStops returns the colour ramp for a legend gradient.
export function rampStops() {
  return RAMP.map(([u, c]) => [u, `rgb(${c[0]},${c[1]},${c[2]})`]);
}

// textWidth is the width of s in px at font size px, as the page's
// sans-serif draws it.
let measureCtx = null;
export function textWidth(s, px) {
  if (!measureCtx) measureCtx = document.createElement("canvas").getContext("2d");
  measureCtx.font = `${px}px system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif`;
  return measureCtx.measureText(s).width;
}
