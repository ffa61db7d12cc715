// The side panel: what is picked (a link, switch, plane or host, with the
// fault buttons of a live lab), the selected connection with per-path
// sparklines, the busiest connections and every host's NIC counters.

import { html, svg, clear, fmtRate, fmtBytes, fmtCount, fmtTime } from "./util.js";

export class Panels {
  // actions: select(host, id), fault(request) -> Promise, hoverPath(i|null),
  // conns(host) -> Promise<ConnRow[]>.
  constructor(info, actions) {
    this.info = info;
    this.actions = actions;
    this.detail = document.getElementById("detail");
    this.conn = document.getElementById("conn");
    this.top = document.getElementById("top");
    this.hosts = document.getElementById("hosts");
    this.picked = null;
    this.frame = null;
    this.buildHosts();
  }

  // pick shows a link, switch, plane or host in the detail box.
  pick(kind, name) {
    this.picked = { kind, name };
    this.renderDetail();
  }

  update(f) {
    this.frame = f;
    this.updateHosts(f);
    this.updateTop(f);
    this.renderConn(f.sel);
    if (this.picked && this.picked.kind !== "host") this.renderDetail();
  }

  buildHosts() {
    clear(this.hosts);
    const head = html(this.hosts, "tr");
    html(head, "th", {}, "host");
    for (const h of ["tx", "rx", "retx", "RTO", "CE", "drops"]) html(head, "th", { class: "num" }, h);
    this.hostRows = this.info.topology.hosts.map((h) => {
      const tr = html(this.hosts, "tr", { "data-host": h.name, class: "clickable" });
      html(tr, "td", { title: h.addr }, h.name);
      const cells = [0, 1, 2, 3, 4, 5].map(() => html(tr, "td", { class: "num" }));
      tr.addEventListener("click", () => this.pick("host", h.name));
      return cells;
    });
  }

  updateHosts(f) {
    f.hosts.forEach((h, i) => {
      const c = this.hostRows[i];
      if (!c) return;
      setText(c[0], fmtRate(h.tx_bps));
      setText(c[1], fmtRate(h.rx_bps));
      setText(c[2], fmtCount(h.retx));
      setText(c[3], fmtCount(h.timeouts));
      setText(c[4], fmtCount(h.ce_received));
      setText(c[5], fmtCount(h.drops));
    });
  }

  updateTop(f) {
    clear(this.top);
    if (!f.top.length) {
      html(html(this.top, "tr"), "td", { class: "muted" }, `${f.conns} connections, none sending now`);
      return;
    }
    for (const c of f.top) this.connRow(this.top, c);
  }

  // connRow appends a clickable row selecting a connection.
  connRow(table, c) {
    const tr = html(table, "tr", { class: "clickable", "data-conn": `${c.host}/${c.id}` });
    const sel = this.frame && this.frame.sel;
    if (sel && sel.host === c.host && sel.id === c.id) tr.classList.add("selected");
    html(tr, "td", {}, `${c.host}→${c.peer}`);
    html(tr, "td", { class: "muted" }, `conn ${c.id}`);
    html(tr, "td", { class: "num" }, fmtRate(c.rate_bps));
    html(tr, "td", { class: "num muted" }, `${c.paths} paths`);
    html(tr, "td", { class: "num muted" }, `retx ${fmtCount(c.retx)}`);
    tr.addEventListener("click", () => this.actions.select(c.host, c.id));
  }

  renderDetail() {
    const p = this.picked;
    clear(this.detail);
    if (!p) return;
    const box = html(this.detail, "div", { class: "box" });
    const close = html(box, "button", { class: "close", title: "close" }, "×");
    close.addEventListener("click", () => {
      this.picked = null;
      clear(this.detail);
    });
    if (p.kind === "link") this.linkDetail(box, p.name);
    if (p.kind === "switch") this.switchDetail(box, p.name);
    if (p.kind === "plane") this.planeDetail(box, Number(p.name));
    if (p.kind === "host") this.hostDetail(box, p.name);
  }

  linkDetail(box, name) {
    const links = this.info.topology.links;
    const i = links.findIndex((l) => l.name === name);
    if (i < 0) return;
    const l = links[i];
    html(box, "h2", {}, `link ${name}`);
    html(box, "div", { class: "muted" }, `${l.a}:${l.a_port} ↔ ${l.b}:${l.b_port} · ${fmtRate(l.rate_bps)} · ${fmtTime(l.delay_ns)} · queue ${fmtBytes(l.queue_bytes)}`);
    const f = this.frame;
    if (f) {
      const t = html(box, "table", { class: "rows" });
      const head = html(t, "tr");
      for (const h of ["dir", "state", "util", "queue", "drops", "marks"]) html(head, "th", {}, h);
      for (const [d, dir] of [[2 * i, "AtoB"], [2 * i + 1, "BtoA"]]) {
        const tr = html(t, "tr");
        html(tr, "td", {}, dir);
        html(tr, "td", {}, { u: "up", d: "down", i: "impaired" }[f.state[d]]);
        html(tr, "td", { class: "num" }, `${(f.util[d] / 10).toFixed(1)}%`);
        html(tr, "td", { class: "num" }, fmtBytes(f.queue[d]));
        html(tr, "td", { class: "num" }, String(f.drops[d]));
        html(tr, "td", { class: "num" }, String(f.marks[d]));
      }
      const imp = f.impair || {};
      if (imp[2 * i] || imp[2 * i + 1]) html(box, "div", { class: "impair" }, `impaired: ${imp[2 * i] || "-"} / ${imp[2 * i + 1] || "-"}`);
    }
    if (!this.info.can_fault) return;
    const row = this.faultButtons(box, "link", name);
    const input = html(row, "input", { type: "text", placeholder: "loss 1% delay 20us", size: 16, "data-impair": name });
    const go = html(row, "button", { "data-fault": `link:${name}:impair` }, "impair");
    go.addEventListener("click", () => this.send({ target: "link", name, action: "impair", impair: input.value || "none" }));
  }

  switchDetail(box, name) {
    const s = this.info.topology.switches.find((x) => x.name === name);
    html(box, "h2", {}, `switch ${name}`);
    const down = (this.frame && this.frame.switch_down || []).includes(name);
    html(box, "div", { class: "muted" }, `plane ${s ? s.plane : "?"} · ${s ? s.role : ""} · ${down ? "DOWN" : "up"}`);
    if (this.info.can_fault) this.faultButtons(box, "switch", name);
  }

  planeDetail(box, plane) {
    html(box, "h2", {}, `plane ${plane}`);
    const sw = this.info.topology.switches.filter((s) => s.plane === plane).map((s) => s.name);
    html(box, "div", { class: "muted" }, `${sw.length} switches`);
    if (this.info.can_fault) this.faultButtons(box, "plane", String(plane));
  }

  async hostDetail(box, name) {
    const h = this.info.topology.hosts.find((x) => x.name === name);
    html(box, "h2", {}, `host ${name}`);
    html(box, "div", { class: "muted" }, `${h ? h.addr : ""} · ${h ? h.ports : "?"} ports`);
    const t = html(box, "table", { class: "rows" });
    html(html(t, "tr"), "td", { class: "muted" }, "loading connections…");
    try {
      const rows = await this.actions.conns(name);
      clear(t);
      if (!rows.length) html(html(t, "tr"), "td", { class: "muted" }, "no open connections");
      for (const c of rows) this.connRow(t, c);
    } catch (e) {
      clear(t);
      html(html(t, "tr"), "td", { class: "error" }, String(e));
    }
  }

  // faultButtons adds down/up buttons for a target and returns their row.
  faultButtons(box, target, name) {
    const row = html(box, "div", { class: "faults" });
    for (const action of ["down", "up"]) {
      const b = html(row, "button", { "data-fault": `${target}:${name}:${action}`, class: action }, `${target} ${action}`);
      b.addEventListener("click", () => this.send({ target, name, action }));
    }
    return row;
  }

  async send(req) {
    const msg = html(this.detail.firstChild || this.detail, "div", { class: "muted" }, `${req.target} ${req.name} ${req.action}…`);
    try {
      await this.actions.fault(req);
      msg.textContent = `${req.target} ${req.name} ${req.action}: done`;
    } catch (e) {
      msg.textContent = String(e);
      msg.className = "error";
    }
  }

  // renderConn shows the selected connection and its paths. The table is
  // built when the selection changes and updated in place after.
  renderConn(sel) {
    const key = sel ? `${sel.host}/${sel.id}/${sel.found}/${sel.path_rows.length}` : "";
    if (key !== this.connKey) {
      this.connKey = key;
      this.buildConn(sel);
    }
    if (!sel || !sel.found) return;
    this.connSummary.textContent =
      `${sel.transport} · ${sel.state} · ${fmtRate(sel.rate_bps)} · cwnd ${fmtBytes(sel.cwnd)} · in flight ${fmtBytes(sel.inflight)}` +
      ` · srtt ${fmtTime(sel.srtt_ns)} · retx ${sel.retx} · RTO ${sel.timeouts}` +
      (sel.rate_hint_bps ? ` · hint ${fmtRate(sel.rate_hint_bps)}` : "");
    const hist = sel.hist;
    sel.path_rows.forEach((p, i) => {
      const r = this.pathRows[i];
      r.tr.className = `path ${p.state}`;
      setText(r.entropy, String(p.entropy));
      setText(r.state, p.state);
      r.cwnd.set(hist && hist.cwnd[i], fmtBytes(p.cwnd));
      r.rate.set(hist && hist.rate[i], fmtRate(p.rate_bps));
      r.rtt.set(hist && hist.rtt[i], fmtTime(p.srtt_ns));
      setText(r.hops, p.reached ? String(p.route.length) : `${p.route.length}✕`);
      r.hops.className = p.reached ? "num" : "num error";
    });
  }

  buildConn(sel) {
    clear(this.conn);
    this.pathRows = [];
    if (!sel) return;
    const box = html(this.conn, "div", { class: "box" });
    const close = html(box, "button", { class: "close", title: "unselect" }, "×");
    close.addEventListener("click", () => this.actions.select(null));
    html(box, "h2", {}, `${sel.host}→${sel.peer || "?"} conn ${sel.id}`);
    if (!sel.found) {
      html(box, "div", { class: "muted" }, "not open at this time");
      return;
    }
    this.connSummary = html(box, "div", { class: "muted" });
    const t = html(box, "table", { class: "rows paths" });
    const head = html(t, "tr");
    for (const [h, tip] of [["path", "path / plane"], ["entropy", "UDP source port"], ["state"], ["cwnd"], ["rate", "send rate"],
      ["RTT", "smoothed RTT"], ["hops", "links on its route now (✕: no route to the peer)"]]) html(head, "th", tip ? { title: tip } : {}, h);
    sel.path_rows.forEach((p, i) => {
      const tr = html(t, "tr", { class: "path" });
      html(tr, "td", {}, `${p.path}/${p.plane}`);
      const row = { tr, entropy: html(tr, "td", { class: "num" }), state: html(tr, "td") };
      row.cwnd = new Spark(html(tr, "td"), "cwnd");
      row.rate = new Spark(html(tr, "td"), "rate");
      row.rtt = new Spark(html(tr, "td"), "rtt");
      row.hops = html(tr, "td", { class: "num" });
      tr.addEventListener("mouseenter", () => this.actions.hoverPath(i));
      tr.addEventListener("mouseleave", () => this.actions.hoverPath(null));
      this.pathRows.push(row);
    });
  }
}

// Spark is a small line chart of a series with its current value beside.
class Spark {
  constructor(td, kind) {
    td.className = "spark";
    this.w = 34;
    this.h = 13;
    const s = svg(td, "svg", { width: this.w, height: this.h, class: `sparkline ${kind}` });
    this.line = svg(s, "polyline", { points: "" });
    this.label = html(td, "span");
  }

  set(values, label) {
    setText(this.label, label);
    let pts = "";
    if (values && values.length > 1) {
      const max = Math.max(...values) || 1;
      const { w, h } = this;
      pts = values.map((v, i) => `${((i / (values.length - 1)) * w).toFixed(1)},${(h - 1 - (v / max) * (h - 2)).toFixed(1)}`).join(" ");
    }
    if (this.line.getAttribute("points") !== pts) this.line.setAttribute("points", pts);
  }
}

function setText(el, s) {
  if (el.textContent !== s) el.textContent = s;
}
