#!/usr/bin/python3
"""Browser test of the topo-scheduler dashboard (scheduler/daemon/dashboard/index.html).

Starts a real daemon ($TOPO_SCHEDULER_BIN) on a free loopback port with a fresh state
directory, loads a small topology, brings the nodes up, creates two tenants, submits three
jobs that start at once and one that must wait, drains a free node, then opens
https://127.0.0.1:PORT/#token=ADMIN_TOKEN in headless Chromium driven through chromedriver's
W3C WebDriver HTTP API and checks, from the DOM:

  * the page reaches body[data-ready="1"] and removes the token from the address bar;
  * the map has one .gpu cell per GPU of the topology, each running job's id is on exactly
    the GPUs of its ranks (GET /v1/jobs/{id}), free GPUs carry data-job="", health is shown,
    the drained node's cells carry its state;
  * each HBD header reads "used/total · P%" (and names the drained node's state), each job
    has one colour and different jobs different ones, no sentinel text ("#-1", "NaN");
  * the running and queue tables list every job, with the right state;
  * summary counts match GET /v1/cluster;
  * a job name made of HTML is shown as text (no element injected, no script run);
  * a reload without the fragment signs in from sessionStorage; a bad token shows the form;
  * no JavaScript error reached the browser console.

Standard library only. Environment: TOPO_SCHEDULER_BIN (required), TOPO_BIN (unused),
CHROMIUM (default /usr/bin/chromium), CHROMEDRIVER (default /usr/bin/chromedriver),
DASHBOARD_TEST_KEEP=1 keeps the temporary directory (logs, state) for inspection.
Exit status: 0 pass, 1 fail, 77 skip (no chromium or chromedriver).
"""

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
SKIP = 77
READY_TIMEOUT_S = 20.0

# 12 nodes x 4 GPUs: HBDs of 2 nodes, leaves of 2 HBDs, two spines (pods).
TOPOLOGY = {
    "version": 1,
    "name": "dashboard-test",
    "tiers": ["node", "hbd", "leaf", "spine"],
    "hbd": "hbd",
    "gpus_per_node": 4,
    "gpu_model": "H100",
    "domains": [
        {"name": "spine0", "children": [
            {"name": "leaf0", "children": [{"name": "hbd0", "nodes": ["n0", "n1"]},
                                           {"name": "hbd1", "nodes": ["n2", "n3"]}]},
            {"name": "leaf1", "children": [{"name": "hbd2", "nodes": ["n4", "n5"]},
                                           {"name": "hbd3", "nodes": ["n6", "n7"]}]}]},
        {"name": "spine1", "children": [
            {"name": "leaf2", "children": [{"name": "hbd4", "nodes": ["n8", "n9"]},
                                           {"name": "hbd5", "nodes": ["n10", "n11"]}]}]},
    ],
}
NODES = ["n%d" % i for i in range(12)]
GPUS_PER_NODE = 4
HOSTLIST = "n[0-11]"
XSS_NAME = '<img src=x onerror="window.__topoXss=1"><b>bold</b>&amp;'

# name -> request; the first three fit at once, the last waits (40 GPUs > what is left).
JOBS = [
    ("train-a", {"spec": {"name": "train-a", "gpus": 8, "parallelism": {"tp": 4}}, "tenant": "team-a"}),
    ("eval-b", {"spec": {"name": "eval-b", "gpus": 2}, "tenant": "team-b"}),
    ("xss-c", {"spec": {"name": XSS_NAME, "gpus": 4, "parallelism": {"tp": 4}}, "tenant": "team-a/sub"}),
    ("big-d", {"spec": {"name": "big-d", "gpus": 40, "parallelism": {"tp": 4}}, "tenant": "team-b"}),
]
PLACED = ["train-a", "eval-b", "xss-c"]


class Fail(Exception):
    pass


def log(msg):
    print("dashboard_test: " + msg, flush=True)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path, n=40):
    try:
        with open(path, "r", errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


def stop_process(proc, name, grace_s=10.0):
    """Ends a process this test started (and its process group, which it leads)."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        log("%s did not stop in %.0f s; killing it" % (name, grace_s))
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=5)


# ----------------------------------------------------------------------------- daemon
class Daemon:
    def __init__(self, binary, tmp):
        self.binary = binary
        self.state = os.path.join(tmp, "state")
        self.log_path = os.path.join(tmp, "daemon.log")
        self.proc = None
        self.port = None
        self.ctx = None
        self.token = None

    @property
    def base(self):
        return "https://127.0.0.1:%d" % self.port

    def start(self):
        for attempt in range(3):
            self.port = free_port()
            with open(self.log_path, "ab") as lf:
                self.proc = subprocess.Popen(
                    [self.binary, "--state-dir", self.state, "--listen", "127.0.0.1:%d" % self.port],
                    stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
            if self.wait_healthy(30.0):
                break
            stop_process(self.proc, "topo-scheduler")
            log("daemon did not come up on port %d (attempt %d)" % (self.port, attempt + 1))
        else:
            raise Fail("topo-scheduler never answered /healthz; its log:\n" + tail(self.log_path))
        tok = os.path.join(self.state, "admin-token")
        try:
            with open(tok) as f:
                self.token = f.read().strip()
        except OSError as e:
            raise Fail("cannot read the admin token %s: %s" % (tok, e))
        if not self.token:
            raise Fail("%s is empty" % tok)
        log("daemon up at %s (pid %d)" % (self.base, self.proc.pid))

    def wait_healthy(self, timeout_s):
        ca = os.path.join(self.state, "ca.pem")
        deadline = time.monotonic() + timeout_s
        last = "nothing yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log("topo-scheduler exited with status %s; its log:\n%s" % (self.proc.returncode, tail(self.log_path)))
                return False
            if os.path.exists(ca):
                try:
                    if self.ctx is None:
                        self.ctx = ssl.create_default_context(cafile=ca)
                    with urllib.request.urlopen(self.base + "/healthz", context=self.ctx, timeout=2) as r:
                        if r.status == 200:
                            return True
                        last = "status %d" % r.status
                except ssl.SSLError as e:
                    last = "TLS: %s" % e
                    self.ctx = None  # the CA file may have been half written
                except (urllib.error.URLError, OSError) as e:
                    last = str(e)
            time.sleep(0.1)
        log("/healthz not answering after %.0f s (last: %s)" % (timeout_s, last))
        return False

    def request(self, method, path, body=None, expect=(200, 201)):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=15) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        except (urllib.error.URLError, OSError) as e:
            raise Fail("%s %s: %s" % (method, path, e))
        if status not in expect:
            raise Fail("%s %s answered %d: %s" % (method, path, status, raw.decode(errors="replace")[:2000]))
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise Fail("%s %s: answer is not JSON: %r" % (method, path, raw[:200]))

    def get_page(self):
        try:
            with urllib.request.urlopen(self.base + "/", context=self.ctx, timeout=15) as r:
                return r.status, dict((k.lower(), v) for k, v in r.headers.items()), r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            raise Fail("GET / answered %d" % e.code)

    def stop(self):
        stop_process(self.proc, "topo-scheduler")


# ----------------------------------------------------------------------------- webdriver
class WebDriver:
    def __init__(self, tmp):
        self.tmp = tmp
        self.port = None
        self.proc = None
        self.session = None
        self.log_path = os.path.join(tmp, "chromedriver.log")

    def _call(self, method, path, body=None, timeout=60):
        url = "http://127.0.0.1:%d%s" % (self.port, path)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json; charset=utf-8")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)["value"]
                msg = "%s: %s" % (err.get("error"), err.get("message", "")[:1500])
            except (ValueError, KeyError, TypeError, AttributeError):
                msg = raw.decode(errors="replace")[:1500]
            raise Fail("WebDriver %s %s failed (%d): %s" % (method, path, e.code, msg))
        except (urllib.error.URLError, OSError) as e:
            raise Fail("WebDriver %s %s: %s" % (method, path, e))
        return json.loads(raw)["value"] if raw else None

    def start(self):
        self.port = free_port()
        lf = open(self.log_path, "ab")
        self.proc = subprocess.Popen([CHROMEDRIVER, "--port=%d" % self.port, "--log-path=" + self.log_path],
                                     stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        lf.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Fail("chromedriver exited with %s:\n%s" % (self.proc.returncode, tail(self.log_path)))
            try:
                st = self._call("GET", "/status", timeout=2)
                if st and st.get("ready"):
                    break
            except Fail:
                pass
            time.sleep(0.1)
        else:
            raise Fail("chromedriver did not become ready:\n" + tail(self.log_path))
        profile = tempfile.mkdtemp(prefix="chrome-profile-", dir=self.tmp)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "acceptInsecureCerts": True,
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--disable-quic", "--no-first-run", "--no-default-browser-check",
                         "--disable-background-networking", "--disable-component-update",
                         "--disable-sync", "--disable-extensions", "--ignore-certificate-errors",
                         "--window-size=1400,1000", "--user-data-dir=" + profile],
            },
        }}}
        v = self._call("POST", "/session", caps, timeout=90)
        self.session = v["sessionId"]
        self._call("POST", self._s("/timeouts"), {"script": 15000, "pageLoad": 30000})
        log("browser session %s (%s %s)" % (self.session, v["capabilities"].get("browserName"),
                                              v["capabilities"].get("browserVersion")))

    def _s(self, path):
        return "/session/%s%s" % (self.session, path)

    def navigate(self, url):
        self._call("POST", self._s("/url"), {"url": url})

    def js(self, script, *args):
        return self._call("POST", self._s("/execute/sync"), {"script": script, "args": list(args)})

    def browser_log(self):
        """Console entries since the last call, or None when chromedriver cannot give them."""
        try:
            return self._call("POST", self._s("/se/log"), {"type": "browser"})
        except Fail as e:
            log("browser log unavailable (%s); relying on in-page checks" % e)
            return None

    def wait_for(self, script, timeout_s, what):
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            last = self.js(script)
            if last and last.get("done"):
                return last
            time.sleep(0.15)
        raise Fail("timed out after %.0f s waiting for %s; last state: %s" % (timeout_s, what, json.dumps(last)))

    def stop(self):
        if self.session:
            try:
                self._call("DELETE", self._s(""), timeout=20)
            except Fail as e:
                log("closing the session: %s" % e)
            self.session = None
        stop_process(self.proc, "chromedriver")


# ----------------------------------------------------------------------------- checks
WAIT_READY = """
const b = document.body;
const login = document.getElementById('login');
return {done: !!b && (b.dataset.ready === '1' || (!!login && !login.hidden)), ready: b && b.dataset.ready, state: b && b.dataset.state,
        href: location.href, login_visible: !!login && !login.hidden,
        login_message: (document.getElementById('login-message') || {}).textContent || '',
        errors: (document.getElementById('errors') || {}).textContent || ''};
"""

WAIT_LOGIN = """
const b = document.body, login = document.getElementById('login');
const msg = (document.getElementById('login-message') || {}).textContent || '';
return {done: !!login && !login.hidden && b.dataset.state === 'login' && msg.length > 0,
        state: b.dataset.state, ready: b.dataset.ready, login_visible: !!login && !login.hidden,
        message: msg, stored: sessionStorage.getItem('toposched.token')};
"""

READ_DOM = """
const q = (s) => Array.from(document.querySelectorAll(s));
const rows = (id) => q('#' + id + ' tbody tr[data-job-id]').map((tr) => ({
  id: tr.getAttribute('data-job-id'), state: tr.getAttribute('data-state'),
  cells: Array.from(tr.cells).map((td) => td.textContent)}));
const stats = {};
for (const e of q('[data-stat]')) stats[e.getAttribute('data-stat')] = e.getAttribute('data-value');
return {
  mode: document.getElementById('map').dataset.mode,
  cells: q('#map .gpu').map((c) => [c.getAttribute('data-node'), c.getAttribute('data-gpu'),
      c.getAttribute('data-job'), c.getAttribute('data-health'), c.getAttribute('data-node-state')]),
  hbd_cells: q('#map .hbdcell').length,
  running: rows('running-table'), queue: rows('queue-table'),
  stats: stats,
  imgs: document.getElementsByTagName('img').length,
  bolds_in_tables: q('#running-table b, #queue-table b, #legend b').length,
  xss: typeof window.__topoXss !== 'undefined',
  hash: location.hash, href: location.href,
  stored: sessionStorage.getItem('toposched.token'),
  state: document.body.dataset.state,
  errors: document.getElementById('errors').hidden ? '' : document.getElementById('errors').textContent,
  legend_jobs: q('[data-legend-job]').map((b) => b.getAttribute('data-legend-job')),
  tenants: q('#tenants-table tbody tr[data-tenant]').map((tr) => [tr.getAttribute('data-tenant'),
      tr.getAttribute('data-usage'), tr.getAttribute('data-own'), tr.cells[1].textContent]),
  hbds: q('#map .hbd').map((h) => [h.getAttribute('data-hbd'), h.querySelector('.hbd-h').textContent]),
  colours: q('#map .gpu[data-job]:not([data-job=""])').map((c) => [c.getAttribute('data-job'), getComputedStyle(c).backgroundColor]),
  text: document.body.innerText,
  partitions: q('#partitions-table tbody tr[data-partition]').map((tr) => [tr.getAttribute('data-partition'),
      tr.getAttribute('data-gpus'), tr.getAttribute('data-free-gpus'), tr.cells[4].textContent]),
  reservations: q('#reservations .resv[data-reservation]').map((r) => [r.getAttribute('data-reservation'),
      r.getAttribute('data-state'), r.getAttribute('data-maintenance'), parseFloat(r.style.left)]),
};
"""


def wait_ready(wd, what):
    st = wd.wait_for(WAIT_READY, READY_TIMEOUT_S, "body[data-ready=1] after " + what)
    if st.get("ready") != "1":
        raise Fail("after %s the page shows the sign-in form instead of the dashboard: %r"
                   % (what, st.get("login_message")))
    return st


def js_errors(entries):
    """SEVERE console entries that are not plain network failures of expected requests."""
    bad = []
    for e in entries or []:
        level, msg, source = e.get("level"), e.get("message", ""), e.get("source", "")
        if level != "SEVERE":
            continue
        if source == "network" and "favicon.ico" in msg:
            continue
        bad.append("[%s] %s" % (source or "?", msg))
    return bad


def check(cond, msg, failures):
    if not cond:
        failures.append(msg)


def run(tmp, daemon_bin, failures):
    d = Daemon(daemon_bin, tmp)
    wd = WebDriver(tmp)
    try:
        d.start()

        status, headers, html = d.get_page()
        check(headers.get("content-type", "").startswith("text/html"),
              "GET / Content-Type is %r, want text/html" % headers.get("content-type"), failures)
        check("default-src" in headers.get("content-security-policy", ""),
              "GET / has no Content-Security-Policy header", failures)
        check("data-ready" in html, "GET / does not look like the dashboard page", failures)

        info = d.request("PUT", "/v1/topology", {"format": "json", "content": json.dumps(TOPOLOGY),
                                                 "gpus_per_node": GPUS_PER_NODE})
        log("topology imported: %s" % json.dumps(info))
        d.request("POST", "/v1/nodes/resume", {"nodes": HOSTLIST})
        # explicit quotas: nothing guaranteed, any idle capacity may be borrowed (so no preemption)
        d.request("PUT", "/v1/tenants/team-a", {"guaranteed_gpus": 0, "borrow_limit_gpus": -1, "shares": 2})
        d.request("PUT", "/v1/tenants/team-b", {"guaranteed_gpus": 0, "borrow_limit_gpus": -1, "shares": 1})
        # a sub-tenant: its GPUs count in team-a's usage too (rolled up the tree)
        d.request("PUT", "/v1/tenants/team-a/sub", {"guaranteed_gpus": 0, "borrow_limit_gpus": -1, "shares": 1})
        ids = {}
        for name, req in JOBS:
            r = d.request("POST", "/v1/jobs", dict(req, command=["true"]), expect=(201,))
            ids[name] = r["id"]
            log("submitted %s as job %s: %s (%s)" % (name, r["id"], r.get("state"), r.get("reason")))

        listed = {j["id"]: j for j in d.request("GET", "/v1/jobs")["jobs"]}
        for name in ids:
            if ids[name] not in listed:
                raise Fail("GET /v1/jobs does not list job %s (%s)" % (ids[name], name))
        for name in PLACED:
            j = listed[ids[name]]
            if j["state"] != "running":
                raise Fail("job %s (%s) should fit and run at once but is %s: %s"
                           % (ids[name], name, j["state"], j.get("reason")))
        if listed[ids["big-d"]]["state"] not in ("queued",):
            raise Fail("job %s (big-d) should wait but is %s: %s"
                       % (ids["big-d"], listed[ids["big-d"]]["state"], listed[ids["big-d"]].get("reason")))

        expected = {}  # (node, gpu) -> job id
        for name in PLACED:
            show = d.request("GET", "/v1/jobs/%d" % ids[name])
            ranks = show.get("ranks") or []
            if len(ranks) != show["gpus"]:
                raise Fail("job %s has %d ranks for %d GPUs" % (ids[name], len(ranks), show["gpus"]))
            for rk in ranks:
                key = (rk["node"], int(rk["gpu"]))
                if key in expected:
                    raise Fail("GPU %s:%d is given to jobs %s and %s" % (key[0], key[1], expected[key], ids[name]))
                expected[key] = ids[name]
        busy_nodes = {n for n, _ in expected}
        drain = next(n for n in reversed(NODES) if n not in busy_nodes)
        d.request("POST", "/v1/nodes/drain", {"nodes": drain, "reason": "dashboard test"})
        nodes = {n["name"]: n for n in d.request("GET", "/v1/nodes")["nodes"]}
        for (n, g), jid in expected.items():
            if nodes[n]["gpu_jobs"][g] != jid:
                raise Fail("daemon inconsistency: GET /v1/nodes says GPU %s:%d runs %s, the ranks of job %s say it"
                           % (n, g, nodes[n]["gpu_jobs"][g], jid))
        cluster = d.request("GET", "/v1/cluster")
        log("placed: " + ", ".join("%s=%s" % (k, v) for k, v in sorted(expected.items())) + "; drained " + drain)

        # A partition and a maintenance window two hours ahead, made after the jobs (they name
        # no partition, and there is no default one).
        d.request("POST", "/v1/partitions", {"name": "big", "nodes": "n[0-5]", "priority_tier": 2,
                                             "preemptible": True}, expect=(201,))
        maint_start = int(time.time() * 1000) + 2 * 3600 * 1000
        d.request("POST", "/v1/reservations", {"name": "fw-update", "nodes": "n[10-11]",
                                               "start_ms": maint_start, "duration_s": 3600,
                                               "maintenance": True}, expect=(201,))
        api_parts = {p["name"]: p for p in d.request("GET", "/v1/partitions")["partitions"]}

        wd.start()
        url = d.base + "/#token=" + d.token
        wd.navigate(url)
        wait_ready(wd, "the first render")
        dom = wd.js(READ_DOM)
        console = wd.browser_log()

        # --- token handling
        check(d.token not in dom["href"] and dom["hash"] == "", "the token is still in the address bar: %s" % dom["href"], failures)
        check(dom["stored"] == d.token, "the token is not kept in sessionStorage", failures)
        check(dom["state"] == "ok", "page state is %r after the first refresh; errors shown: %s" % (dom["state"], dom["errors"]), failures)

        # --- cluster map
        check(dom["mode"] == "gpu", "map mode is %r, want 'gpu' for a 12-node cluster" % dom["mode"], failures)
        seen = {}
        for node, gpu, job, health, nstate in dom["cells"]:
            key = (node, int(gpu))
            check(key not in seen, "two map cells for %s:%s" % key, failures)
            seen[key] = (job, health, nstate)
        want_cells = {(n, g) for n in NODES for g in range(GPUS_PER_NODE)}
        check(set(seen) == want_cells, "map cells %s differ from the topology's GPUs (missing %s, extra %s)"
              % (len(seen), sorted(want_cells - set(seen))[:8], sorted(set(seen) - want_cells)[:8]), failures)
        for name in PLACED:
            jid = str(ids[name])
            on_map = sorted(k for k, v in seen.items() if v[0] == jid)
            want = sorted(k for k, v in expected.items() if v == ids[name])
            check(on_map == want, "job %s (%s): map shows it on %s, its ranks are on %s" % (jid, name, on_map, want), failures)
        for key, (job, health, nstate) in sorted(seen.items()):
            if key not in expected:
                check(job == "", "free GPU %s:%d carries data-job=%r" % (key[0], key[1], job), failures)
            want_h = nodes[key[0]]["gpu_health"][key[1]]
            check(health == want_h, "GPU %s:%d data-health=%r, daemon says %r" % (key[0], key[1], health, want_h), failures)
        drained = {v[2] for k, v in seen.items() if k[0] == drain}
        check(drained <= {"draining", "drained"} and drained,
              "drained node %s shows node state %s" % (drain, sorted(drained)), failures)
        for name in PLACED:
            check(str(ids[name]) in dom["legend_jobs"], "legend misses job %s" % ids[name], failures)

        # --- per-HBD headers: "hbd NAME · used/total · P%", and the drained node's state
        for hbd, head in dom["hbds"]:
            members = [n for n in NODES if nodes[n]["hbd"] == hbd]
            total = GPUS_PER_NODE * len(members)
            used = sum(1 for (n, _g) in expected if n in members)
            want = "%d/%d \u00b7 %d%%" % (used, total, int(100.0 * used / total + 0.5))
            check(want in head, "HBD %s header %r lacks %r" % (hbd, head, want), failures)
            if drain in members:
                check(nodes[drain]["state"] in head, "HBD %s header %r does not say %s is %s"
                      % (hbd, head, drain, nodes[drain]["state"]), failures)
        # --- one colour per job, different between jobs
        by_job = {}
        for jid, colour in dom["colours"]:
            by_job.setdefault(jid, set()).add(colour)
        check(all(len(c) == 1 for c in by_job.values()), "a job has several colours: %s" % by_job, failures)
        flat = [next(iter(c)) for c in by_job.values()]
        check(len(flat) == len(PLACED) and len(set(flat)) == len(flat), "jobs' colours are not distinct: %s" % by_job, failures)
        for bad in ("#-1", "undefined", "NaN"):
            check(bad not in dom["text"], "the page's text shows %r" % bad, failures)

        # --- job tables
        running = {r["id"]: r for r in dom["running"]}
        queue = {r["id"]: r for r in dom["queue"]}
        for name in PLACED:
            jid = str(ids[name])
            check(jid in running and running[jid]["state"] == "running",
                  "running table does not list job %s (%s) as running: %s" % (jid, name, running.get(jid)), failures)
            check(jid not in queue, "job %s is in the queue table too" % jid, failures)
            # The slowdown column shows the API's prediction for the job.
            want = listed[ids[name]].get("predicted_slowdown")
            check(want is not None and want >= 1.0,
                  "GET /v1/jobs gives job %s no predicted_slowdown >= 1: %r" % (jid, want), failures)
            if want is not None and jid in running:
                check(("%.2fx" % want) in running[jid]["cells"],
                      "running table shows no slowdown %.2fx for job %s: %s"
                      % (want, jid, running[jid]["cells"]), failures)
        jd = str(ids["big-d"])
        check(jd in queue and queue[jd]["state"] == "queued",
              "queue table does not list job %s (big-d) as queued: %s" % (jd, queue.get(jd)), failures)
        check(jd not in running, "waiting job %s is in the running table" % jd, failures)
        for r in list(running.values()) + list(queue.values()):
            check(r["id"] in {str(v) for v in ids.values()}, "unexpected job %s in the tables" % r["id"], failures)
        xr = running.get(str(ids["xss-c"]))
        check(xr is not None and XSS_NAME in xr["cells"],
              "job name with HTML is not shown verbatim as text: %s" % (xr and xr["cells"]), failures)
        check(dom["imgs"] == 0 and dom["bolds_in_tables"] == 0 and not dom["xss"],
              "markup from a job name reached the DOM (img=%d, b=%d, script ran=%s)"
              % (dom["imgs"], dom["bolds_in_tables"], dom["xss"]), failures)

        # --- tenants: usage rolled up the tree, each tenant's own shown apart
        tenants = {t[0]: t[1:] for t in dom["tenants"]}
        api_tenants = {t["name"]: t for t in d.request("GET", "/v1/tenants")["tenants"]}
        check(api_tenants["team-a"]["usage_gpus"] == 12 and api_tenants["team-a"]["own_usage_gpus"] == 8
              and api_tenants["team-a/sub"]["usage_gpus"] == 4,
              "GET /v1/tenants does not roll team-a/sub's 4 GPUs into team-a: %s" % api_tenants, failures)
        check(tenants.get("team-a", [None])[:2] == ["12", "8"] and "(own 8)" in tenants["team-a"][2],
              "the tenants table shows team-a as %s, want 12 GPUs with its sub-tenant, 8 its own"
              % tenants.get("team-a"), failures)
        check(tenants.get("team-a/sub", [None])[:2] == ["4", "4"], "team-a/sub row: %s" % tenants.get("team-a/sub"),
              failures)

        # --- partitions and reservations
        want_big = api_parts.get("big", {})
        check(dom["partitions"] == [["big", str(want_big.get("gpus")), str(want_big.get("free_gpus")), "2"]]
              and want_big.get("gpus") == 24,
              "partitions table %s, GET /v1/partitions says %s" % (dom["partitions"], want_big), failures)
        check(len(dom["reservations"]) == 1 and dom["reservations"][0][:3] == ["fw-update", "planned", "1"]
              and dom["reservations"][0][3] > 0,
              "reservation timeline %s, want fw-update planned (maintenance) right of now" % dom["reservations"],
              failures)

        # --- summary counts
        for stat, want in (("gpus-total", cluster["gpus"]["total"]), ("gpus-allocated", cluster["gpus"]["allocated"]),
                           ("jobs-running", cluster["jobs"]["running"]), ("jobs-queued", cluster["jobs"]["queued"])):
            check(dom["stats"].get(stat) == str(want), "summary %s shows %r, GET /v1/cluster says %r"
                  % (stat, dom["stats"].get(stat), want), failures)
        check(cluster["jobs"]["running"] == 3 and cluster["gpus"]["allocated"] == 14,
              "GET /v1/cluster: %s" % json.dumps(cluster), failures)

        # --- console
        if console is not None:
            errs = js_errors(console)
            check(not errs, "browser console errors:\n  " + "\n  ".join(errs), failures)

        # --- reload without the fragment: the token comes from sessionStorage
        wd.navigate(d.base + "/")
        wait_ready(wd, "a reload without the fragment (token from sessionStorage)")
        console = wd.browser_log()
        if console is not None:
            errs = js_errors(console)
            check(not errs, "browser console errors after reload:\n  " + "\n  ".join(errs), failures)

        # --- a refused token shows the form with the daemon's message
        wd.navigate("about:blank")
        wd.navigate(d.base + "/#token=topo_" + "0" * 64)
        st = wd.wait_for(WAIT_LOGIN, READY_TIMEOUT_S, "the sign-in form after a bad token")
        check(st["stored"] is None, "a refused token stays in sessionStorage", failures)
        console = wd.browser_log()
        if console is not None:  # 401s are logged by the network stack; only script errors count here
            errs = [e for e in js_errors(console) if not e.startswith("[network]")]
            check(not errs, "browser console errors after a bad token:\n  " + "\n  ".join(errs), failures)
    finally:
        wd.stop()
        d.stop()


def run_test(name, prefix, body):
    """Runs body(tmp) in a fresh temporary directory (kept with
    DASHBOARD_TEST_KEEP=1), collecting Fail and unexpected errors; prints
    PASS or each problem under `name` and returns the exit status."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    keep = os.environ.get("DASHBOARD_TEST_KEEP") == "1"
    failures = []
    try:
        body(tmp, failures)
    except Fail as e:
        failures.append(str(e))
    except Exception as e:  # a bug here must still clean up and say what happened
        import traceback
        failures.append("unexpected error: %r\n%s" % (e, traceback.format_exc()))
    finally:
        if keep:
            log("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%s: FAIL (%d problem%s):" % (name, len(failures), "" if len(failures) == 1 else "s"))
        for f in failures:
            print("  - " + f)
        if not keep:
            print("  (rerun with DASHBOARD_TEST_KEEP=1 to keep the daemon and chromedriver logs)")
        return 1
    print("%s: PASS" % name)
    return 0


def browser_missing(name):
    """SKIP's exit status when chromium or chromedriver is absent, else None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            print("%s: SKIP: %s is missing (apt-get install chromium chromium-driver)" % (name, path))
            return SKIP
    return None


def main():
    skip = browser_missing("dashboard_test")
    if skip is not None:
        return skip
    daemon_bin = os.environ.get("TOPO_SCHEDULER_BIN", "")
    if not daemon_bin or not os.access(daemon_bin, os.X_OK):
        print("dashboard_test: FAIL: set TOPO_SCHEDULER_BIN to the topo-scheduler binary (got %r)" % daemon_bin)
        return 1
    return run_test("dashboard_test", "topo-dashboard-test-",
                    lambda tmp, failures: run(tmp, daemon_bin, failures))


if __name__ == "__main__":
    sys.exit(main())
