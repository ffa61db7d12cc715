// The ladder (sequence) diagram of the selected connection: its recent
// trace events on two lanes, the sender on top and the receiver below,
// lab time running left to right. Packets the trace names
// (retransmissions, probes, drops, marks) cross between the lanes; what
// one end decided (SACK holes, entropy changes, RTOs, path state) is a
// tick on its lane. A packet takes half the path's smoothed RTT to cross,
// so a drop is drawn where on its way the link that dropped it lies.

import { svg, clear, fmtTime, textWidth } from "./util.js";

const LEFT = 64, RIGHT = 16, TOP = 40;
const COLORS = {
  retx: "#d9480f", probe: "#7048e8", drop: "#e03131", mark: "#f08c00", "sack-hole": "#1971c2",
  entropy: "#2b8a3e", rto: "#c2255c", "path-down": "#e03131", "path-up": "#2b8a3e", ecn: "#f08c00",
  hint: "#868e96", nak: "#c2255c", rnr: "#c2255c", setup: "#495057", close: "#495057", note: "#868e96",
};

export class Ladder {
  constructor(root, info) {
    this.root = root;
    this.info = info;
    this.key = "";
  }

  // update draws sel's ladder at frame time now (ns) in a panel of size
  // {w, h} pixels.
  update(sel, now, size) {
    const evs = (sel && sel.ladder) || [];
    // Drawn in pixels of the panel's current size, so text keeps its shape.
    const W = size.w || 1000, H = size.h || 170;
    const BOTTOM = H - 48;
    const key = sel ? `${sel.host}/${sel.id}/${now}/${evs.length}/${evs.length && evs[evs.length - 1].t}/${W}x${H}` : `${W}x${H}`;
    if (key === this.key) return;
    this.key = key;
    const root = clear(this.root);
    root.setAttribute("viewBox", `0 0 ${W} ${H}`);
    if (!sel) {
      svg(root, "text", { x: W / 2, y: H / 2, class: "hint-text" }).textContent =
        "pick a connection (busiest connections, or a host) to see its paths and its ladder diagram";
      return;
    }
    const a = sel.host, b = sel.peer || "peer";
    const t0 = evs.length ? Math.min(evs[0].t, now - 1000) : now - 10000;
    // Room on the right for the last packets to arrive.
    const owd = oneWay(sel, now - t0);
    const t1 = now + owd;
    const span = Math.max(t1 - t0, 1);
    const x = (t) => LEFT + ((t - t0) / span) * (W - LEFT - RIGHT);
    // Lanes and time axis.
    for (const [y, name] of [[TOP, a], [BOTTOM, b]]) {
      svg(root, "line", { x1: LEFT, y1: y, x2: W - RIGHT, y2: y, class: "lane" });
      svg(root, "text", { x: 6, y: y + 4, class: "lane-label" }).textContent = name;
    }
    svg(root, "text", { x: LEFT, y: H - 4, class: "axis" }).textContent = fmtTime(t0);
    svg(root, "text", { x: x(now), y: H - 4, class: "axis end" }).textContent = fmtTime(now);
    svg(root, "text", { x: W / 2, y: H - 4, class: "axis mid" }).textContent =
      `${evs.length} trace events of ${a}→${b} conn ${sel.id}`;
    if (!evs.length) return;
    // Labels go in rows beside the lanes, measured as drawn; one that
    // would overlap any label already placed (whatever its zone) in each
    // of its rows is left out (its tooltip still tells).
    const placed = [];
    const label = (g, zone, x0, y0, dir, s, color) => {
      const w = textWidth(s, 10) + 4;
      x0 = Math.max(LEFT, Math.min(x0, W - RIGHT - w));
      for (let i = 0; i < 4; i++) {
        const y = y0 + dir * i * 11;
        if (y < 10 || y > H - 16) break; // inside the panel, above the axis
        const box = { x0, x1: x0 + w, y0: y - 9, y1: y + 2 };
        if (placed.some((b) => b.x0 < box.x1 && box.x0 < b.x1 && b.y0 < box.y1 && box.y0 < b.y1)) continue;
        placed.push(box);
        text(g, x0, y, s, color);
        return;
      }
    };
    for (const e of evs) {
      const fromA = e.host === a;
      const color = COLORS[e.kind] || COLORS.note;
      const g = svg(root, "g", { class: `ev ${e.kind}` });
      svg(g, "title").textContent = `t=${fmtTime(e.t)} ${e.text}`;
      const s = short(e);
      if (e.fabric) {
        // A packet lost or marked on its way: from its sender's lane to
        // where it was, a fraction of the way across.
        const frac = hopFraction(e, sel);
        const y0 = fromA ? TOP : BOTTOM, y1 = y0 + (fromA ? 1 : -1) * frac * (BOTTOM - TOP);
        const xs = x(e.t - owd * frac), xe = x(e.t);
        svg(g, "line", { x1: xs, y1: y0, x2: xe, y2: y1, stroke: color, class: "pkt" });
        if (e.kind === "drop") cross(g, xe, y1, color);
        else svg(g, "circle", { cx: xe, cy: y1, r: 3, fill: color });
        label(g, "mid", xe + 5, (TOP + BOTTOM) / 2 - 8, 1, s, color);
      } else if (e.kind === "retx" || e.kind === "probe") {
        // The sender puts a packet on the wire.
        const y0 = fromA ? TOP : BOTTOM, y1 = fromA ? BOTTOM : TOP;
        svg(g, "line", { x1: x(e.t), y1: y0, x2: x(e.t + owd), y2: y1, stroke: color, class: "pkt" });
        arrowHead(g, x(e.t), y0, x(e.t + owd), y1, color);
        label(g, fromA ? "a-below" : "b-above", x(e.t) + 3, fromA ? TOP + 12 : BOTTOM - 5, fromA ? 1 : -1, s, color);
      } else if (e.kind === "sack-hole") {
        // An ACK from the far end showed the hole.
        const y0 = fromA ? BOTTOM : TOP, y1 = fromA ? TOP : BOTTOM;
        svg(g, "line", { x1: x(e.t - owd), y1: y0, x2: x(e.t), y2: y1, stroke: color, class: "pkt ack" });
        arrowHead(g, x(e.t - owd), y0, x(e.t), y1, color);
        label(g, fromA ? "a-above" : "b-below", x(e.t) + 3, fromA ? TOP - 5 : BOTTOM + 13, fromA ? -1 : 1, s, color);
      } else {
        const y = fromA ? TOP : BOTTOM;
        svg(g, "line", { x1: x(e.t), y1: y - 6, x2: x(e.t), y2: y + 6, stroke: color, class: "tick" });
        label(g, fromA ? "a-above" : "b-below", x(e.t) + 3, fromA ? TOP - 5 : BOTTOM + 13, fromA ? -1 : 1, s, color);
      }
    }
  }
}

// oneWay is the drawing's one-way delay: half the smoothed RTT of the
// connection, at least a sliver of the window so arrows slant visibly.
function oneWay(sel, span) {
  const rtt = sel.srtt_ns || 0;
  return Math.max(rtt / 2, span / 60);
}

// hopFraction places a fabric event along the packet's way: the position
// of the link on the route of the event's path, else the middle.
function hopFraction(e, sel) {
  const p = sel.path_rows && sel.path_rows[e.path];
  if (!p || !e.link || !dirNames || e.host !== sel.host || !p.route.length) return 0.5;
  const i = p.route.findIndex((d) => dirNames[d] === e.link);
  return i < 0 ? 0.5 : (i + 0.5) / p.route.length;
}

let dirNames = null;
// setDirNames gives the ladder the direction names (index -> "link:AtoB").
export function setDirNames(names) {
  dirNames = names;
}

function short(e) {
  const p = e.path >= 0 ? `p${e.path} ` : "";
  const psn = e.psn >= 0 ? `#${e.psn}` : "";
  switch (e.kind) {
    case "retx": return `${p}retx ${psn}`;
    case "probe": return `${p}probe ${psn}`;
    case "sack-hole": return `${p}SACK hole ${psn}`;
    case "drop": return `${p}drop ${psn}${e.ack ? " ack" : ""} @${e.link || ""}`;
    case "mark": return `${p}CE ${psn}`;
    case "entropy": {
      const m = e.text.match(/entropy (\d+) -> (\d+)/);
      return m ? `${p}entropy ${m[1]}→${m[2]}` : `${p}entropy`;
    }
    case "rto": return `${p}RTO`;
    case "path-down": return `${p}failed`;
    case "path-up": return `${p}recovered`;
    default: return `${p}${e.kind}`;
  }
}

function text(g, x, y, s, color) {
  svg(g, "text", { x, y, fill: color, class: "ev-label" }).textContent = s;
}

function cross(g, x, y, color) {
  svg(g, "path", { d: `M${x - 4},${y - 4}L${x + 4},${y + 4}M${x - 4},${y + 4}L${x + 4},${y - 4}`, stroke: color, class: "cross" });
}

function arrowHead(g, x1, y1, x2, y2, color) {
  const a = Math.atan2(y2 - y1, x2 - x1), l = 6;
  const p = (da) => `${x2 - l * Math.cos(a + da)},${y2 - l * Math.sin(a + da)}`;
  svg(g, "path", { d: `M${p(0.4)}L${x2},${y2}L${p(-0.4)}`, stroke: color, fill: "none", class: "head" });
}
