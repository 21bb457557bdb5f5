// One node's page: devices, links, NUMA, domains, plugins and what Ray is given, redrawn
// whenever the node's snapshot changes (an event from the server names the new generation).
// The same page serves the agent ("/", data under /api) and a node of the sink's cluster
// ("/node/ID", data under /api/node/ID).
"use strict";

(() => {
  const nodeMatch = location.pathname.match(/^\/node\/([0-9a-f]+)$/);
  const api = nodeMatch ? "/api/node/" + nodeMatch[1] : "/api";
  const $ = (id) => document.getElementById(id);
  const el = view.el;
  if (nodeMatch) {
    $("cluster").hidden = false;
    $("title").textContent = "rayaccel node " + nodeMatch[1].slice(0, 12);
    document.title = "rayaccel: node " + nodeMatch[1].slice(0, 12);
  }

  const healthCell = (d) => el("td", {class: "health " + d.health, title: d.health_reason},
      d.health, d.health_reason ? el("div", {class: "muted"}, d.health_reason) : null);

  function drawDevices(snap, labels) {
    view.fillTable($("devices"), snap.devices, (d) => [
      el("td", {class: "num"}, d.position),
      el("td", {}, labels[d.position] || d.resource + d.index, el("div", {class: "muted"}, d.name)),
      d.accelerator_type || "-",
      el("td", {class: "num"}, view.bytes(d.memory_bytes)),
      d.numa_node === null ? "-" : d.numa_node,
      el("td", {class: "mono"}, d.pci_bus_id || "-"),
      healthCell(d),
      el("td", {class: "mono"}, d.id),
    ], (d) => ({class: d.health, "data-id": d.id}), "no devices");
  }

  // The matrix like `nvidia-smi topo -m`, each cell coloured by its kind.
  function drawLinks(snap, topo) {
    const best = new Map();  // "a,b" -> the link with the most bandwidth
    for (const l of snap.links) {
      for (const key of [l.a + "," + l.b, l.b + "," + l.a]) {
        const had = best.get(key);
        if (!had || l.bandwidth_mbps > had.bandwidth_mbps) best.set(key, l);
      }
    }
    const labels = topo.devices.map((d) => d.label);
    const head = el("tr", {}, el("th", {}), labels.map((label, i) =>
      el("th", {class: snap.devices[i] && snap.devices[i].health === "unhealthy" ? "unhealthy" : ""},
         label)));
    const kinds = new Map();
    const rows = topo.matrix.map((row, a) => el("tr", {}, el("th", {}, labels[a]), row.map((cell, b) => {
      if (a === b) return el("td", {class: "self"}, cell);
      const link = best.get(a + "," + b);
      const pcie = ["PIX", "PXB", "PHB", "NODE", "SYS"].includes(cell);
      let cls = pcie ? "pcie-" + cell : "direct";
      if (!pcie && link && link.count >= 8) cls += " strong";
      let title = labels[a] + " - " + labels[b] + ": " + cell;
      if (link && link.bandwidth_mbps) title += ", " + (link.bandwidth_mbps / 1000) + " GB/s";
      if (a < b) {
        const k = kinds.get(cell) || {n: 0, mbps: link ? link.bandwidth_mbps : 0};
        ++k.n;
        kinds.set(cell, k);
      }
      return el("td", {class: cls, title}, cell);
    })));
    $("links").replaceChildren(el("thead", {}, head), el("tbody", {}, rows));
    $("link-legend").replaceChildren(...[...kinds].map(([cell, k]) =>
      el("span", {class: "chip"}, k.n + " x " + cell + (k.mbps ? ", " + k.mbps / 1000 + " GB/s" : ""))));
  }

  function drawNuma(snap, labels) {
    const groups = new Map();
    for (const d of snap.devices) {
      const key = d.numa_node === null ? "-" : String(d.numa_node);
      const g = groups.get(key) || {numa: key, devices: [], cpus: new Set(), nics: new Set()};
      g.devices.push(labels[d.position]);
      if (d.cpuset) g.cpus.add(d.cpuset);
      d.nearest_nics.forEach((n) => g.nics.add(n));
      groups.set(key, g);
    }
    view.fillTable($("numa"), [...groups.values()], (g) => [
      g.numa, g.devices.join(" "), el("td", {class: "mono"}, [...g.cpus].join(" ") || "-"),
      [...g.nics].join(" ") || "-"], null, "no devices");
  }

  function drawRest(snap, labels) {
    view.fillTable($("domains"), snap.domains, (d) => [
      d.kind, el("td", {class: "mono"}, d.id), d.devices.map((p) => labels[p]).join(" ")],
      null, "none");
    const hooks = (p) => (p.capabilities || []).map((c) => el("span", {class: "chip"}, c));
    view.fillTable($("plugins"), snap.plugins, (p) => [
      p.name, el("td", {class: "state " + p.status}, p.status),
      el("td", {class: "num"}, p.device_count), p.resource || "-", p.vendor || "-",
      p.version || "-", p.abi_version || "-", el("td", {}, hooks(p)), p.message],
      null, "no plugins");
    view.fillTable($("resources"), Object.entries(snap.ray.resources), ([k, v]) =>
      [el("td", {class: "mono"}, k), el("td", {class: "num"}, v)], null, "none");
    view.fillTable($("labels"), Object.entries(snap.ray.labels), ([k, v]) =>
      [el("td", {class: "mono"}, k), el("td", {class: "mono"}, v)], null, "none");
  }

  let shown = "";  // the snapshot drawn, as text: a redraw only when something changed
  let pictures = 0;
  const refresh = view.coalesced(async () => {
    const [snap, topo] = await Promise.all([view.json(api + "/snapshot"),
                                            view.json(api + "/topology")]);
    const key = JSON.stringify(snap);
    if (key === shown) return;
    const labels = topo.devices.map((d) => d.label);
    drawDevices(snap, labels);
    drawLinks(snap, topo);
    drawNuma(snap, labels);
    drawRest(snap, labels);
    $("picture").data = api + "/topology.svg?drawing=" + ++pictures;
    shown = key;
    $("generation").textContent = "generation " + snap.generation;
    document.body.dataset.generation = snap.generation;
  }, (message) => { $("generation").textContent = message; });
  refresh();
  view.follow(api + "/events", refresh);
})();
