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
    page, which shows that node.
Screenshots of both pages are left in ARTEFACTS_DIR.
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


def agent(tmp, name, spec, node_id, sink_socket, http=False, token_file=None):
    args = ["serve", "--listen", f"unix:{tmp}/{name}.sock", "--plugin-path", PLUGINS,
            "--plugin", "sim", "--config", f"sim.spec={spec}", "--no-host-topology",
            "--raylet", f"unix:{sink_socket}", "--node-id", node_id]
    if http:
        args += ["--http", "tcp://127.0.0.1:0"]
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
        agent_url = agent(tmp, "h100", spec, node_ids["h100"], f"{tmp}/sink.sock", http=True,
                          token_file=token_file)
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
        check_cluster_page(driver, sink_url, node_ids)
        print("web view: node page, live health, cluster page: as a user sees them")
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
