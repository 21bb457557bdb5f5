#!/usr/bin/env python3
"""The web front under hostile and idle clients, measured from a client's side.

Against a running `rayaccel serve --http` or `rayaccel sink --http` (its base URL), it opens
IDLE connections that never send a byte, SLOW clients that send a request header one byte a
second, and STREAMS event streams read as a browser reads them, then scrapes each PATH again
and again on a fresh connection (as a scraper or a page load that finds no connection to reuse)
for SECONDS. It prints each path's latency at p50/p99/max without and with the load, how many
of the load's connections the server accepted, the server's RSS (with --pid), a gRPC call's
latency without and with the load (with --grpc: a command line to time), and whether the
listener recovers once the load stops (every connection closed on the server's side, a scrape
answered).

  bench/web_load.py http://127.0.0.1:PORT [--token TOKEN] [--idle 1000] [--slow 100]
      [--streams 32] [--events /api/events] [--paths /metrics,/] [--seconds 10] [--pid PID]
      [--grpc 'rayaccel resources --agent unix:...'] [--json] [--check]

--check exits 1 when a scrape under load got no answer, or the listener did not recover: the
small run in `make test` (tests/web/http_test.py) uses it. Latency is printed, never asserted.
"""

import argparse
import http.client
import json
import os
import resource
import selectors
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

ANSWER_TIMEOUT = 10.0  # a scrape without an answer in this long counts as unanswered


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100.0 * (len(ordered) - 1))))]


def ms(value):
    return "-" if value is None else f"{value * 1000:.1f} ms"


class Target:
    def __init__(self, url, token):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http":
            raise SystemExit("web_load.py measures plain HTTP (a loopback listener)")
        self.host = parsed.hostname
        self.port = parsed.port
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def scrape(self, path):
        """Seconds to the whole answer on a fresh connection, or None when none came."""
        start = time.monotonic()
        c = http.client.HTTPConnection(self.host, self.port, timeout=ANSWER_TIMEOUT)
        try:
            c.request("GET", path, headers=self.headers)
            r = c.getresponse()
            r.read()
            if r.status != 200:
                return None
            return time.monotonic() - start
        except (OSError, http.client.HTTPException):
            return None
        finally:
            c.close()

    def connect(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(ANSWER_TIMEOUT)
        s.connect((self.host, self.port))
        return s


class Load:
    """The idle, slow and streaming clients, held open until stop()."""

    def __init__(self, target, idle, slow, streams, events_path):
        self.target = target
        self.sockets = []
        self.slow = []
        self.streams = []
        self.refused = {"idle": 0, "slow": 0, "streams": 0}
        self.stream_events = 0
        self.stopping = threading.Event()
        for _ in range(idle):
            self._open("idle", self.sockets)
        for _ in range(slow):
            s = self._open("slow", self.slow)
            if s is not None:
                self._send(s, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        for _ in range(streams):
            s = self._open("streams", self.streams)
            if s is not None:
                head = "".join(f"{k}: {v}\r\n" for k, v in target.headers.items())
                self._send(s, f"GET {events_path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n"
                           .encode())
        self.threads = [threading.Thread(target=self._drip, daemon=True),
                        threading.Thread(target=self._drain, daemon=True)]
        for t in self.threads:
            t.start()

    def _open(self, kind, into):
        try:
            s = self.target.connect()
            into.append(s)
            return s
        except OSError:
            self.refused[kind] += 1
            return None

    def _send(self, s, data):
        try:
            s.sendall(data)
        except OSError:
            pass

    def _drip(self):  # one byte a second on every slow client's header
        while not self.stopping.wait(1.0):
            for s in self.slow:
                self._send(s, b"a")

    def _drain(self):  # reads the event streams as a browser does
        sel = selectors.DefaultSelector()
        for s in self.streams:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        while not self.stopping.is_set():
            for key, _ in sel.select(timeout=0.2):
                try:
                    data = key.fileobj.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                self.stream_events += data.count(b"data: ")

    def accepted(self):
        """Connections of each kind the server still holds open (not closed on us)."""
        out = {}
        for kind, group in (("idle", self.sockets), ("slow", self.slow),
                            ("streams", self.streams)):
            alive = 0
            for s in group:
                try:
                    s.setblocking(False)
                    alive += 1 if s.recv(1, socket.MSG_PEEK) else 0
                except BlockingIOError:
                    alive += 1
                except OSError:
                    pass
            out[kind] = alive
        return out

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join()
        for s in self.sockets + self.slow + self.streams:
            s.close()


def rss_kib(pid):
    if pid is None:
        return None
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return {k: int(fields[k].split()[0]) for k in ("VmRSS", "VmHWM")}


def open_fds(pid):
    return None if pid is None else len(os.listdir(f"/proc/{pid}/fd"))


def scrape_for(target, paths, seconds):
    latencies = {p: [] for p in paths}
    unanswered = {p: 0 for p in paths}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for p in paths:
            took = target.scrape(p)
            if took is None:
                unanswered[p] += 1
            else:
                latencies[p].append(took)
    return latencies, unanswered


def time_grpc(command, times):
    out = []
    for _ in range(times):
        start = time.monotonic()
        r = subprocess.run(command, capture_output=True, timeout=60)
        if r.returncode == 0:
            out.append(time.monotonic() - start)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("--token")
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--slow", type=int, default=100)
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--events", default="/api/events")
    ap.add_argument("--paths", default="/metrics,/")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--pid", type=int)
    ap.add_argument("--grpc")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()

    want = args.idle + args.slow + args.streams + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(want, soft), hard), hard))
    target = Target(args.url, args.token)
    paths = args.paths.split(",")
    grpc = shlex.split(args.grpc) if args.grpc else None

    report = {"idle": args.idle, "slow": args.slow, "streams": args.streams,
              "fds_before": open_fds(args.pid)}
    quiet, quiet_missed = scrape_for(target, paths, min(args.seconds, 3))
    grpc_quiet = time_grpc(grpc, 5) if grpc else []
    load = Load(target, args.idle, args.slow, args.streams, args.events)
    time.sleep(1.0)  # every connection reaches the server before the first scrape
    loaded, loaded_missed = scrape_for(target, paths, args.seconds)
    grpc_loaded = time_grpc(grpc, 5) if grpc else []
    report["accepted"] = load.accepted()
    report["refused_at_connect"] = load.refused
    report["stream_events"] = load.stream_events
    report["rss_kib"] = rss_kib(args.pid)
    report["fds_loaded"] = open_fds(args.pid)
    load.stop()

    # Recovery: the server closes what the clients closed, and answers again.
    deadline = time.monotonic() + 30
    recovered = False
    while time.monotonic() < deadline:
        fds = open_fds(args.pid)
        if target.scrape(paths[0]) is not None and (
                fds is None or fds <= report["fds_before"] + 4):
            recovered = True
            break
        time.sleep(0.2)
    report["fds_after"] = open_fds(args.pid)
    report["recovered"] = recovered
    report["paths"] = {}
    for p in paths:
        report["paths"][p] = {
            "quiet": {"n": len(quiet[p]), "p50_s": percentile(quiet[p], 50),
                      "p99_s": percentile(quiet[p], 99), "unanswered": quiet_missed[p]},
            "loaded": {"n": len(loaded[p]), "p50_s": percentile(loaded[p], 50),
                       "p99_s": percentile(loaded[p], 99),
                       "max_s": max(loaded[p]) if loaded[p] else None,
                       "unanswered": loaded_missed[p]},
        }
    if grpc:
        report["grpc"] = {"quiet_p50_s": percentile(grpc_quiet, 50),
                          "loaded_p50_s": percentile(grpc_loaded, 50),
                          "loaded_max_s": max(grpc_loaded) if grpc_loaded else None,
                          "failed": 10 - len(grpc_quiet) - len(grpc_loaded)}

    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"load: {args.idle} idle, {args.slow} slow (a header byte a second), "
              f"{args.streams} event streams; held open by the server: {report['accepted']}, "
              f"refused at connect: {report['refused_at_connect']}")
        for p, r in report["paths"].items():
            q, l = r["quiet"], r["loaded"]
            print(f"  GET {p:<10} quiet p50 {ms(q['p50_s'])} p99 {ms(q['p99_s'])} | loaded "
                  f"p50 {ms(l['p50_s'])} p99 {ms(l['p99_s'])} max {ms(l['max_s'])} "
                  f"({l['n']} answered, {l['unanswered']} unanswered in {ANSWER_TIMEOUT:.0f} s)")
        if grpc:
            g = report["grpc"]
            print(f"  gRPC call    quiet p50 {ms(g['quiet_p50_s'])} | loaded p50 "
                  f"{ms(g['loaded_p50_s'])} max {ms(g['loaded_max_s'])} ({g['failed']} failed)")
        if report["rss_kib"]:
            print(f"  server RSS under load {report['rss_kib']['VmRSS']} KiB, "
                  f"peak {report['rss_kib']['VmHWM']} KiB")
        print(f"  server descriptors: {report['fds_before']} before, {report['fds_loaded']} "
              f"loaded, {report['fds_after']} after; recovered: {recovered}")
    if args.check:
        missed = sum(r["loaded"]["unanswered"] for r in report["paths"].values())
        if missed or not recovered:
            print(f"web_load: {missed} scrapes unanswered under load, recovered: {recovered}",
                  file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
