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

  // Past this many devices a cell per pair is more than a screen: an NVL72 rack's 72 x 72 grid
  // is 5184 cells, 5000 px wide, and most of the page's drawing time.
  const gridDevices = 16;

  // Devices the matrix cannot tell apart share a row and a column: each has the same kind to
  // every other device, and one kind among them (so every cell stands for all its pairs).
  // An NVL72 rack is one row, "GPU0-GPU71 (72)", NV18 among them.
  function interchangeable(matrix) {
    const n = matrix.length;
    if (n <= gridDevices) return matrix.map((_, a) => ({members: [a], inner: null}));
    const same = (a, r) => {
      for (let c = 0; c < n; ++c) {
        if (c === a || c === r) continue;
        if (matrix[a][c] !== matrix[r][c] || matrix[c][a] !== matrix[c][r]) return false;
      }
      return true;
    };
    const groups = [];
    for (let a = 0; a < n; ++a) {
      const g = groups.find(({members: [r], inner}) => matrix[a][r] === matrix[r][a] &&
          (inner === null || inner === matrix[a][r]) && same(a, r));
      if (g) {
        g.inner = matrix[a][g.members[0]];
        g.members.push(a);
      } else {
        groups.push({members: [a], inner: null});
      }
    }
    return groups;
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
    const unhealthy = (p) => snap.devices[p] && snap.devices[p].health === "unhealthy";
    const groups = interchangeable(topo.matrix);
    const name = ({members}) => {
      const [first, last] = [members[0], members[members.length - 1]];
      if (members.length === 1) return labels[first];
      if (last - first + 1 === members.length) {
        return labels[first] + "-" + labels[last] + " (" + members.length + ")";
      }
      return labels[first] + " and " + (members.length - 1) + " more";
    };
    const header = (g) => {
      const bad = g.members.filter(unhealthy).map((p) => labels[p]);
      const title = g.members.length > 1 ? g.members.map((p) => labels[p]).join(" ") +
          (bad.length ? "; unhealthy: " + bad.join(" ") : "") : null;
      return el("th", {class: bad.length ? "unhealthy" : "", title}, name(g));
    };
    const cell = (g, h) => {
      const [a, b] = [g.members[0], g === h ? g.members[1] : h.members[0]];
      if (b === undefined) return el("td", {class: "self"}, topo.matrix[a][a]);
      const kind = topo.matrix[a][b];
      const link = best.get(a + "," + b);
      const pcie = ["PIX", "PXB", "PHB", "NODE", "SYS"].includes(kind);
      let cls = kind === "-" ? "none" : pcie ? "pcie-" + kind : "direct";  // "-": no link
      if (cls === "direct" && link && link.count >= 8) cls += " strong";
      let title = name(g) + (g === h ? " among themselves" : " - " + name(h)) + ": " + kind;
      if (link && link.bandwidth_mbps) title += ", " + (link.bandwidth_mbps / 1000) + " GB/s";
      return el("td", {class: cls, title}, kind);
    };
    const rows = groups.map((g) => el("tr", {}, header(g), groups.map((h) => cell(g, h))));
    $("links").replaceChildren(el("thead", {}, el("tr", {}, el("th", {}), groups.map(header))),
                               el("tbody", {}, rows));
    $("link-groups").textContent = groups.length < topo.matrix.length
        ? topo.matrix.length + " devices in " + groups.length +
          (groups.length === 1 ? " row" : " rows") +
          ": devices with the same links to all others share one"
        : "";
    const kinds = new Map();  // every pair counted, grouped or not
    topo.matrix.forEach((row, a) => row.forEach((kind, b) => {
      if (a >= b) return;
      const link = best.get(a + "," + b);
      const k = kinds.get(kind) || {n: 0, mbps: link ? link.bandwidth_mbps : 0};
      ++k.n;
      kinds.set(kind, k);
    }));
    $("link-legend").replaceChildren(...[...kinds].map(([kind, k]) => el("span", {class: "chip"},
        k.n + " x " + kind + (k.mbps ? ", " + k.mbps / 1000 + " GB/s" : ""))));
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
    // The newest conformance report of each plugin the agent was given (serve
    // --conformance-reports): its tier, date and Ray, and the checks it failed.
    const tier = (p) => {
      const r = reports[p.name];
      if (!r) return "-";
      const failed = r.failed.length ? "; failed: " + r.failed.join(", ") : "";
      return el("td", {class: "tier", title: (r.file || "") + failed},
                `${r.tier} ${r.tier_name} (${r.date.slice(0, 10)}` +
                (r.ray ? `, Ray ${r.ray})` : ")"));
    };
    view.fillTable($("plugins"), snap.plugins, (p) => [
      p.name, el("td", {class: "state " + p.status}, p.status),
      el("td", {class: "num"}, p.device_count), p.resource || "-", p.vendor || "-",
      p.version || "-", p.abi_version || "-", el("td", {}, hooks(p)), tier(p), p.message],
      null, "no plugins");
    view.fillTable($("resources"), Object.entries(snap.ray.resources), ([k, v]) =>
      [el("td", {class: "mono"}, k), el("td", {class: "num"}, v)], null, "none");
    view.fillTable($("labels"), Object.entries(snap.ray.labels), ([k, v]) =>
      [el("td", {class: "mono"}, k), el("td", {class: "mono"}, v)], null, "none");
  }

  // Each device's last minutes (the agent's /api/telemetry, sampled every few seconds; on a
  // sink's node page, what that node's agent published): a small chart per value, the newest
  // value beside it; a device whose plugin's sampling failed is marked stale with its last
  // values. Without samples (telemetry off, an agent that publishes none) the section stays
  // hidden.
  const chart = view.sparkCell;
  const pollTelemetry = view.coalesced(async () => {
    const got = await view.json(api + "/telemetry");
    if (got.off || !got.devices) return;
    const snap = lastSnap;
    if (!snap) return;
    const labels = lastLabels;
    const rows = snap.devices.filter((d) => got.devices[d.id]);
    $("telemetry-section").hidden = rows.length === 0;
    const failed = Object.entries(got.plugins || {}).filter(([, p]) => p.error)
        .map(([name, p]) => name + ": " + p.error);
    $("telemetry-note").textContent = failed.length ? "stale: " + failed.join("; ") : "";
    view.fillTable($("telemetry"), rows, (d) => {
      const history = got.devices[d.id];
      const pts = history.points;
      return [
        el("td", {}, labels[d.position] || d.id, history.stale ? el("div", {class: "muted"}, "stale") : null),
        chart(pts, "utilization", () => 100, (p) => p.utilization + "%"),
        chart(pts, "memory_used", (p) => p.memory_total, (p) => view.bytes(p.memory_used)),
        chart(pts, "power_mw", () => Math.max(...pts.map((q) => q.power_mw || 0)),
              (p) => (p.power_mw / 1000).toFixed(0) + " W"),
        chart(pts, "temperature_c", () => 110, (p) => p.temperature_c + " C"),
      ];
    }, (d) => ({class: got.devices[d.id].stale ? "stale" : "", "data-id": d.id}), "no samples");
    document.body.dataset.telemetrySamples = got.samples;
  }, (message) => { $("telemetry-note").textContent = message; });
  let lastSnap = null;
  let lastLabels = [];

  // Devices lost since the agent started, and what Ray was told (serve --on-device-loss): a
  // banner above the page while there are any.
  const pollDeviceLoss = view.coalesced(async () => {
    if (api !== "/api") return;
    const got = await view.json("/api/ray");
    const banner = $("device-loss");
    banner.hidden = !got.lost || got.lost.length === 0;
    if (banner.hidden) return;
    const lost = got.lost.map((d) => d.resource + " " + d.id + ": " + d.reason).join("; ");
    let ray = "Ray still schedules here (--on-device-loss report)";
    if (got.drain && got.drain.accepted) {
      ray = "Ray's GCS is draining this node since " +
          new Date(got.drain.accepted_unix_ms).toLocaleTimeString() +
          ": no new work lands here, running work finishes";
    } else if (got.drain) {
      ray = "asking Ray to drain this node (attempt " + got.drain.attempts + ")" +
          (got.drain.error ? ": " + got.drain.error : "");
    }
    banner.replaceChildren(el("strong", {}, "Lost after start: "), lost, el("div", {}, ray));
    banner.dataset.drained = got.drain && got.drain.accepted ? "yes" : "no";
  }, () => {});

  let shown = "";  // the snapshot drawn, as text: a redraw only when something changed
  let pictures = 0;
  // Plugin name -> its newest conformance report: the agent's (a sink's node pages have none).
  let reports = {};
  const loadReports = async () => {
    if (api !== "/api") return "";
    try {
      const got = await view.json("/api/conformance");
      reports = Object.fromEntries(got.reports.map((r) => [r.plugin, r]));
    } catch (e) {
      reports = {};
    }
    return JSON.stringify(reports);
  };
  const refresh = view.coalesced(async () => {
    const [snap, topo, reportsKey] = await Promise.all([view.json(api + "/snapshot"),
                                                        view.json(api + "/topology"),
                                                        loadReports()]);
    const key = JSON.stringify(snap) + reportsKey;
    if (key === shown) return;
    const labels = topo.devices.map((d) => d.label);
    lastSnap = snap;
    lastLabels = labels;
    drawDevices(snap, labels);
    drawLinks(snap, topo);
    drawNuma(snap, labels);
    drawRest(snap, labels);
    $("picture").data = api + "/topology.svg?drawing=" + ++pictures;
    shown = key;
    $("generation").textContent = "generation " + snap.generation;
    document.body.dataset.generation = snap.generation;
  }, (message) => { $("generation").textContent = message; });
  refresh().then(pollTelemetry).then(pollDeviceLoss);
  view.follow(api + "/events", () => refresh().then(pollDeviceLoss));
  setInterval(pollTelemetry, 3000);  // a sink's node pages: what the node's agent published
  if (api === "/api") setInterval(pollDeviceLoss, 3000);
})();
