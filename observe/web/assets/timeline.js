// The fault timeline under the fabric: every fault as a marker on lab
// time (red down, green up, purple impair; hollow when planned but not
// yet reached), the playhead, and the slider that moves it in a replay.

import { svg, clear, fmtTime } from "./util.js";

export class Timeline {
  constructor(root, info) {
    this.root = root;
    this.info = info;
    this.key = "";
    this.t0 = info.mode === "replay" ? info.start : null;
  }

  // update draws the faults known at frame f in a strip of size {w, h}
  // pixels.
  update(f, size) {
    const live = this.info.mode === "live";
    if (live && this.t0 === null) this.t0 = f.t;
    const t0 = this.t0, t1 = live ? Math.max(f.t, t0 + 1) : Math.max(this.info.end, t0 + 1);
    const W = size.w || 800, H = size.h || 36;
    const fired = f.faults || [];
    const key = `${W}x${H}/${fired.length}/${live ? f.t : ""}/${f.t}`;
    if (key === this.key) return;
    this.key = key;
    const root = clear(this.root);
    root.setAttribute("viewBox", `0 0 ${W} ${H}`);
    const pad = 8;
    const x = (t) => pad + ((t - t0) / (t1 - t0)) * (W - 2 * pad);
    svg(root, "line", { x1: pad, y1: H - 10, x2: W - pad, y2: H - 10, class: "axis-line" });
    const seen = new Set();
    fired.forEach((e, i) => {
      seen.add(`${e.t} ${e.fault}`);
      marker(root, x(e.t), H, e.fault, e.error, fmtTime(e.t), i, false);
    });
    // Planned faults of a replay that have not fired by now.
    for (const [i, p] of (this.info.planned || []).entries()) {
      const sp = p.indexOf(" ");
      const t = parseTime(p.slice(0, sp));
      if (t === null || t < f.t || t > t1) continue;
      marker(root, x(t), H, p.slice(sp + 1), "", fmtTime(t), fired.length + i, true);
    }
    svg(root, "line", { x1: x(f.t), y1: 0, x2: x(f.t), y2: H, class: "playhead" });
  }
}

function marker(root, x, H, text, error, when, i, planned) {
  const kind = /\bdown\b/.test(text) ? "down" : /\bup\b/.test(text) ? "up" : "impair";
  const g = svg(root, "g", { class: `fault ${kind}${planned ? " planned" : ""}${error ? " failed" : ""}` });
  svg(g, "circle", { cx: x, cy: H - 10, r: 4.5 });
  svg(g, "text", { x: x + 6, y: 11 + (i % 2) * 11, class: "fault-label" }).textContent = text;
  svg(g, "title").textContent = `${when} ${text}${error ? ` (failed: ${error})` : ""}${planned ? " (planned)" : ""}`;
}

// parseTime reads the CLI's spelling of lab time ("2ms", "500us").
function parseTime(s) {
  const m = /^([0-9.]+)(ns|us|µs|ms|s)$/.exec(s);
  if (!m) return null;
  const unit = { ns: 1, us: 1e3, "µs": 1e3, ms: 1e6, s: 1e9 }[m[2]];
  return Number(m[1]) * unit;
}
