// The sink's cluster page: one row per node that published, filtered and paged by the server
// (so a thousand nodes cost the browser one page of rows), refreshed when any node changes.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const el = view.el;
  const pageSize = 50;
  let offset = 0;

  function query() {
    const q = new URLSearchParams({offset, limit: pageSize});
    for (const name of ["family", "type", "health", "q"]) {
      const v = $(name).value.trim();
      if (v) q.set(name, v);
    }
    return "/api/nodes?" + q;
  }

  // Keeps a select's choice while its options follow what the cluster has.
  function setOptions(select, values) {
    const chosen = select.value;
    select.replaceChildren(el("option", {value: ""}, "any"),
                           ...values.map((v) => el("option", {value: v}, v)));
    select.value = values.includes(chosen) ? chosen : "";
  }

  function age(seconds) {
    if (seconds < 60) return Math.round(seconds) + " s ago";
    if (seconds < 3600) return Math.round(seconds / 60) + " min ago";
    return Math.round(seconds / 3600) + " h ago";
  }

  // The node's devices together over the last minutes, as its agent published them: a
  // small chart and the newest value; "-" for a node whose agent publishes no telemetry.
  const load = view.sparkCell;

  function draw(data) {
    setOptions($("family"), data.facets.families);
    setOptions($("type"), data.facets.types);
    $("summary").textContent = data.total + " nodes, " + data.devices + " devices, " +
        data.unhealthy_devices + " unhealthy";
    const last = Math.min(data.offset + data.nodes.length, data.matched);
    $("page").textContent = data.matched ? (data.offset + 1) + "-" + last + " of " + data.matched : "none";
    $("prev").disabled = data.offset === 0;
    $("next").disabled = last >= data.matched;
    view.fillTable($("nodes"), data.nodes, (n) => [
      el("td", {class: "mono"}, el("a", {href: "/node/" + n.node_id}, n.node_id.slice(0, 12))),
      Object.entries(n.families).map(([f, c]) => el("span", {class: "chip"}, c + " " + f)),
      n.types.join(", ") || "-",
      el("td", {class: "health " + (n.health.unhealthy ? "unhealthy" : "healthy")},
         n.health.unhealthy ? n.health.unhealthy + " unhealthy" : "healthy",
         n.health.unknown ? el("div", {class: "muted"}, n.health.unknown + " unknown") : null),
      n.domains.map((d) => el("span", {class: "chip", title: d.id}, d.kind + " (" + d.devices + ")")),
      n.plugins_not_active ? el("span", {class: "chip bad"}, n.plugins_not_active + " not active") : "ok",
      load(n.load, "utilization", 100, (p) => p.utilization + "%"),
      load(n.load, "memory_used", (p) => p.memory_total,
           (p) => view.bytes(p.memory_used) + " of " + view.bytes(p.memory_total)),
      load(n.load, "power_mw", () => Math.max(...n.load.map((q) => q.power_mw || 0)),
           (p) => (p.power_mw / 1000).toFixed(0) + " W"),
      el("td", {class: "num"}, n.generation),
      age(n.age_ms / 1000),
    ], (n) => ({class: n.health.unhealthy ? "unhealthy" : "", "data-node": n.node_id}),
    "no node has published yet");
    document.body.dataset.version = data.version;
  }

  const refresh = view.coalesced(async () => draw(await view.json(query())),
                                  (message) => { $("summary").textContent = message; });

  for (const kind of ["input", "change"]) {
    $("filters").addEventListener(kind, () => { offset = 0; refresh(); });
  }
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  $("prev").onclick = () => { offset = Math.max(0, offset - pageSize); refresh(); };
  $("next").onclick = () => { offset += pageSize; refresh(); };
  refresh();
  view.follow("/api/events", refresh);
  setInterval(refresh, 5000);  // the "updated" ages move even when nothing changes
})();
