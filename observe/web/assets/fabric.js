// The fabric drawing: plane boxes, switches, host ports and one SVG line
// per link direction. Each direction line carries
//   data-link="<link>:AtoB|BtoA"  and  data-state="up|down|impaired"
// so tests and scripts can find it. update() applies a frame: colour by
// utilisation, width by queue depth, a flash for drops and ECN marks, the
// netem string on impaired links. highlight() marks the links a
// connection's paths use.

import { svg, clear, utilColor, fmtRate, fmtBytes, textWidth } from "./util.js";

const OFFSET = 1.8; // half the gap between a link's two direction lines
const GAP = 14; // between plane boxes
const STATES = { u: "up", d: "down", i: "impaired" };

export class Fabric {
  // root is the <svg>; info is /api/info; onPick(kind, name) is called
  // when a link direction, switch, host port or plane is clicked.
  constructor(root, info, onPick) {
    this.root = root;
    this.info = info;
    this.onPick = onPick;
    this.arrange();
    clear(root);
    this.gPlanes = svg(root, "g", { class: "planes" });
    this.gHalo = svg(root, "g", { class: "halos" });
    this.gLinks = svg(root, "g", { class: "links" });
    this.gLabels = svg(root, "g", { class: "impair-labels" });
    this.gNodes = svg(root, "g", { class: "nodes" });
    this.dirs = []; // direction index -> line element
    this.last = []; // direction index -> last applied values, to skip no-ops
    this.geom = []; // direction index -> [x1, y1, x2, y2]
    this.labels = new Map(); // link index -> impairment label
    this.drawPlanes();
    this.drawLinks();
    this.drawNodes();
  }

  // arrange puts the plane boxes in the grid that shows them largest and
  // fills the panel's current shape best, stretching the rows apart (up to 2.5x) when
  // the panel is taller than the grid, and sets each node's position.
  arrange() {
    const v = this.info.view;
    const W = this.root.clientWidth || 1200, H = this.root.clientHeight || 700;
    let best = null;
    for (let cols = 1; cols <= v.planes; cols++) {
      const rows = Math.ceil(v.planes / cols);
      const gw = cols * v.box_w + (cols - 1) * GAP;
      const fixed = rows * v.box_h + (rows - 1) * GAP;
      const k = v.span > 0 ? Math.min(2.5, Math.max(1, 1 + ((gw * H) / W - fixed) / (rows * v.span))) : 1;
      const bh = v.box_h + (k - 1) * v.span;
      const gh = rows * bh + (rows - 1) * GAP;
      const scale = Math.min(W / gw, H / gh);
      // Large, and filling the panel: of two grids about as large, the
      // one that leaves less of the panel empty.
      const fill = (gw * gh * scale * scale) / (W * H);
      const score = scale * (0.5 + 0.5 * fill);
      if (!best || score > best.score) best = { cols, gw, gh, bh, k, score, scale };
    }
    this.scale = best.scale; // screen pixels per view unit
    this.boxes = [];
    for (let p = 0; p < v.planes; p++) {
      this.boxes.push({ plane: p, x: (p % best.cols) * (v.box_w + GAP), y: Math.floor(p / best.cols) * (best.bh + GAP), h: best.bh });
    }
    this.pos = v.nodes.map((n) => {
      const b = this.boxes[n.plane];
      return { x: b.x + n.x, y: b.y + v.top + (n.y - v.top) * best.k };
    });
    this.root.setAttribute("viewBox", `-6 -6 ${best.gw + 12} ${best.gh + 12}`);
    this.root.setAttribute("preserveAspectRatio", "xMidYMid meet");
  }

  drawPlanes() {
    const v = this.info.view;
    for (const b of this.boxes) {
      const g = svg(this.gPlanes, "g", { class: "plane", "data-plane": b.plane });
      svg(g, "rect", { x: b.x, y: b.y, width: v.box_w, height: b.h, rx: 6 });
      const t = svg(g, "text", { x: b.x + 8, y: b.y + 14, class: "plane-title" });
      t.textContent = `plane ${b.plane}`;
      t.addEventListener("click", () => this.onPick("plane", String(b.plane)));
    }
  }

  drawLinks() {
    const { view, topology } = this.info;
    view.links.forEach((l, i) => {
      const a = this.pos[l.a], b = this.pos[l.b];
      const dx = b.x - a.x, dy = b.y - a.y;
      const len = Math.hypot(dx, dy) || 1;
      // Perpendicular offset: AtoB on one side, BtoA on the other.
      const ox = (-dy / len) * OFFSET, oy = (dx / len) * OFFSET;
      const name = topology.links[i].name;
      [[a, b, 1, "AtoB"], [b, a, -1, "BtoA"]].forEach(([from, to, side, dir], j) => {
        const d = 2 * i + j;
        const x1 = from.x + side * ox, y1 = from.y + side * oy;
        const x2 = to.x + side * ox, y2 = to.y + side * oy;
        const el = svg(this.gLinks, "line", {
          x1, y1, x2, y2, class: "dir", "data-link": `${name}:${dir}`, "data-state": "up",
        });
        el.addEventListener("click", () => this.onPick("link", name, d));
        // The tooltip is written when the pointer arrives, from the
        // frame shown then: not for every direction on every frame.
        el.addEventListener("mouseenter", () => this.tip(d));
        el.appendChild(svg(null, "title"));
        this.dirs[d] = el;
        this.geom[d] = [x1, y1, x2, y2];
        this.last[d] = {};
      });
    });
  }

  drawNodes() {
    const { view } = this.info;
    // Host labels 10 pixels high, where they fit: every host's, or every
    // few hosts'.
    const every = Math.max(1, Math.ceil(22 / (minHostGap(view) * this.scale)));
    const font = Math.min(10 / this.scale, 14).toFixed(1);
    const rank = hostRanks(view);
    view.nodes.forEach((n, i) => {
      const { x, y } = this.pos[i];
      const g = svg(this.gNodes, "g", { class: n.host ? "node host" : "node switch", "data-node": n.name });
      if (n.host) {
        svg(g, "circle", { cx: x, cy: y, r: 4.5 });
        if (rank[i] % every === 0) {
          const t = svg(g, "text", { x, y: y + 6 + Number(font), class: "host-label", "font-size": font });
          t.textContent = n.label;
        }
        g.addEventListener("click", () => this.onPick("host", n.name));
      } else {
        svg(g, "rect", { x: x - 27, y: y - 10, width: 54, height: 20, rx: 4 });
        const t = svg(g, "text", { x, y: y + 4, class: "switch-label" });
        t.textContent = n.label;
        g.addEventListener("click", () => this.onPick("switch", n.name));
      }
      svg(g, "title").textContent = n.host ? `${n.name} port ${n.port}` : `${n.name} (plane ${n.plane})`;
    });
    this.switchEls = new Map();
    for (const g of this.gNodes.querySelectorAll(".switch")) this.switchEls.set(g.dataset.node, g);
  }

  // update applies one frame, touching only attributes that changed.
  update(f) {
    this.frame = f;
    const links = this.info.topology.links;
    for (let d = 0; d < this.dirs.length; d++) {
      const el = this.dirs[d], last = this.last[d];
      const state = STATES[f.state[d]] || "up";
      const flash = f.drops[d] > 0 ? "drop" : f.marks[d] > 0 ? "mark" : "";
      const cap = links[d >> 1].queue_bytes || 1;
      // Widths and colours in steps, so small changes touch nothing.
      const width = Math.round(10 * (1.3 + 4.5 * Math.sqrt(Math.min(f.queue[d] / cap, 1)))) / 10;
      const util = Math.round(f.util[d] / 20) * 20; // 2% steps
      if (last.state !== state) el.setAttribute("data-state", state);
      if (last.flash !== flash) el.setAttribute("data-flash", flash);
      if (last.util !== util || last.state !== state) el.style.stroke = state === "down" ? "" : utilColor(util / 1000);
      if (last.width !== width) el.style.strokeWidth = width;
      last.state = state;
      last.flash = flash;
      last.util = util;
      last.width = width;
    }
    this.updateImpairLabels(f);
    const down = new Set(f.switch_down || []);
    for (const [name, g] of this.switchEls) g.classList.toggle("down", down.has(name));
  }

  // tip writes direction d's tooltip from the frame shown.
  tip(d) {
    const f = this.frame, el = this.dirs[d];
    if (!f) return;
    const l = this.info.topology.links[d >> 1];
    const util = f.util[d] / 1000;
    el.firstChild.textContent = `${el.dataset.link}: ${STATES[f.state[d]]}, ${(util * 100).toFixed(1)}% (${fmtRate(util * l.rate_bps)}),` +
      ` queue ${fmtBytes(f.queue[d])}, drops ${f.drops[d]}, ECN marks ${f.marks[d]}` +
      (f.impair && f.impair[d] ? `, impaired: ${f.impair[d]}` : "");
  }

  // updateImpairLabels writes each impaired link's netem string beside it
  // (once per link; "ab:"/"ba:" when only one direction is impaired).
  updateImpairLabels(f) {
    const want = new Map();
    const imp = f.impair || {};
    for (let i = 0; i < this.info.topology.links.length; i++) {
      const a = imp[2 * i], b = imp[2 * i + 1];
      if (!a && !b) continue;
      want.set(i, a === b ? a : [a && `ab: ${a}`, b && `ba: ${b}`].filter(Boolean).join(" · "));
    }
    for (const [i, el] of this.labels) {
      if (!want.has(i)) {
        el.remove();
        this.labels.delete(i);
      }
    }
    for (const [i, text] of want) {
      let el = this.labels.get(i);
      if (el && el.textContent !== text) {
        el.remove(); // placed again: its width changed
        this.labels.delete(i);
        el = null;
      }
      if (!el) {
        el = this.placeLabel(i, text);
        this.labels.set(i, el);
      }
    }
  }

  // placeLabel draws link i's impairment label along the link, at the
  // first of a few points (middle first) where it overlaps no label
  // already drawn; where every point overlaps, the least crowded one.
  placeLabel(i, text) {
    const [x1, y1, x2, y2] = this.geom[2 * i];
    const w = textWidth(text, 7) + 2, h = 8;
    const boxes = [...this.labels.values()].map((e) => e.box);
    let best = null;
    for (const t of [0.5, 0.35, 0.65, 0.25, 0.75, 0.42, 0.58, 0.18, 0.82]) {
      const x = x1 + t * (x2 - x1), y = y1 + t * (y2 - y1) - 3;
      const box = { x0: x - w / 2, x1: x + w / 2, y0: y - h + 1, y1: y + 1 };
      const n = boxes.filter((b) => b.x0 < box.x1 && box.x0 < b.x1 && b.y0 < box.y1 && box.y0 < b.y1).length;
      if (!best || n < best.n) best = { x, y, box, n };
      if (n === 0) break;
    }
    const el = svg(this.gLabels, "text", { x: best.x, y: best.y, class: "impair-label" });
    el.textContent = text;
    el.box = best.box;
    return el;
  }

  // highlight marks the directions a selected connection's paths use:
  // routes is a list of direction-index lists; emphasis, if set, is one
  // path's route drawn stronger.
  highlight(routes, emphasis) {
    const key = JSON.stringify([routes, emphasis]);
    if (key === this.haloKey) return;
    this.haloKey = key;
    clear(this.gHalo);
    const count = new Map();
    for (const r of routes) for (const d of r) count.set(d, (count.get(d) || 0) + 1);
    const strong = new Set(emphasis || []);
    for (const [d, n] of count) {
      const [x1, y1, x2, y2] = this.geom[d];
      svg(this.gHalo, "line", {
        x1, y1, x2, y2, class: strong.has(d) ? "halo strong" : "halo",
        "stroke-width": (4 + 2 * Math.log2(1 + n)).toFixed(1),
      });
    }
    for (const d of strong) {
      if (count.has(d)) continue;
      const [x1, y1, x2, y2] = this.geom[d];
      svg(this.gHalo, "line", { x1, y1, x2, y2, class: "halo strong", "stroke-width": 6 });
    }
  }

  // mark outlines one picked element (a link's directions or a node).
  mark(kind, name) {
    for (const el of this.root.querySelectorAll(".picked")) el.classList.remove("picked");
    if (kind === "link") {
      const i = this.info.topology.links.findIndex((l) => l.name === name);
      if (i >= 0) for (const d of [2 * i, 2 * i + 1]) this.dirs[d].classList.add("picked");
    } else if (kind === "switch" || kind === "host") {
      for (const g of this.gNodes.children) if (g.dataset.node === name) g.classList.add("picked");
    }
  }
}

// hostRanks numbers each plane's host ports from left to right (other
// nodes get -1).
function hostRanks(view) {
  const rank = view.nodes.map(() => -1);
  const byPlane = new Map();
  view.nodes.forEach((n, i) => {
    if (n.host) (byPlane.get(n.plane) || byPlane.set(n.plane, []).get(n.plane)).push(i);
  });
  for (const ids of byPlane.values()) {
    ids.sort((a, b) => view.nodes[a].x - view.nodes[b].x);
    ids.forEach((id, r) => (rank[id] = r));
  }
  return rank;
}

// minHostGap is the smallest horizontal gap between host ports in a plane.
function minHostGap(view) {
  const xs = new Map();
  for (const n of view.nodes) if (n.host) (xs.get(n.plane) || xs.set(n.plane, []).get(n.plane)).push(n.x);
  let gap = Infinity;
  for (const arr of xs.values()) {
    arr.sort((a, b) => a - b);
    for (let i = 1; i < arr.length; i++) gap = Math.min(gap, arr[i] - arr[i - 1]);
  }
  return gap;
}
