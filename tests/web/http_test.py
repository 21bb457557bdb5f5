#!/usr/bin/python3
"""The web view's HTTP rules and data, over real sockets, as a client sees them.

    http_test.py BUILD_DIR SOURCE_DIR

- the sink's /metrics parses with Prometheus's own parser and counts nodes, devices by health,
  updates, streams and refusals; /api/nodes filters, pages and refuses a bad query (400);
  an unknown node is 404; the event stream's first event comes at once;
- TLS on the HTTP listener with the agent's certificate files, and client certificates required
  when a client CA is given;
- the token: 401 without it, ?token= turns it into an HttpOnly cookie and redirects to the
  address without it, the cookie then opens every route, a wrong one is 401;
- more event streams than allowed are answered 503, and a closed one frees its place;
- under 1000 idle connections, 100 clients sending a header a byte a second and 32 event
  streams (bench/web_load.py, small), the agent's and the sink's /metrics and pages are all
  answered, the agent's gRPC service too, and every connection is closed once the load stops;
- an agent stopped with event streams open stops at once;
- the agent's /api/conformance: each plugin's newest conformance report in its folder.
"""

import http.client
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

BUILD, SOURCE = sys.argv[1:3]
RAYACCEL = os.path.join(BUILD, "bin", "rayaccel")
SIM = os.path.join(BUILD, "lib", "rayaccel", "plugins", "librayaccel-sim.so")
TLS = os.path.join(SOURCE, "tests", "fixtures", "tls")
processes = []


def start(args, err):
    p = subprocess.Popen([RAYACCEL, "--log-level", "info"] + args, stdout=subprocess.DEVNULL,
                         stderr=open(err, "w"), start_new_session=True)
    processes.append(p)
    return p


def web_address(p, err):
    deadline = time.time() + 20
    while time.time() < deadline:
        m = re.search(r"web view on https?://([0-9.:]+)/", open(err).read())
        if m:
            return m.group(1)
        assert p.poll() is None, open(err).read()
        time.sleep(0.05)
    raise AssertionError(open(err).read())


def get(url, headers=None, context=None):
    """(status, headers, body) without following redirects."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args):
            return None
    opener = urllib.request.build_opener(NoRedirect, urllib.request.HTTPSHandler(context=context))
    try:
        r = opener.open(urllib.request.Request(url, headers=headers or {}), timeout=10)
        return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def wait_until(check, what):
    deadline = time.time() + 20
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("waiting for " + what)


def samples(text):
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def check_sink(tmp):
    err = os.path.join(tmp, "sink.err")
    sink = start(["sink", "--listen", f"unix:{tmp}/sink.sock", "--http", "tcp://127.0.0.1:0"], err)
    base = "http://" + web_address(sink, err)
    ids = ["a" * 56, "b" * 56]
    for node_id, spec in zip(ids, ["dgx-h100.json", "tpu-v4-host.json"]):
        start(["serve", "--listen", f"unix:{tmp}/{node_id[0]}.sock", "--plugin", SIM,
               "--config", "sim.spec=" + os.path.join(SOURCE, "examples", spec),
               "--no-host-topology", "--raylet", f"unix:{tmp}/sink.sock", "--node-id", node_id],
              os.path.join(tmp, node_id[0] + ".err"))
    wait_until(lambda: json.loads(get(base + "/api/nodes")[2])["total"] == 2, "two nodes")
    # A stream refused: a hello without a node id, to a sink of many nodes.
    start(["serve", "--listen", f"unix:{tmp}/x.sock", "--plugin", SIM, "--no-host-topology",
           "--raylet", f"unix:{tmp}/sink.sock"], os.path.join(tmp, "x.err"))

    def refused():
        m = samples(get(base + "/metrics")[2])
        return m[("rayaccel_sink_refusals_total", ())] >= 1
    wait_until(refused, "a refusal in the metrics")
    status, headers, text = get(base + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    m = samples(text)
    assert m[("rayaccel_sink_nodes", ())] == 2, m
    assert m[("rayaccel_sink_devices", (("health", "healthy"), ("resource", "GPU")))] == 8, m
    assert m[("rayaccel_sink_devices", (("health", "healthy"), ("resource", "TPU")))] == 4, m
    assert m[("rayaccel_sink_updates_total", ())] == 2, m
    assert m[("rayaccel_sink_streams_open", ())] == 2, m
    assert m[("rayaccel_sink_streams_total", ())] == 2, m
    for node_id in ids:
        age = m[("rayaccel_sink_node_last_update_age_seconds", (("node_id", node_id),))]
        assert 0 <= age < 60, age

    page = json.loads(get(base + "/api/nodes?family=TPU")[2])
    assert page["total"] == 2 and page["matched"] == 1, page
    assert page["nodes"][0]["node_id"] == ids[1] and page["nodes"][0]["families"] == {"TPU": 4}
    assert page["facets"] == {"families": ["GPU", "TPU"], "types": ["H100", "TPU-V4"]}, page
    page = json.loads(get(base + "/api/nodes?offset=1&limit=1")[2])
    assert [n["node_id"] for n in page["nodes"]] == [ids[1]] and page["matched"] == 2, page
    assert json.loads(get(base + "/api/nodes?type=H100&health=healthy")[2])["matched"] == 1
    status, _, body = get(base + "/api/nodes?limit=many")
    assert status == 400 and "limit must be a whole number" in body, (status, body)
    status, _, body = get(base + "/api/nodes?colour=red")
    assert status == 400 and "unknown parameter colour" in body, (status, body)
    snap = json.loads(get(base + f"/api/node/{ids[0]}/snapshot")[2])
    assert len(snap["devices"]) == 8 and snap["ray"]["resources"]["GPU"] == 8, snap
    assert get(base + f"/api/node/{'d' * 56}/snapshot")[0] == 404
    assert get(base + f"/node/{'d' * 56}")[0] == 404
    assert get(base + f"/api/node/{'d' * 56}/events")[0] == 404
    # No token, loopback: a request for another name (DNS rebinding) is refused.
    status, _, body = get(base + "/api/nodes", {"Host": "evil.example:80"})
    assert status == 421 and "localhost or 127.0.0.1 only" in body, (status, body)
    assert get(base + "/api/nodes", {"Host": "localhost"})[0] == 200
    # Names that only begin like a loopback address are names DNS answers: refused too.
    for host in ["127.aa0.1:8080", "127.0.0amplo80", "127.0.token=s3cret", "127.attacker.example",
                 "127.0.0.1.nip.io"]:
        status, _, body = get(base + "/api/nodes", {"Host": host})
        assert status == 421, (host, status, body)
    for host in ["127.0.0.1:80", "127.1", "[::1]:9464", "LOCALHOST"]:
        assert get(base + "/api/nodes", {"Host": host})[0] == 200, host
    assert get(base + f"/node/{ids[0]}")[2].startswith("<!doctype html>")

    events = http.client.HTTPConnection(base[len("http://"):], timeout=10)
    events.request("GET", f"/api/node/{ids[0]}/events")
    r = events.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream", r.status
    assert r.readline() == b'data: {"generation":1}\n', "the first event comes at once"
    events.close()
    print("sink: metrics, nodes, filters, pages, node data, events")


def check_agent_tls_and_token(tmp):
    token = os.path.join(tmp, "token")
    with open(token, "w") as f:
        f.write("the-http-token-42\n")
    os.chmod(token, 0o600)
    err = os.path.join(tmp, "tls.err")
    agent = start(["serve", "--listen", f"unix:{tmp}/tls.sock", "--plugin", SIM,
                   "--no-host-topology", "--http", "tcp://127.0.0.1:0", "--token-file", token,
                   "--tls-cert", os.path.join(TLS, "server.pem"),
                   "--tls-key", os.path.join(TLS, "server.key"),
                   "--tls-client-ca", os.path.join(TLS, "ca.pem")], err)
    address = web_address(agent, err)
    assert "web view on https://" in open(err).read()
    base = "https://" + address
    trusted = ssl.create_default_context(cafile=os.path.join(TLS, "ca.pem"))
    try:
        get(base + "/", context=trusted)
        raise AssertionError("served a client without a certificate")
    except (urllib.error.URLError, ssl.SSLError, ConnectionError):
        pass
    trusted.load_cert_chain(os.path.join(TLS, "client.pem"), os.path.join(TLS, "client.key"))
    status, headers, body = get(base + "/", context=trusted)
    assert status == 401 and "?token=" in body, (status, body)
    assert headers["WWW-Authenticate"].startswith("Bearer"), dict(headers)
    status, headers, _ = get(base + "/api/snapshot?token=the-http-token-42", context=trusted)
    assert status == 303 and headers["Location"] == "/api/snapshot", (status, dict(headers))
    cookie = headers["Set-Cookie"]
    port = address.rsplit(":", 1)[1]
    assert cookie == (f"rayaccel_token_{port}=the-http-token-42; Path=/; HttpOnly; "
                      "SameSite=Strict; Secure"), cookie
    # Never sent to another site after the token: a path like //evil.example goes to /.
    status, headers, _ = get(base + "//evil.example/x?token=the-http-token-42", context=trusted)
    assert status == 303 and headers["Location"] == "/", (status, dict(headers))
    # A tab a browser would drop (/<TAB>/evil.example is //evil.example to it) stays encoded.
    status, headers, _ = get(base + "/%09/evil.example?token=the-http-token-42", context=trusted)
    assert status == 303 and headers["Location"] == "/%09/evil.example", (status, dict(headers))
    jar = {"Cookie": cookie.split(";")[0]}
    status, _, body = get(base + "/api/snapshot", jar, context=trusted)
    assert status == 200 and json.loads(body)["generation"] == 1, (status, body)
    status, _, _ = get(base + "/api/snapshot", {"Cookie": f"rayaccel_token_{port}=guess"},
                       context=trusted)
    assert status == 401
    status, _, _ = get(base + "/?token=guess", context=trusted)
    assert status == 401
    status, _, body = get(base + "/metrics",
                          {"Authorization": "Bearer the-http-token-42"}, context=trusted)
    assert status == 200 and "rayaccel_snapshot_generation 1" in body
    print("agent: TLS with client certificates, token by header or cookie")


def check_stream_limit(tmp):
    err = os.path.join(tmp, "streams.err")
    agent = start(["serve", "--listen", f"unix:{tmp}/streams.sock", "--plugin", SIM,
                   "--no-host-topology", "--http", "tcp://127.0.0.1:0"], err)
    host = web_address(agent, err)
    streams = []
    for _ in range(32):
        c = http.client.HTTPConnection(host, timeout=10)
        c.request("GET", "/api/events")
        r = c.getresponse()
        assert r.status == 200 and r.readline().startswith(b"data: ")
        streams.append((c, r))
    status, _, body = get(f"http://{host}/api/events")
    assert status == 503 and "already 32 event streams open" in body, (status, body)
    assert get(f"http://{host}/api/snapshot")[0] == 200  # pages are still served
    streams.pop()[0].close()
    # The server notices the closed stream at its next write: within a keep-alive period.
    wait_until(lambda: get(f"http://{host}/metrics")[0] == 200, "metrics")

    def reopened():
        c = http.client.HTTPConnection(host, timeout=10)
        c.request("GET", "/api/events")
        r = c.getresponse()
        if r.status != 200:
            c.close()
            return False
        streams.append((c, r))
        return True
    deadline = time.time() + 40
    while not reopened():
        assert time.time() < deadline, "the closed stream's place was never freed"
        time.sleep(0.5)
    for c, _ in streams:
        c.close()
    print("agent: 32 event streams, the 33rd refused until one closes")


def check_front_under_load(tmp):
    load = os.path.join(SOURCE, "bench", "web_load.py")
    err = os.path.join(tmp, "load-agent.err")
    agent = start(["serve", "--listen", f"unix:{tmp}/load.sock", "--plugin", SIM,
                   "--no-host-topology", "--http", "tcp://127.0.0.1:0"], err)
    host = web_address(agent, err)
    r = subprocess.run([sys.executable, load, f"http://{host}", "--seconds", "2",
                        "--streams", "32", "--pid", str(agent.pid), "--grpc",
                        f"{RAYACCEL} resources --agent unix:{tmp}/load.sock", "--check"],
                       capture_output=True, text=True, timeout=240)
    print(r.stdout, end="")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(0 failed)" in r.stdout, r.stdout  # the gRPC calls under the same load
    # Stopped while 32 streams wait for their next event: it stops at once, and cleanly.
    streams = []
    for _ in range(32):
        c = http.client.HTTPConnection(host, timeout=10)
        c.request("GET", "/api/events")
        assert c.getresponse().status == 200
        streams.append(c)
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(timeout=20) == 0, open(err).read()
    for c in streams:
        c.close()

    err = os.path.join(tmp, "load-sink.err")
    sink = start(["sink", "--listen", f"unix:{tmp}/load-sink.sock", "--http",
                  "tcp://127.0.0.1:0"], err)
    host = web_address(sink, err)
    start(["serve", "--listen", f"unix:{tmp}/load-node.sock", "--plugin", SIM,
           "--no-host-topology", "--raylet", f"unix:{tmp}/load-sink.sock", "--node-id",
           "e" * 56], os.path.join(tmp, "load-node.err"))
    wait_until(lambda: json.loads(get(f"http://{host}/api/nodes")[2])["total"] == 1, "a node")
    r = subprocess.run([sys.executable, load, f"http://{host}", "--seconds", "2",
                        "--paths", "/metrics,/,/api/nodes", "--check"],
                       capture_output=True, text=True, timeout=240)
    print(r.stdout, end="")
    assert r.returncode == 0, r.stdout + r.stderr
    print("agent and sink: answered under idle, slow and streaming clients; recovered")


def report(name, tier, date, failed=()):
    """A report as `rayaccel-conformance --report` writes it (the fields the page reads)."""
    return json.dumps({
        "plugin": {"name": name, "file": f"librayaccel-{name}.so", "abi_version": "1.5"},
        "tier": tier, "tier_name": {4: "measured", 5: "certified in Ray"}[tier],
        "versions": {"rayaccel": "0.2.0", "ray": "2.60.0"}, "date": date,
        "checks": [{"name": c, "tier": 5, "status": "fail"} for c in failed]})


def check_conformance_reports(tmp):
    """The agent's /api/conformance: the newest report of each plugin in the folder it was
    given; files that are not reports, links and a flood of folders are left out."""
    reports = os.path.join(tmp, "reports")
    for folder, text in (("sim-old", report("sim", 4, "2026-11-01T00:00:00Z",
                                            ["ray.recovery"])),
                         ("sim-new", report("sim", 5, "2026-12-06T01:00:00Z")),
                         ("broken", "{not json"), ("wrong", json.dumps({"plugin": 3})),
                         ("cuda", report("cuda", 4, "2026-12-01T00:00:00Z", ["ray.perf"]))):
        os.makedirs(os.path.join(reports, folder))
        with open(os.path.join(reports, folder, "report.json"), "w") as f:
            f.write(text)
    os.makedirs(os.path.join(reports, "linked"))
    os.symlink(os.path.join(reports, "sim-new", "report.json"),
               os.path.join(reports, "linked", "report.json"))
    err = os.path.join(tmp, "reports-agent.err")
    agent = start(["serve", "--listen", f"unix:{tmp}/reports.sock", "--plugin", SIM,
                   "--no-host-topology", "--http", "tcp://127.0.0.1:0", "--conformance-reports",
                   reports], err)
    base = "http://" + web_address(agent, err)
    status, _, body = get(base + "/api/conformance")
    assert status == 200, body
    got = {r["plugin"]: r for r in json.loads(body)["reports"]}
    assert set(got) == {"sim", "cuda"}, got
    assert got["sim"]["tier"] == 5 and got["sim"]["ray"] == "2.60.0" and got["sim"]["failed"] == []
    assert got["cuda"]["failed"] == ["ray.perf"]
    r = subprocess.run([RAYACCEL, "serve", "--conformance-reports", reports],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--conformance-reports goes with serve --http" in r.stderr
    print("agent: /api/conformance shows each plugin's newest report")


def check_agent_telemetry(tmp):
    """serve --http samples each device's telemetry (--telemetry-interval, 1 s here): /metrics
    carries it under rayaccel's names, parsed by Prometheus's parser, with values that change
    between samples (the sim's utilization moves with the clock); /api/telemetry keeps the
    history the page draws; a plugin with no hook adds nothing; 0 turns it off."""
    err = os.path.join(tmp, "telemetry.err")
    spec = "sim.spec=" + os.path.join(SOURCE, "examples", "dgx-h100.json")
    agent = start(["serve", "--listen", f"unix:{tmp}/telemetry.sock", "--plugin", SIM,
                   "--config", spec, "--no-host-topology", "--http", "tcp://127.0.0.1:0",
                   "--telemetry-interval", "1"], err)
    base = "http://" + web_address(agent, err)

    def history():
        return json.loads(get(base + "/api/telemetry")[2])
    wait_until(lambda: history()["samples"] >= 3, "three telemetry rounds")
    m = samples(get(base + "/metrics")[2])
    util = {dict(k[1])["index"]: v for k, v in m.items()
            if k[0] == "rayaccel_device_utilization_percent"}
    assert sorted(util) == [str(i) for i in range(8)] and all(0 <= v <= 100 for v in util.values())
    labels = [dict(k[1]) for k in m if k[0] == "rayaccel_device_power_milliwatts"]
    assert all(lab["plugin"] == "sim" and lab["resource"] == "GPU" for lab in labels), labels
    assert not [k for k in m if k[0] == "rayaccel_device_link_errors_total"]  # unknown in sim
    assert m[("rayaccel_telemetry_sample_failed", (("plugin", "sim"),))] == 0
    h = history()
    points = next(iter(h["devices"].values()))["points"]
    assert len(points) >= 3 and points[0]["t"] < points[-1]["t"], points
    assert {"utilization", "memory_used", "power_mw", "temperature_c"} <= set(points[-1])
    # Off: the page says so, /metrics has no device telemetry.
    err = os.path.join(tmp, "telemetry-off.err")
    off = start(["serve", "--listen", f"unix:{tmp}/telemetry-off.sock", "--plugin", SIM,
                 "--config", spec, "--no-host-topology", "--http", "tcp://127.0.0.1:0",
                 "--telemetry-interval", "0"], err)
    base = "http://" + web_address(off, err)
    assert json.loads(get(base + "/api/telemetry")[2]) == {"off": True}
    assert "rayaccel_device_utilization_percent" not in get(base + "/metrics")[2]
    r = subprocess.run([RAYACCEL, "discover", "--telemetry-interval", "3"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--telemetry-interval is serve's" in r.stderr, r.stderr
    print("agent: telemetry sampled into /metrics and /api/telemetry")


def main():
    tmp = tempfile.mkdtemp(prefix="rayaccel-http-")
    try:
        check_conformance_reports(tmp)
        check_agent_telemetry(tmp)
        check_sink(tmp)
        check_agent_tls_and_token(tmp)
        check_stream_limit(tmp)
        check_front_under_load(tmp)
        r = subprocess.run([RAYACCEL, "discover", "--http", "tcp://127.0.0.1:0"],
                           capture_output=True, text=True)
        assert r.returncode == 2 and "--http is serve's and sink's" in r.stderr, r.stderr
    finally:
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
