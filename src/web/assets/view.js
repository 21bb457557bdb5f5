// Shared by the node and cluster pages: building DOM from data (text only, never markup from
// the server), fetching JSON, and following a server-sent event stream.
"use strict";

const view = {
  // el("td", {class: "num"}, "8", childNode, ...): an element with attributes and children.
  el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) {
      if (c !== undefined && c !== null) e.append(c instanceof Node ? c : String(c));
    }
    return e;
  },

  // Replaces a table's body with one row per item; `cells(item)` gives the row's cells.
  fillTable(table, items, cells, rowAttrs, emptyText) {
    const body = table.tBodies[0] || table.createTBody();
    const columns = table.tHead ? table.tHead.rows[0].cells.length : 1;
    const rows = items.map((item) =>
      view.el("tr", rowAttrs ? rowAttrs(item) : {}, cells(item).map(
        (c) => (c instanceof Node && c.tagName === "TD") ? c : view.el("td", {}, c))));
    if (rows.length === 0 && emptyText) {
      rows.push(view.el("tr", {}, view.el("td", {colspan: columns, class: "empty"}, emptyText)));
    }
    body.replaceChildren(...rows);
  },

  // One run of `work` at a time: a call while one runs asks for one more run after it, so a
  // burst of events costs at most two fetches. `onError` shows what went wrong.
  coalesced(work, onError) {
    let busy = false;
    let again = false;
    const run = async () => {
      if (busy) { again = true; return; }
      busy = true;
      try {
        await work();
      } catch (e) {
        onError(String(e.message || e));
      } finally {
        busy = false;
        if (again) { again = false; run(); }
      }
    };
    return run;
  },

  async json(url) {
    const r = await fetch(url, {cache: "no-store", credentials: "same-origin"});
    if (!r.ok) throw new Error(url + ": " + r.status + " " + (await r.text()));
    return r.json();
  },

  bytes(n) {
    if (!n) return "-";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; ++i; }
    return (Number.isInteger(n) ? n : n.toFixed(1)) + " " + units[i];
  },

  // A small line chart (SVG) of points[key] over points[].t, scaled to max(point) (a number
  // or a function of the point); null when no point has the key.
  spark(points, key, max) {
    const values = points.filter((p) => p[key] !== undefined);
    if (!values.length) return null;
    const ns = "http://www.w3.org/2000/svg";
    const [w, h] = [120, 24];
    const t0 = values[0].t;
    const span = Math.max(values[values.length - 1].t - t0, 1);
    const top = typeof max === "function" ? max : () => max;
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("width", w);
    svg.setAttribute("height", h);
    svg.setAttribute("class", "spark");
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", values.map((p) =>
      ((p.t - t0) / span * (w - 2) + 1).toFixed(1) + "," +
      (h - 1 - Math.min(p[key] / (top(p) || 1), 1) * (h - 2)).toFixed(1)).join(" "));
    svg.append(line);
    return svg;
  },

  // A table cell with spark(points, key, max) and text(the newest point) beside it, its key
  // and newest value in data-key and data-value; "-" when no point has the key.
  sparkCell(points, key, max, text) {
    const svg = view.spark(points, key, max);
    if (!svg) return view.el("td", {class: "muted"}, "-");
    const last = points.filter((p) => p[key] !== undefined).pop();
    return view.el("td", {class: "telemetry", "data-key": key, "data-value": last[key]}, svg,
                   view.el("span", {class: "num"}, text(last)));
  },

  // Follows `url` (server-sent events): calls onEvent(data) for each, shows the state in the
  // header's badge, and falls back to polling every `pollMs` while the stream is refused.
  follow(url, onEvent, pollMs) {
    const live = document.getElementById("live");
    const show = (state, text) => { live.className = "live " + state; live.textContent = text; };
    let poll = null;
    const source = new EventSource(url, {withCredentials: true});
    source.onopen = () => {
      show("on", "live");
      if (poll) { clearInterval(poll); poll = null; }
    };
    source.onmessage = (e) => onEvent(JSON.parse(e.data));
    source.onerror = () => {
      show("off", "reconnecting");
      if (!poll) poll = setInterval(() => onEvent(null), pollMs || 2000);
    };
  },
};
