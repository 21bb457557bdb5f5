#!/usr/bin/python3
"""The web view in a real browser: headless Chromium driven through ChromeDriver.

    browser_test.py BUILD_DIR SOURCE_DIR ARTEFACTS_DIR

A sink with --http and three agents publishing to it (the sim's DGX H100, a TPU host, a DGX-1),
the first with --http and a bearer token. Checks, as a user sees them:
  - the node page, opened with ?token=, shows the 8 H100 GPUs, the NV18 grid, the NUMA nodes
    and the Ray resources, and follows the agent live;
  - a GPU marked unhealthy in the spec turns its row red without a reload (the time it took is
    printed, not asserted);
  - the cluster page lists the three nodes, filters by family and health, and opens a node's
    page, which shows that node;
  - a 72-GPU GB200 NVL72 rack (examples/nvl72.json, 2556 links) on a sink of its own: every
    table within a second of the data's arrival (printed, and asserted), the link grid as one
    row of 72 interchangeable GPUs that fits its box, the Ray labels with ray.io/gpu-domain,
    and the cluster page of two such nodes linking to each node's page.
Screenshots of the pages are left in ARTEFACTS_DIR.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

BUILD, SOURCE, ARTEFACTS = sys.argv[1:4]
RAYACCEL = os.path.join(BUILD, "bin", "rayaccel")
PLUGINS = os.path.join(BUILD, "lib", "rayaccel", "plugins")
WAIT = 20  # seconds any one thing may take on a loaded CI machine before the test gives up

processes = []


def start(args, name, tmp):
    """Starts rayaccel ARGS; returns the process and its stderr file's path."""
    err = os.path.join(tmp, name + ".err")
    p = subprocess.Popen([RAYACCEL, "--log-level", "info"] + args, stdout=subprocess.DEVNULL,
                         stderr=open(err, "w"), start_new_session=True)
    processes.append(p)
    return p, err


def wait_for_log(err, pattern, proc):
    deadline = time.time() + WAIT
    while time.time() < deadline:
        m = re.search(pattern, open(err).read())
        if m:
            return m
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {open(err).read()}")
        time.sleep(0.05)
    raise AssertionError(f"no {pattern!r} in {open(err).read()}")


def agent(tmp, name, spec, node_id, sink_socket, http=False, token_file=None, reports=None):
    args = ["serve", "--listen", f"unix:{tmp}/{name}.sock", "--plugin-path", PLUGINS,
            "--plugin", "sim", "--config", f"sim.spec={spec}", "--no-host-topology",
            "--raylet", f"unix:{sink_socket}", "--node-id", node_id]
    if http:
        args += ["--http", "tcp://127.0.0.1:0", "--telemetry-interval", "1"]
    if reports:
        args += ["--conformance-reports", reports]
    if token_file:
        args += ["--token-file", token_file]
    p, err = start(args, name, tmp)
    if http:
        return wait_for_log(err, r"web view on (http://[0-9.:]+)/", p).group(1)
    return None


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1800", "--disable-extensions", "--no-first-run"]:
        options.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def until(driver, check, what):
    try:
        # The pages redraw tables whole: an element found a moment ago may be gone; look again.
        return WebDriverWait(driver, WAIT, poll_frequency=0.05,
                             ignored_exceptions=[StaleElementReferenceException]).until(check)
    except Exception as e:
        raise AssertionError(f"waiting for {what}: {e!r}\n{driver.page_source[:3000]}")


def rows(driver, table):
    return driver.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr")


def table(driver, name):
    """A table's body rows as [{class, node, cells}], read in one step: the pages redraw whole
    tables, so rows read one by one may come from two drawings."""
    return driver.execute_script("""
        return [...document.querySelectorAll(`#${arguments[0]} tbody tr`)].map((r) => ({
          class: r.className, node: r.dataset.node || null,
          cells: [...r.cells].map((c) => c.innerText)}));""", name)


def cells_of(driver, name):
    return [r["cells"] for r in table(driver, name)]


def check_node_page(driver, url, tmp, spec):
    driver.get(url)
    until(driver, lambda d: len(rows(d, "devices")) == 8, "8 devices")
    devices = cells_of(driver, "devices")
    assert all(c[2] == "H100" for c in devices), devices
    assert all(c[6].startswith("healthy") for c in devices), devices
    grid = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#links td.direct")]
    assert len(grid) == 56 and set(grid) == {"NV18"}, grid  # every pair, both ways
    legend = driver.find_element(By.ID, "link-legend").text
    assert "28 x NV18, 450 GB/s" in legend, legend
    resources = dict(cells_of(driver, "resources"))
    assert resources.get("GPU") == "8" and resources.get("accelerator_type:H100") == "1", resources
    labels = dict(cells_of(driver, "labels"))
    assert labels.get("ray.io/accelerator-type") == "H100", labels
    plugins = cells_of(driver, "plugins")
    assert plugins[0][0] == "sim" and plugins[0][1] == "active", plugins
    numa = cells_of(driver, "numa")
    assert [n[0] for n in numa] == ["0", "1"], numa
    until(driver, lambda d: d.find_element(By.ID, "live").text == "live", "the live badge")
    driver.save_screenshot(os.path.join(ARTEFACTS, "node-page.png"))

    # Telemetry: a row per device with a chart per value, whose newest values change as the
    # agent samples (every second here), without a reload.
    until(driver, lambda d: not d.find_element(By.ID, "telemetry-section").get_attribute("hidden")
          and len(rows(d, "telemetry")) == 8, "the telemetry section")
    read = """return [...document.querySelectorAll('#telemetry td.telemetry[data-key=utilization]')]
                .map((c) => [c.dataset.value, c.querySelector('polyline').getAttribute('points')
                             .split(' ').length]);"""
    first = driver.execute_script(read)
    assert len(first) == 8 and all(0 <= int(v) <= 100 for v, _ in first), first
    until(driver, lambda d: d.execute_script(read) != first and
          min(n for _, n in d.execute_script(read)) >= 3, "the charts to move")
    telemetry = cells_of(driver, "telemetry")
    assert all(c[3].endswith(" W") and c[4].endswith(" C") for c in telemetry), telemetry
    driver.save_screenshot(os.path.join(ARTEFACTS, "node-page-telemetry.png"))

    # GPU3 turns unhealthy in the spec: the sim's health watch sees the edit, the agent
    # publishes a new generation, the page redraws the row, all without a reload.
    driver.execute_script("window.notReloaded = true;")
    data = json.load(open(spec))
    data["devices"][3]["health"] = "unhealthy"
    data["devices"][3]["health_reason"] = "XID 79: fallen off the bus"
    edited = spec + ".new"
    json.dump(data, open(edited, "w"), indent=2)
    began = time.monotonic()
    os.rename(edited, spec)
    until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#devices tr.unhealthy"),
          "GPU3's row to turn unhealthy")
    took = time.monotonic() - began
    row, colour = driver.execute_script("""
        const r = document.querySelector("#devices tr.unhealthy");
        return [r.innerText, getComputedStyle(r.cells[0]).backgroundColor];""")
    assert "XID 79" in row and "GPU3" in row, row
    assert colour == "rgb(253, 236, 236)", colour  # --bad-bg: the row is red
    assert driver.execute_script("return window.notReloaded === true;"), "the page reloaded"
    header = driver.find_element(By.CSS_SELECTOR, "#links th.unhealthy").text
    assert header == "GPU3", header
    # A device the node had at start is lost: the banner says so, and what Ray was told (this
    # agent reports only; tests/ray/test_device_loss.py drains a real Ray node).
    until(driver, lambda d: not d.find_element(By.ID, "device-loss").get_attribute("hidden"),
          "the device-loss banner")
    banner = driver.find_element(By.ID, "device-loss").text
    assert "Lost after start" in banner and "XID 79" in banner, banner
    assert "Ray still schedules here (--on-device-loss report)" in banner, banner
    driver.save_screenshot(os.path.join(ARTEFACTS, "node-page-unhealthy.png"))
    print(f"node page: GPU3 turned red {took * 1000:.0f} ms after the spec was edited")


def check_cluster_page(driver, url, node_ids):
    driver.get(url + "/")
    until(driver, lambda d: len(rows(d, "nodes")) == 3, "3 nodes")
    listed = {r["node"]: r["cells"] for r in table(driver, "nodes")}
    assert set(listed) == set(node_ids.values()), listed
    h100 = listed[node_ids["h100"]]
    assert h100[1] == "8 GPU" and h100[2] == "H100", h100
    assert h100[3] == "1 unhealthy", h100  # GPU3, from the node page's check
    tpu = listed[node_ids["tpu"]]
    assert "TPU" in tpu[1], tpu
    summary = driver.find_element(By.ID, "summary").text
    assert summary.startswith("3 nodes,"), summary
    # Each node's devices together, as its agent publishes its telemetry to the sink: a chart
    # of the last minutes and the newest value, moving without a reload.
    load = f"tr[data-node='{node_ids['h100']}'] td.telemetry[data-key=utilization]"
    until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, load), "the h100 node's load")
    read = f"""const c = document.querySelector("{load}");
               return c && [c.dataset.value, c.querySelector('polyline').getAttribute('points')];"""
    first = driver.execute_script(read)
    assert 0 <= int(first[0]) <= 100, first
    until(driver, lambda d: d.execute_script(read) != first, "the h100 node's load to move")
    row = {r["node"]: r["cells"] for r in table(driver, "nodes")}[node_ids["h100"]]
    assert row[6].endswith("%") and " of " in row[7] and row[8].endswith(" W"), row
    driver.set_window_size(1400, 420)  # three rows: no need for a tall picture
    driver.save_screenshot(os.path.join(ARTEFACTS, "cluster-page.png"))
    driver.set_window_size(1400, 1800)

    Select(driver.find_element(By.ID, "family")).select_by_value("TPU")
    until(driver, lambda d: [r["node"] for r in table(d, "nodes")] == [node_ids["tpu"]],
          "the TPU filter")
    Select(driver.find_element(By.ID, "family")).select_by_value("")
    Select(driver.find_element(By.ID, "health")).select_by_value("unhealthy")
    until(driver, lambda d: [r["node"] for r in table(d, "nodes")] == [node_ids["h100"]],
          "the health filter")

    driver.find_element(By.CSS_SELECTOR, f"tr[data-node='{node_ids['h100']}'] a").click()
    until(driver, lambda d: d.current_url.endswith("/node/" + node_ids["h100"]), "the node page")
    until(driver, lambda d: len(rows(d, "devices")) == 8, "the node's 8 devices")
    assert "unhealthy" in table(driver, "devices")[3]["class"]
    assert not driver.find_element(By.ID, "cluster").get_attribute("hidden")
    # The sink's node page charts each device from what the agent published.
    until(driver, lambda d: not d.find_element(By.ID, "telemetry-section").get_attribute("hidden")
          and len(rows(d, "telemetry")) >= 7, "the node's telemetry at the sink")


# When the devices table first holds all its rows, and a frame after it (painted), in the
# page's clock: installed before the page's own scripts run.
FILL_CLOCK = """
  new MutationObserver((_, observer) => {
    const rows = document.querySelectorAll("#devices tbody tr[data-id]").length;
    if (rows === 0 || rows !== window.wantRows) return;
    observer.disconnect();
    window.filledAt = performance.now();
    requestAnimationFrame(() => setTimeout(() => { window.paintedAt = performance.now(); }));
  }).observe(document, {subtree: true, childList: true});
"""


def check_nvl72_page(driver, url, spec):
    """The node page of an NVL72 rack: 72 GPUs, all NV18 to each other, one NVLink domain."""
    script = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                                    {"source": "window.wantRows = 72;" + FILL_CLOCK})
    try:
        driver.get(url)
        until(driver, lambda d: len(rows(d, "devices")) == 72, "72 devices")
        until(driver, lambda d: d.execute_script("return window.paintedAt !== undefined"),
              "a frame after the devices")
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument",
                               {"identifier": script["identifier"]})
    # The data's arrival: the first answers to the snapshot and the topology (the page asks
    # for both at once, and again at the stream's first event).
    arrived, filled, painted = driver.execute_script("""
        const ends = (path) => performance.getEntriesByType("resource")
            .filter((e) => new URL(e.name).pathname.endsWith(path)).map((e) => e.responseEnd);
        return [Math.max(ends("/snapshot")[0], ends("/topology")[0]), window.filledAt,
                window.paintedAt];""")
    print(f"NVL72 node page: devices drawn {filled - arrived:.0f} ms, painted "
          f"{painted - arrived:.0f} ms after the data arrived")
    assert painted - arrived < 1000, (arrived, filled, painted)

    spec_data = json.load(open(spec))
    domain = spec_data["domains"][0]["id"]
    devices = cells_of(driver, "devices")
    assert [c[1].split()[0] for c in devices] == [f"GPU{i}" for i in range(72)], devices
    assert all(c[2] == "GB200" and c[6].startswith("healthy") for c in devices), devices
    # 72 x 72 cells would be 5184, far wider than the page: interchangeable GPUs share a row.
    grid = driver.execute_script("""
        const t = document.getElementById("links"), box = t.parentElement;
        return {rows: [...t.rows].map((r) => [...r.cells].map((c) => [c.innerText, c.className])),
                fits: box.scrollWidth <= box.clientWidth && box.scrollHeight <= box.clientHeight,
                note: (document.getElementById("link-groups") || {}).innerText};""")
    shape = f"{len(grid['rows'])} rows, the first {grid['rows'][0][:3]}..., fits: {grid['fits']}"
    assert grid["rows"] == [[["", ""], ["GPU0-GPU71 (72)", ""]],
                            [["GPU0-GPU71 (72)", ""], ["NV18", "direct strong"]]], shape
    assert grid["fits"], shape
    assert grid["note"].startswith("72 devices in 1 row"), grid["note"]
    legend = driver.find_element(By.ID, "link-legend").text
    assert legend == "2556 x NV18, 900 GB/s", legend  # every pair counted, one row or not
    numa = cells_of(driver, "numa")
    assert [n[0] for n in numa] == ["0", "1"] and all(len(n[1].split()) == 36 for n in numa), numa
    domains = cells_of(driver, "domains")
    assert len(domains) == 1 and domains[0][:2] == ["nvlink", domain], domains
    assert len(domains[0][2].split()) == 72, domains
    plugins = cells_of(driver, "plugins")
    assert plugins[0][:3] == ["sim", "active", "72"], plugins
    resources = dict(cells_of(driver, "resources"))
    assert resources.get("GPU") == "72" and resources.get("accelerator_type:GB200") == "1", \
        resources
    labels = dict(cells_of(driver, "labels"))
    assert labels.get("ray.io/gpu-domain") == domain, labels
    assert labels.get("ray.io/accelerator-type") == "GB200", labels
    assert labels.get("rayaccel.io/gpu-count") == "72", labels
    driver.save_screenshot(os.path.join(ARTEFACTS, "node-page-nvl72.png"))


def check_nvl72_cluster(driver, url, node_ids):
    """A sink's cluster page of NVL72 nodes links to each node's page, which draws it."""
    driver.get(url + "/")
    until(driver, lambda d: len(rows(d, "nodes")) == len(node_ids), f"{len(node_ids)} nodes")
    listed = {r["node"]: r["cells"] for r in table(driver, "nodes")}
    assert set(listed) == set(node_ids), listed
    assert all(c[1] == "72 GPU" and c[2] == "GB200" for c in listed.values()), listed
    links = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const hrefs = [...document.querySelectorAll("#nodes tbody a")].map((a) => a.href);
        Promise.all(hrefs.map((h) => fetch(h).then((r) => [new URL(h).pathname, r.status])))
            .then(done, (e) => done(String(e)));""")
    assert sorted(links) == sorted([f"/node/{n}", 200] for n in node_ids), links
    driver.find_element(By.CSS_SELECTOR, f"tr[data-node='{node_ids[-1]}'] a").click()
    until(driver, lambda d: d.current_url.endswith("/node/" + node_ids[-1]), "the node page")
    until(driver, lambda d: len(rows(d, "devices")) == 72, "the node's 72 devices")
    until(driver, lambda d: [[c.text for c in r.find_elements(By.TAG_NAME, "td")]
                             for r in d.find_elements(By.CSS_SELECTOR, "#links tbody tr")]
          == [["NV18"]], "the node's link grid")


def main():
    os.makedirs(ARTEFACTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="rayaccel-web-")
    driver = None
    try:
        spec = os.path.join(tmp, "dgx-h100.json")
        shutil.copy(os.path.join(SOURCE, "examples", "dgx-h100.json"), spec)
        token_file = os.path.join(tmp, "token")
        with open(token_file, "w") as f:
            f.write("browser-test-token-0123456789\n")
        os.chmod(token_file, 0o600)
        sink, err = start(["sink", "--listen", f"unix:{tmp}/sink.sock",
                           "--http", "tcp://127.0.0.1:0"], "sink", tmp)
        sink_url = wait_for_log(err, r"web view on (http://[0-9.:]+)/", sink).group(1)
        node_ids = {"h100": "a" * 56, "tpu": "b" * 56, "v100": "c" * 56}
        # The sim plugin's conformance report, as `rayaccel-conformance --report` leaves it.
        reports = os.path.join(tmp, "reports", "sim")
        os.makedirs(reports)
        with open(os.path.join(reports, "report.json"), "w") as f:
            json.dump({"plugin": {"name": "sim", "file": "librayaccel-sim.so"}, "tier": 5,
                       "tier_name": "certified in Ray", "date": "2026-12-06T01:00:00Z",
                       "versions": {"ray": "2.60.0", "rayaccel": "0.2.0"}, "checks": []}, f)
        agent_url = agent(tmp, "h100", spec, node_ids["h100"], f"{tmp}/sink.sock", http=True,
                          token_file=token_file, reports=os.path.dirname(reports))
        agent(tmp, "tpu", os.path.join(SOURCE, "examples", "tpu-v4-host.json"), node_ids["tpu"],
              f"{tmp}/sink.sock")
        agent(tmp, "v100", os.path.join(SOURCE, "examples", "dgx1-v100.json"), node_ids["v100"],
              f"{tmp}/sink.sock")

        driver = browser()
        driver.get(agent_url + "/")  # no token yet: refused
        assert "401" in driver.title or "unauthenticated" in driver.page_source.lower() or \
            "token" in driver.page_source, driver.page_source[:500]
        check_node_page(driver, agent_url + "/?token=browser-test-token-0123456789", tmp, spec)
        assert "token=" not in driver.current_url, driver.current_url  # the cookie holds it
        # The plugin's newest conformance report, in its row.
        until(driver, lambda d: "5 certified in Ray (2026-12-06, Ray 2.60.0)" in
              table(d, "plugins")[0]["cells"], "the sim plugin's conformance tier")
        check_cluster_page(driver, sink_url, node_ids)

        # An NVL72 rack, on a sink of its own (the cluster above stays three nodes).
        nvl72 = os.path.join(SOURCE, "examples", "nvl72.json")
        sink72, err = start(["sink", "--listen", f"unix:{tmp}/sink72.sock",
                             "--http", "tcp://127.0.0.1:0"], "sink72", tmp)
        sink72_url = wait_for_log(err, r"web view on (http://[0-9.:]+)/", sink72).group(1)
        racks = ["e" * 56, "f" * 56]
        rack_url = agent(tmp, "nvl72", nvl72, racks[0], f"{tmp}/sink72.sock", http=True)
        agent(tmp, "nvl72b", nvl72, racks[1], f"{tmp}/sink72.sock")
        check_nvl72_page(driver, rack_url + "/", nvl72)
        check_nvl72_cluster(driver, sink72_url, racks)
        print("web view: node page, live health, cluster page, an NVL72 rack: as a user sees them")
    finally:
        if driver is not None:
            driver.quit()
        for p in processes:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in processes:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
