#!/usr/bin/python3
"""The dashboard at scale: cm384-166k (20,736 nodes, 165,888 GPUs) in headless Chromium.

Starts a real daemon ($TOPO_SCHEDULER_BIN), imports the topology the project generates
(`$TOPO_BIN topology export --generate cm384-166k`), brings every node up without agents
(POST /v1/nodes/resume), runs a dozen jobs of two tenants (a few thousand GPUs), drains two
nodes, then opens the page as the admin and checks, from the DOM:

  * body[data-ready="1"] within READY_LIMIT_S (the time is printed; the bound only guards
    against a hang), in the aggregated mode, with no per-GPU cell built and a bounded DOM;
  * one tile per pod, each with a tile per leaf, whose numbers are GET /v1/cluster?by=domain's,
    and the pods' numbers add up to GET /v1/cluster's (the summary cards too);
  * a click on the busiest leaf drills down to its GPU cells, each carrying the job the job's
    ranks (GET /v1/jobs/{id}) put there, HBD headers read "used/total · P%", two different
    jobs have different colours; the breadcrumb goes back to the top;
  * as a user of one tenant: the other tenant's GPUs show as "busy (other tenant)", never as
    an id, and no "-1", "#-1", "undefined" or "NaN" is in any page's text;
  * no JavaScript error reached the console; screenshots (top level, drill-down) decode as
    PNGs of the window's size; they are kept in the temporary directory with
    DASHBOARD_TEST_KEEP=1 (or copied to $DASHBOARD_SCREENSHOT_DIR) for a look.

Standard library only; the daemon and browser plumbing is dashboard_test.py's.
Exit status: 0 pass, 1 fail, 77 skip (no chromium or chromedriver).
"""

import base64
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dashboard_test import (Daemon, Fail, WebDriver, browser_missing,  # noqa: E402
                            check, js_errors, log, run_test)

TOPOLOGY = "cm384-166k"
READY_LIMIT_S = 30.0   # failure guard only; the measured figure is printed
NODE_COUNT = 20736
DOM_LIMIT = 20000      # elements in the aggregated page: far below one per GPU (165,888)

# (tenant, name, GPUs, tp): 3,640 GPUs in all, every job fits at once.
JOBS = [("team-a", "llm-a", 1024, 8), ("team-b", "moe-b", 768, 8), ("team-a", "sft-a", 512, 8),
        ("team-b", "rl-b", 384, 8), ("team-a", "eval-a", 256, 8), ("team-b", "dpo-b", 192, 8),
        ("team-a", "tok-a", 128, 8), ("team-b", "emb-b", 96, 8), ("team-a", "vis-a", 64, 8),
        ("team-b", "asr-b", 32, 8), ("team-a", "dbg-a", 8, 8), ("team-b", "one-b", 16, 8)]

READ_AGG = """
const q = (s) => Array.from(document.querySelectorAll(s));
const attrs = (e) => ({domain: e.getAttribute('data-domain'), tier: e.getAttribute('data-tier'),
  total: +e.getAttribute('data-gpus-total'), allocated: +e.getAttribute('data-gpus-allocated'),
  free: +e.getAttribute('data-gpus-free'), failed: +e.getAttribute('data-gpus-failed'),
  unavailable: +e.getAttribute('data-gpus-unavailable'), jobs: e.getAttribute('data-jobs'),
  other: +e.getAttribute('data-other-gpus'), text: e.innerText});
const stats = {};
for (const e of q('[data-stat]')) stats[e.getAttribute('data-stat')] = e.getAttribute('data-value');
return {mode: document.getElementById('map').dataset.mode, tiles: q('#map .tiles > .tile').map(attrs),
        minis: q('#map .mini').map(attrs), gpu_cells: q('.gpu').length,
        elements: document.getElementsByTagName('*').length, stats: stats,
        legend: q('[data-legend-job]').map((b) => b.getAttribute('data-legend-job')),
        state: document.body.dataset.state, render_ms: document.body.dataset.renderMs,
        errors: document.getElementById('errors').hidden ? '' : document.getElementById('errors').textContent};
"""

READ_CELLS = """
const q = (s) => Array.from(document.querySelectorAll(s));
return {mode: document.getElementById('map').dataset.mode,
        cells: q('#map .gpu').map((c) => [c.getAttribute('data-node'), +c.getAttribute('data-gpu'),
          c.getAttribute('data-job'), c.getAttribute('data-other') === '1', getComputedStyle(c).backgroundColor]),
        hbds: q('#map .hbd').map((h) => [h.getAttribute('data-hbd'), +h.getAttribute('data-gpus'),
          +h.getAttribute('data-allocated'), h.querySelector('.hbd-h').innerText]),
        crumbs: q('#map-crumbs button').map((b) => b.getAttribute('data-crumb')),
        elements: document.getElementsByTagName('*').length};
"""

PAGE_TEXT = """
const titles = Array.from(document.querySelectorAll('[title]')).map((e) => e.getAttribute('title'));
return {text: document.body.innerText, titles: titles.join('\\n')};
"""

SENTINELS = [(re.compile(r"(?<![\w.-])-1(?![\d.])"), "-1"), (re.compile(r"#-1"), "#-1"),
             (re.compile(r"\bundefined\b"), "undefined"), (re.compile(r"\bNaN\b"), "NaN")]


def wait_attr(wd, script_cond, what, timeout_s=READY_LIMIT_S):
    return wd.wait_for("return {done: !!(%s), mode: document.getElementById('map').dataset.mode, "
                       "drill: document.getElementById('map').dataset.drill, "
                       "state: document.body.dataset.state};" % script_cond, timeout_s, what)


def load(wd, d, token, what):
    wd.navigate("about:blank")
    t0 = time.monotonic()
    wd.navigate(d.base + "/#token=" + token)
    wd.wait_for("const b = document.body; return {done: b && b.dataset.ready === '1', "
                "state: b && b.dataset.state};", READY_LIMIT_S, "data-ready " + what)
    return time.monotonic() - t0


def screenshot(wd, tmp, name, failures):
    png = base64.b64decode(wd._call("GET", wd._s("/screenshot")))
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(png)
    size = wd.js("return [Math.round(window.innerWidth * devicePixelRatio), "
                 "Math.round(window.innerHeight * devicePixelRatio)];")
    ok = png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    w, h = struct.unpack(">II", png[16:24]) if ok else (0, 0)
    check(ok and [w, h] == size, "%s: not a PNG of the window's %s (PNG %s, %dx%d)" % (name, size, ok, w, h),
          failures)
    out = os.environ.get("DASHBOARD_SCREENSHOT_DIR")
    if out:
        os.makedirs(out, exist_ok=True)
        shutil.copy(path, os.path.join(out, name))
    log("screenshot %s: %dx%d, %d bytes" % (path, w, h, len(png)))


def no_sentinels(wd, what, failures):
    page = wd.js(PAGE_TEXT)
    for rx, name in SENTINELS:
        for field in ("text", "titles"):
            m = rx.search(page[field])
            if m:
                s = max(0, m.start() - 60)
                check(False, "%s: %r in the page's %s: ...%s..." % (what, name, field, page[field][s:m.end() + 60]),
                      failures)


def run(tmp, daemon_bin, topo_bin, failures):
    d = Daemon(daemon_bin, tmp)
    wd = WebDriver(tmp)
    try:
        d.start()
        topo_json = subprocess.run([topo_bin, "topology", "export", "--generate", TOPOLOGY, "--format", "json"],
                                   check=True, capture_output=True, text=True, timeout=60).stdout
        info = d.request("PUT", "/v1/topology", {"format": "json", "content": topo_json, "gpus_per_node": 8})
        check(info["nodes"] == NODE_COUNT, "imported %s has %s nodes" % (TOPOLOGY, info["nodes"]), failures)
        d.request("POST", "/v1/nodes/resume", {"nodes": "n[00000-%05d]" % (NODE_COUNT - 1)})
        for t in ("team-a", "team-b"):
            d.request("PUT", "/v1/tenants/" + t, {"guaranteed_gpus": 0, "borrow_limit_gpus": -1})
        d.request("POST", "/v1/users", {"name": "bea", "tenant": "team-b", "role": "user"})
        bea = d.request("POST", "/v1/tokens", {"user": "bea"})["token"]
        ids = {}
        for tenant, name, gpus, tp in JOBS:
            r = d.request("POST", "/v1/jobs", {"spec": {"name": name, "gpus": gpus, "parallelism": {"tp": tp}},
                                               "tenant": tenant, "command": ["/bin/true"]},
                          expect=(201,))
            if r["state"] != "running":
                raise Fail("job %s (%d GPUs) should start at once: %s" % (name, gpus, r))
            ids[name] = r["id"]
        owner = {}  # (node, gpu) -> job id
        for name, jid in ids.items():
            for rk in d.request("GET", "/v1/jobs/%d" % jid)["ranks"]:
                owner[(rk["node"], int(rk["gpu"]))] = jid
        busy_nodes = {n for n, _ in owner}
        drained = [n for n in ("n%05d" % i for i in range(NODE_COUNT - 1, 0, -1)) if n not in busy_nodes][:2]
        d.request("POST", "/v1/nodes/drain", {"nodes": ",".join(drained), "reason": "scale test"})
        cluster = d.request("GET", "/v1/cluster?by=domain")
        domains = {x["name"]: x for x in cluster["domains"]}
        pods = [x for x in cluster["domains"] if x["parent"] is None]
        log("%s: %d GPUs, %d allocated by %d jobs; %d pods, %d domains listed"
            % (TOPOLOGY, cluster["gpus"]["total"], cluster["gpus"]["allocated"], len(ids), len(pods), len(domains)))

        wd.start()
        wd._call("POST", wd._s("/timeouts"), {"script": 30000, "pageLoad": 60000})
        secs = load(wd, d, d.token, "as the admin")
        dom = wd.js(READ_AGG)
        log("first render as the admin: data-ready after %.2f s (render %s ms), %d elements"
            % (secs, dom["render_ms"], dom["elements"]))
        check(dom["state"] == "ok", "page state %r: %s" % (dom["state"], dom["errors"]), failures)
        check(dom["mode"] == "agg", "map mode %r, want 'agg' on %s" % (dom["mode"], TOPOLOGY), failures)
        check(dom["gpu_cells"] == 0, "the aggregated page built %d GPU cells" % dom["gpu_cells"], failures)
        check(dom["elements"] < DOM_LIMIT, "the aggregated page has %d elements (limit %d)" % (dom["elements"], DOM_LIMIT), failures)
        check([t["domain"] for t in dom["tiles"]] == [p["name"] for p in pods],
              "top tiles %s, want the pods %s" % ([t["domain"] for t in dom["tiles"]], [p["name"] for p in pods]), failures)
        keys = ("total", "allocated", "free", "failed", "unavailable")
        for t in dom["tiles"] + dom["minis"]:
            want = domains.get(t["domain"])
            got = {k: t[k] for k in keys}
            check(want is not None and got == {k: want["gpus"][k] for k in keys},
                  "tile %s shows %s, GET /v1/cluster?by=domain says %s" % (t["domain"], got, want and want["gpus"]), failures)
            if want is not None:
                check(t["jobs"] == " ".join(str(j["id"]) for j in want["jobs"]),
                      "tile %s lists jobs %r, the API %s" % (t["domain"], t["jobs"], want["jobs"]), failures)
        check(len(dom["minis"]) == sum(1 for x in domains.values() if x["tier"] == "leaf"),
              "%d leaf tiles, the topology has %d leaves" % (len(dom["minis"]), sum(1 for x in domains.values() if x["tier"] == "leaf")), failures)
        for k in keys:
            check(sum(t[k] for t in dom["tiles"]) == cluster["gpus"][k],
                  "the pod tiles' %s GPUs add to %d, GET /v1/cluster says %d" % (k, sum(t[k] for t in dom["tiles"]), cluster["gpus"][k]), failures)
        for stat, want in (("gpus-total", cluster["gpus"]["total"]), ("gpus-allocated", cluster["gpus"]["allocated"]),
                           ("jobs-running", len(ids))):
            check(dom["stats"].get(stat) == str(want), "summary %s shows %r, want %r" % (stat, dom["stats"].get(stat), want), failures)
        for jid in ids.values():
            check(str(jid) in dom["legend"], "legend misses job %d" % jid, failures)
        drained_pods = {d.request("GET", "/v1/nodes/" + n)["pod"] for n in drained}
        for pod in drained_pods:
            tile = next((t for t in dom["tiles"] if t["domain"] == pod), None)
            want = "%d drained" % sum(1 for n in drained if d.request("GET", "/v1/nodes/" + n)["pod"] == pod)
            check(tile is not None and want in tile["text"],
                  "pod %s holds drained nodes; its tile reads %r, want %r" % (pod, tile and tile["text"], want), failures)
        no_sentinels(wd, "the admin's top level", failures)
        screenshot(wd, tmp, "scale-top.png", failures)

        # Drill down into the busiest leaf.
        leaf = max((x for x in domains.values() if x["tier"] == "leaf"), key=lambda x: (x["gpus"]["allocated"], x["name"]))
        t0 = time.monotonic()
        wd.js("document.querySelector('#map .mini[data-domain=\"' + arguments[0] + '\"]').click();", leaf["name"])
        wait_attr(wd, "document.getElementById('map').dataset.drillReady === %s" % json.dumps(leaf["name"]),
                  "the drill-down into " + leaf["name"])
        log("drill-down into leaf %s (%d GPUs allocated): cells in %.2f s" % (leaf["name"], leaf["gpus"]["allocated"], time.monotonic() - t0))
        cells = wd.js(READ_CELLS)
        leaf_nodes = d.request("GET", "/v1/nodes?domain=" + leaf["name"])["nodes"]
        want_cells = {(n["name"], g) for n in leaf_nodes for g in range(n["gpus"])}
        got_cells = {(c[0], c[1]): c for c in cells["cells"]}
        check(cells["mode"] == "agg-nodes" and set(got_cells) == want_cells,
              "leaf %s: mode %r, %d cells for its %d GPUs" % (leaf["name"], cells["mode"], len(got_cells), len(want_cells)), failures)
        colours = {}
        for key in want_cells:
            c = got_cells.get(key)
            if c is None:
                continue
            want = owner.get(key)
            check(c[2] == (str(want) if want else ""), "GPU %s:%d shows job %r, the ranks put %s there" % (key[0], key[1], c[2], want), failures)
            if want:
                colours.setdefault(want, set()).add(c[4])
        check(len(colours) >= 2, "leaf %s shows fewer than two jobs: %s" % (leaf["name"], sorted(colours)), failures)
        for jid, cs in colours.items():
            check(len(cs) == 1, "job %d has several colours on the map: %s" % (jid, cs), failures)
        flat = [next(iter(cs)) for cs in colours.values()]
        check(len(set(flat)) == len(flat), "two jobs share a colour: %s" % colours, failures)
        for name, gpus, alloc, head in cells["hbds"]:
            want = "%d/%d \u00b7 %d%%" % (alloc, gpus, int(100.0 * alloc / gpus + 0.5)) if gpus else None
            check(gpus == domains[name]["gpus"]["total"] and alloc == domains[name]["gpus"]["allocated"] and want and want in head,
                  "HBD %s header %r (data %d/%d), the API says %s" % (name, head, alloc, gpus, domains[name]["gpus"]), failures)
        check(cells["crumbs"] == ["", leaf["parent"], leaf["name"]], "breadcrumb %s" % cells["crumbs"], failures)
        no_sentinels(wd, "the drill-down", failures)
        screenshot(wd, tmp, "scale-leaf.png", failures)
        wd.js("document.querySelector('#map-crumbs button[data-crumb=\"\"]').click();")
        wait_attr(wd, "document.getElementById('map').dataset.mode === 'agg' && !document.getElementById('map').dataset.drill",
                  "the breadcrumb back to the top")
        check(wd.js(READ_AGG)["gpu_cells"] == 0, "GPU cells remain after going back to the top", failures)
        console = wd.browser_log()
        if console is not None:
            errs = js_errors(console)
            check(not errs, "browser console errors (admin):\n  " + "\n  ".join(errs), failures)

        # A user of team-b: team-a's GPUs are "busy (other tenant)", never an id or -1.
        secs = load(wd, d, bea, "as a user of team-b")
        log("first render as a user: data-ready after %.2f s" % secs)
        dom = wd.js(READ_AGG)
        a_ids = {str(v) for (t, n, _, _), v in zip(JOBS, ids.values()) if t == "team-a"}
        a_gpus = sum(g for t, _, g, _ in JOBS if t == "team-a")
        check(sum(t["other"] for t in dom["tiles"]) == a_gpus,
              "the pods' other-tenant GPUs add to %d, team-a holds %d" % (sum(t["other"] for t in dom["tiles"]), a_gpus), failures)
        for t in dom["tiles"] + dom["minis"]:
            check(not (set(t["jobs"].split()) & a_ids), "user sees team-a job ids on %s: %s" % (t["domain"], t["jobs"]), failures)
        check(not (set(dom["legend"]) & a_ids), "user's legend names team-a jobs: %s" % dom["legend"], failures)
        no_sentinels(wd, "the user's top level", failures)
        wd.js("document.querySelector('#map .mini[data-domain=\"' + arguments[0] + '\"]').click();", leaf["name"])
        wait_attr(wd, "document.getElementById('map').dataset.drillReady === %s" % json.dumps(leaf["name"]),
                  "the user's drill-down into " + leaf["name"])
        cells = wd.js(READ_CELLS)
        for node, gpu, job, other, _ in cells["cells"]:
            want = owner.get((node, gpu))
            if want is not None and str(want) in a_ids:
                check(other and job == "", "team-a's GPU %s:%d shows to bea as job %r (other=%s)" % (node, gpu, job, other), failures)
        no_sentinels(wd, "the user's drill-down", failures)
        screenshot(wd, tmp, "scale-leaf-user.png", failures)
        console = wd.browser_log()
        if console is not None:
            errs = js_errors(console)
            check(not errs, "browser console errors (user):\n  " + "\n  ".join(errs), failures)
    finally:
        wd.stop()
        d.stop()


def main():
    skip = browser_missing("dashboard_scale_test")
    if skip is not None:
        return skip
    daemon_bin = os.environ.get("TOPO_SCHEDULER_BIN", "")
    topo_bin = os.environ.get("TOPO_BIN", "")
    for name, b in (("TOPO_SCHEDULER_BIN", daemon_bin), ("TOPO_BIN", topo_bin)):
        if not b or not os.access(b, os.X_OK):
            print("dashboard_scale_test: FAIL: set %s to the binary (got %r)" % (name, b))
            return 1
    return run_test("dashboard_scale_test", "topo-dashboard-scale-",
                    lambda tmp, failures: run(tmp, daemon_bin, topo_bin, failures))


if __name__ == "__main__":
    sys.exit(main())
