"""topo-scheduler in HA mode against real etcd members on loopback (docs/ha.md, label `ha`).

    test_daemon_ha.py TOPO_SCHEDULER SCENARIO

  config   bad ha_* settings are refused at start with the key and the fix (no etcd needed)
  standby  replica a leads and serves; replica b (given a's CA and admin token file) waits
           with its listeners closed and follows etcd's replicated log into its store; a
           stops cleanly (resigns): b is elected at once and serves a's topology and jobs,
           with the same admin token; user and token changes are refused in HA mode
  fence    a successor takes the leader key (the test writes it): a's next submission is
           refused (503), nothing of it reaches etcd or a's store, a exits; restarted, a is a
           standby until the key is free, then leads with exactly the acknowledged jobs
  pause    agents run a job for leader a; SIGSTOP a past its lease, b is elected; SIGCONT:
           a acknowledges nothing more, appends nothing to etcd or its store, starts and
           stops no rank (the agents' events and logs), and exits; the agents' ranks are
           adopted by b; a restarted is a standby of b
  gap      a replica started with an empty state directory replays the whole log from etcd
           (topology epoch included) up to head; a log key that is not a batch, then a batch
           that does not follow on, stop its catch-up with errors that name the key and the
           seqs; elected, it refuses to lead, resigns and exits non-zero
  watch    with a 30 s lease (rounds 10 s apart) a standby follows each new batch within a
           few seconds: it watches etcd between rounds
  walcut   each replica keeps its own commit mark: b's follows the batches it applies. b
           killed and its WAL cut to nothing: restarted, b refuses to start, naming both
           seqs; with --accept-data-loss it takes the lost batches again from etcd, and
           serves every job once a stops

Skips (77) where /usr/bin/etcd is missing (config runs without it).
"""

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))
from etcd_cluster import EtcdCluster, skip_without_etcd  # noqa: E402
from harness import Daemon, commit_mark_seq, setup_tiny, tiny_topology  # noqa: E402

TTL = 2
CLUSTER = "t"


def b64(s):
    return base64.b64encode(s if isinstance(s, bytes) else s.encode()).decode()


def ha_config(etcd, name, ttl=TTL):
    return "\n".join([
        "ha_etcd_endpoints = " + ",".join(etcd.endpoints),
        "ha_etcd_ca = " + etcd.ca,
        "ha_etcd_cert = " + etcd.client_cert,
        "ha_etcd_key = " + etcd.client_key,
        f"ha_lease_ttl_s = {ttl}",
        f"ha_name = {name}",
        f"ha_cluster = {CLUSTER}",
        "",
    ])


def etcd_get(etcd, key):
    """The value of /toposched/t/<key>, or None."""
    for i in etcd.running():
        try:
            r = etcd.post(i, "/v3/kv/range", {"key": b64(f"/toposched/{CLUSTER}/{key}")})
        except Exception:  # noqa: BLE001 - a member that is down: the next
            continue
        kvs = r.get("kvs", [])
        return json_text(base64.b64decode(kvs[0]["value"])) if kvs else None
    raise AssertionError("no etcd member answered")


# A log batch's value and the auth value in etcd: this marker, then the JSON
# text compressed with zlib (ha/records.hpp); a value without it is the JSON
# text itself.
COMPRESSED_MARKER = b"\0zlib"


def json_text(value):
    """The JSON text of a value (bytes), inflated when it is compressed."""
    if value.startswith(COMPRESSED_MARKER):
        return zlib.decompress(value[len(COMPRESSED_MARKER):]).decode()
    return value.decode()


def etcd_log(etcd):
    """Every batch in the replicated log, in order, as (key, JSON text): a
    split batch's parts joined under its header's key, each inflated."""
    prefix = f"/toposched/{CLUSTER}/log/"
    end = prefix[:-1] + "0"
    r = etcd.post(etcd.running()[0], "/v3/kv/range", {"key": b64(prefix), "range_end": b64(end)})
    batches, parts = [], {}
    for kv in r.get("kvs", []):
        key, value = base64.b64decode(kv["key"]).decode(), base64.b64decode(kv["value"])
        if key[len(prefix):].count("/"):
            parts.setdefault(key.rsplit("/", 1)[0], []).append(value)
        else:
            batches.append((key, value))
    return [(k, json_text(b"".join(parts[k]) if k in parts else v)) for k, v in batches]


def leader_term(etcd):
    """The leader key's create_revision: the leadership term (docs/ha.md)."""
    r = etcd.post(etcd.running()[0], "/v3/kv/range", {"key": b64(f"/toposched/{CLUSTER}/leader")})
    kvs = r.get("kvs", [])
    assert kvs, "no leader key"
    return int(kvs[0]["create_revision"])


def store_last_seq(replica):
    """The newest event seq of a stopped replica's SQLite store."""
    db = sqlite3.connect(f"file:{os.path.join(replica.state_dir, 'topo.db')}?mode=ro", uri=True)
    try:
        return db.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0]
    finally:
        db.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def sim_events(path):
    """The JSON events `topo-agent --simulate` wrote to `path` (its stdout)."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def rank_events(path, ev, job):
    return [e for e in sim_events(path) if e.get("ev") == ev and e.get("job") == job]


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


class Replica(Daemon):
    """A Daemon whose start may wait (a standby writes no endpoint file)."""

    def __init__(self, binary, state_dir, config):
        os.makedirs(state_dir, exist_ok=True)
        super().__init__(binary, state_dir=state_dir, config=config)

    def start_standby(self, extra=()):
        endpoint = os.path.join(self.state_dir, "endpoint")
        if os.path.exists(endpoint):
            os.unlink(endpoint)
        path = os.path.join(self.config_dir, "test.conf")
        with open(path, "w") as f:
            f.write(self.config)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary, "--state-dir", self.state_dir, "--listen",
                                      "127.0.0.1:0", "--config", path, *extra],
                                     stdout=log, stderr=log)
        return self

    def serving(self):
        return os.path.exists(os.path.join(self.state_dir, "endpoint"))

    def attach(self):
        """Talk to the running process once it serves (after start_standby)."""
        with open(os.path.join(self.state_dir, "endpoint")) as f:
            self.url = f.read().strip()
        self.ctx = ssl.create_default_context(cafile=os.path.join(self.state_dir, "ca.pem"))


def share_identity(a, b):
    """Gives replica b the CA and the admin token file of a's state directory
    (docs/ha.md: every replica gets the same ones), before b's first start."""
    os.makedirs(b.state_dir, exist_ok=True)
    for f in ("ca.pem", "ca-key.pem", "admin-token"):
        shutil.copy2(os.path.join(a.state_dir, f), os.path.join(b.state_dir, f))


def submit(d, name):
    return d.request("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": name}, "command": ["true"]},
                     d.admin_token, timeout=15)


def job_names(d):
    out = d.api("GET", "/v1/jobs?all=1&limit=1000", expect=200)
    jobs = out["jobs"] if isinstance(out, dict) else out
    return sorted(j["spec"]["name"] if "spec" in j else j.get("name") for j in jobs)


def scenario_config(binary, tmp):
    cases = [
        ("ha_etcd_ca = /x/ca.pem\n", "need ha_etcd_endpoints"),
        ("ha_etcd_endpoints = http://127.0.0.1:2379\n", "must be https://HOST:PORT"),
        ("ha_etcd_endpoints = https://127.0.0.1:2379\n", "ha_etcd_ca is required"),
        ("ha_lease_ttl_s = 1\n", "ha_lease_ttl_s: 1 is out of range; use 2..60"),
        ("ha_etcd_max_request_bytes = 1000\n",
         "ha_etcd_max_request_bytes: 1000 is out of range; use 262144..1073741824"),
        ("ha_name = a/b\n", "ha_name: \"a/b\" must be 1-64 characters"),
        ("ha_etcd_cert = relative.pem\n", "must be an absolute path"),
        ("ha_etcd_endpoints = https://127.0.0.1:2379\nha_etcd_ca = /nonexistent/ca.pem\n"
         "ha_etcd_cert = /nonexistent/c.pem\nha_etcd_key = /nonexistent/k.pem\n",
         "HA: ha_etcd_ca /nonexistent/ca.pem: No such file or directory"),
        ("ha_etcd_endpoints = https://127.0.0.1\nha_etcd_ca = /x\nha_etcd_cert = /x\n"
         "ha_etcd_key = /x\n", "etcd endpoint 'https://127.0.0.1': no :PORT"),
    ]
    for i, (text, want) in enumerate(cases):
        state = os.path.join(tmp, f"s{i}")
        conf = os.path.join(tmp, f"c{i}.conf")
        with open(conf, "w") as f:
            f.write(text)
        p = subprocess.run([binary, "--state-dir", state, "--listen", "127.0.0.1:0", "--config",
                            conf], capture_output=True, text=True, timeout=30)
        assert p.returncode != 0, f"{text!r} was accepted"
        assert want in p.stderr, f"{text!r}: wanted {want!r} in:\n{p.stderr}"
    print(f"{len(cases)} bad HA settings refused with their key")


def scenario_standby(binary, tmp):
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a"))
        b = Replica(binary, os.path.join(tmp, "b"), ha_config(etcd, "b"))
        def b_users():
            db = sqlite3.connect(f"file:{os.path.join(b.state_dir, 'topo.db')}?mode=ro", uri=True)
            try:
                return {r[0] for r in db.execute("SELECT name FROM users")}
            except sqlite3.Error:
                return set()
            finally:
                db.close()

        try:
            a.start()
            assert etcd_get(etcd, "leader") == "a"
            share_identity(a, b)
            b.start_standby()
            wait_for(lambda: "standby: leader is 'a'" in b.log_all(), 15, "b says it is a standby")
            assert not b.serving() and b.proc.poll() is None, b.log()
            setup_tiny(a)
            for n in range(3):
                status, out = submit(a, f"j{n}")
                assert status == 201, (status, out)
            head = int(etcd_get(etcd, "head"))
            log = etcd_log(etcd)
            assert log, "no batch in etcd"
            text = "".join(v for _, v in log)
            for n in range(3):
                assert f'"j{n}"' in text, f"j{n} not in the replicated log"
            assert '"term"' in text and '"job_submitted"' in text, text[:500]
            # The keys sort in log order and the last batch ends at head.
            assert [k for k, _ in log] == sorted(k for k, _ in log)
            print(f"replicated log: {len(log)} batches, head at seq {head}")
            assert not b.serving()
            wait_for(lambda: f"the store is at seq {head}" in b.log_all(), 15,
                     "b follows the log up to head")
            # Users and tokens are replicated: the standby takes them whole.
            status, out = a.request("POST", "/v1/users", {"name": "eve", "tenant": "default", "role": "user"},
                                    a.admin_token)
            assert status == 201, (status, out)
            eve = a.api("POST", "/v1/tokens", {"user": "eve"}, a.admin_token, expect=201)
            gone = a.api("POST", "/v1/tokens", {"user": "eve"}, a.admin_token, expect=201)
            a.api("DELETE", "/v1/tokens/" + gone["id"], None, a.admin_token, expect=200)
            auth = json.loads(etcd_get(etcd, "auth"))
            assert "eve" in [u["name"] for u in auth["users"]], auth
            assert eve["token"] not in json.dumps(auth), "etcd holds hashes, never tokens"
            raw = etcd.post(0, "/v3/kv/range", {"key": b64(f"/toposched/{CLUSTER}/auth")})
            assert base64.b64decode(raw["kvs"][0]["value"]).startswith(COMPRESSED_MARKER), \
                "the auth value is written compressed"
            wait_for(lambda: b_users() >= {"admin", "eve"}, 15, "b's store has eve")
            names_a = job_names(a)

            t0 = time.monotonic()
            a.stop()  # SIGTERM: exit 0 and resign
            wait_for(b.serving, 15, "b takes over and serves")
            took = time.monotonic() - t0
            b.attach()
            assert b.admin_token == a.admin_token
            assert job_names(b) == names_a, (job_names(b), names_a)
            assert etcd_get(etcd, "leader") == "b"
            status, out = submit(b, "on-b")
            assert status == 201, (status, out)
            assert "caught up with the replicated log" in b.log_all()
            # eve's token works on the new leader, the one revoked on a does not.
            assert b.api("GET", "/v1/whoami", None, eve["token"], expect=200)["user"] == "eve"
            status, _ = b.request("GET", "/v1/whoami", None, gone["token"])
            assert status == 401, status
            # And b's own changes go to etcd in turn.
            b.api("POST", "/v1/users", {"name": "frank", "tenant": "default", "role": "user"},
                  b.admin_token, expect=201)
            auth = json.loads(etcd_get(etcd, "auth"))
            assert {"eve", "frank"} <= {u["name"] for u in auth["users"]}, auth
            print(f"b serves {len(names_a)} jobs {took:.2f} s after a's clean stop, "
                  "with eve's token and without the one revoked on a")
        finally:
            for r in (a, b):
                r.kill9()


def scenario_fence(binary, tmp):
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a", ttl=5))
        try:
            a.start()
            setup_tiny(a)
            status, out = submit(a, "kept")
            assert status == 201, (status, out)
            head = etcd_get(etcd, "head")
            # A successor: the leader key deleted and created again by another.
            key = b64(f"/toposched/{CLUSTER}/leader")
            etcd.post(0, "/v3/kv/deleterange", {"key": key})
            etcd.post(0, "/v3/kv/put", {"key": key, "value": b64("intruder")})
            status, out = submit(a, "refused")
            assert status == 503, (status, out)
            wait_for(lambda: a.proc.poll() is not None, 10, "a exits")
            assert a.proc.returncode != 0
            alog = a.log_all()
            assert "held by 'intruder'" in alog, alog[-2000:]
            assert etcd_get(etcd, "head") == head, "the refused batch reached etcd"
            assert "refused" not in "".join(v for _, v in etcd_log(etcd))

            a.start_standby()
            wait_for(lambda: "standby: leader is 'intruder'" in a.log_all(), 15, "a waits")
            assert not a.serving()
            etcd.post(0, "/v3/kv/deleterange", {"key": key})
            wait_for(a.serving, 15, "a leads again")
            a.attach()
            names = job_names(a)
            assert names == ["kept"], names
            print("fenced: the refused submission is nowhere; a leads again with 'kept' only")
        finally:
            a.kill9()


@contextlib.contextmanager
def pair_with_agents(binary, tmp, etcd, sim_args=()):
    """Replicas a (leader) and b (standby), each with an agent listener, a's
    topology imported, and `topo-agent --simulate 8` given both agent
    addresses, its 8 nodes up on a. Yields (a, b, events, sim_log): the
    simulator's JSON events and its log. Kills the simulator and both replicas
    at the end."""
    agent_bin = os.environ.get("TOPO_AGENT_BIN")
    assert agent_bin, "TOPO_AGENT_BIN is not set (tests/CMakeLists.txt sets it)"
    ports = {name: free_port() for name in ("a", "b")}
    replicas = []
    for name in ("a", "b"):
        r = Replica(binary, os.path.join(tmp, name),
                    ha_config(etcd, name) + f"agent_listen = 127.0.0.1:{ports[name]}\n"
                    "heartbeat_interval_ms = 200\n")
        r.name = name
        replicas.append(r)
    a, b = replicas
    sim = None
    events = os.path.join(tmp, "sim-events.jsonl")
    sim_log = os.path.join(tmp, "sim.log")
    try:
        a.start()
        share_identity(a, b)
        b.start_standby()
        wait_for(lambda: "standby: leader is 'a'" in b.log_all(), 15, "b is a standby")
        # The topology only: the agents bring the nodes up.
        a.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(tiny_topology())},
              expect=200)
        servers = ",".join(f"wss://127.0.0.1:{ports[n]}/v1/agent" for n in ("a", "b"))
        sim = subprocess.Popen(
            [agent_bin, "--simulate", "8", "--node-prefix", "n", "--server", servers,
             "--ca", os.path.join(a.state_dir, "ca.pem"),
             "--ca-key", os.path.join(a.state_dir, "ca-key.pem"), "--stats-every-s", "0",
             *sim_args],
            stdin=subprocess.PIPE, stdout=open(events, "ab"), stderr=open(sim_log, "ab"))
        wait_for(lambda: all(n["state"] == "up" for n in a.api("GET", "/v1/nodes")["nodes"]),
                 30, "the 8 simulated nodes up on a")
        yield a, b, events, sim_log
    finally:
        if sim is not None and sim.poll() is None:
            sim.kill()
            sim.wait()
        for r in replicas:
            r.kill9()


def scenario_pause(binary, tmp):
    """A leader paused past its lease, with agents running a job's ranks for it.

    `topo-agent --simulate 8`, given both replicas' agent addresses, registers
    with a and runs a 16-GPU job there. SIGSTOP a past its lease: b is elected
    (a newer term). SIGCONT a: its queued work (a submission, the agents'
    overdue heartbeats) is fenced. Checked in every store and in the agents: a
    acknowledges nothing and exits non-zero (docs/ha.md, "What the daemon does
    today", 5); no batch after the pause is of a's term (etcd) and a's SQLite
    store ends where the log was when it paused; no rank is started or stopped
    after the SIGCONT (the simulator's events), an agent that hears a's old
    term refuses it by name (AgentCore), every agent registers with b, which
    adopts the running ranks (restarts 0); a, restarted as its service manager
    would, is a standby of b."""
    with EtcdCluster(3) as etcd, pair_with_agents(binary, tmp, etcd) as (a, b, events, sim_log):
        status, job = a.request("POST", "/v1/jobs", {
            "spec": {"gpus": 16, "name": "before", "parallelism": {"tp": 8}},
            "command": ["true"]}, a.admin_token, timeout=15)
        assert status == 201 and job["state"] == "running", (status, job)
        jid = job["id"]
        wait_for(lambda: len(rank_events(events, "start", jid)) == 2, 15,
                 "the job's ranks started on its 2 nodes")
        term_a, head = leader_term(etcd), int(etcd_get(etcd, "head"))

        os.kill(a.proc.pid, signal.SIGSTOP)
        wait_for(lambda: etcd_get(etcd, "leader") == "b", 4 * TTL, "b elected while a sleeps")
        term_b = leader_term(etcd)
        assert term_b > term_a, (term_a, term_b)
        wait_for(b.serving, 15, "b serves")
        b.attach()
        seen = len(sim_events(events))
        with open(sim_log, "rb") as f:
            log_seen = len(f.read())
        a_log_seen = len(a.log_all())
        os.kill(a.proc.pid, signal.SIGCONT)

        try:
            status, out = submit(a, "after")
        except Exception as e:  # noqa: BLE001 - the daemon went away mid-request
            status, out = None, repr(e)
        assert status != 201, f"a paused leader acknowledged a submission: {out}"
        answer = status_text(status)
        wait_for(lambda: a.proc.poll() is not None, 10, "a exits")
        exit_status = a.proc.returncode
        assert exit_status != 0
        alog = a.log_all()
        assert "lost the leadership" in alog or "leader key is gone" in alog, alog[-2000:]

        # The agents: all with b, which adopted the job's ranks.
        wait_for(lambda: all(f"agent n{i} registered" in b.log_all() for i in range(8)), 30,
                 "every agent registered with b")
        for node in ("n0", "n1"):
            assert f"agent {node} registered from 127.0.0.1 (8 GPUs, 8 ranks running" in \
                b.log_all(), b.log_all()[-3000:]
        time.sleep(1)  # heartbeats to b: nothing stops or restarts the adopted ranks
        status, after = b.request("GET", f"/v1/jobs/{jid}", None, b.admin_token)
        assert status == 200 and after["state"] == "running" and after["restarts"] == 0, \
            (status, after)
        since = sim_events(events)[seen:]
        moved = [e for e in since if e.get("ev") in ("start", "stop")]
        assert not moved, f"ranks started or stopped after a's SIGCONT: {moved}"
        assert len(rank_events(events, "start", jid)) == 2, sim_events(events)
        assert not rank_events(events, "stop", jid), sim_events(events)
        with open(sim_log, errors="replace") as f:
            agent_lines = f.read()[log_seen:].splitlines()
        # The agents' warnings since: a refusal of a's older term, naming both
        # terms (AgentCore), or a's own refusal of a registration while it
        # stops; nothing else. Which of the two an agent meets is a race (a
        # notices its lost lease within moments of the SIGCONT, and from then
        # refuses registrations itself), so neither is required here; the
        # refusal of an older term alone is node-agent's unit test ("HA: ...").
        # a refuses either before its stop is under way (the registration's
        # commit fails: "could not write its state and is stopping: this
        # scheduler lost its leadership") or after ("topo-scheduler is
        # stopping"); which one is a race too.
        refusals = [l for l in agent_lines if "leadership term" in l]
        for line in refusals:
            assert (f"refusing a scheduler of leadership term {term_a}: term {term_b} leads "
                    "now") in line, line
        stopping = ("topo-scheduler is stopping",
                    "could not write its state and is stopping: this scheduler lost its "
                    "leadership")
        others = [l for l in agent_lines if l not in refusals and not (
            "the scheduler refused register" in l and any(s in l for s in stopping))]
        assert not others, "\n".join(others)

        # The stores: etcd holds nothing of a's term after the pause (b's
        # batches only: a submission to b), a's SQLite nothing after the log's
        # head then.
        status, out = submit(b, "on-b")
        assert status == 201, (status, out)
        later = [(k, json.loads(v)) for k, v in etcd_log(etcd)
                 if int(k.rsplit("/", 1)[1]) > head]
        assert later, "b's submission is not in etcd's log"
        assert all(batch["term"] == term_b for _, batch in later), \
            [(k, batch["term"]) for k, batch in later]
        assert '"after"' not in json.dumps([batch for _, batch in later])
        assert '"on-b"' in json.dumps([batch for _, batch in later])
        assert store_last_seq(a) == head, (store_last_seq(a), head)

        # docs/ha.md: a exits so that its service manager restarts it as a standby.
        a.start_standby()
        wait_for(lambda: f"standby: leader is 'b' (term {term_b})" in a.log_all()[a_log_seen:],
                 15, "a restarted is a standby of b")
        assert not a.serving()
        print(f"paused leader (term {term_a}): answer {answer}, exit {exit_status}; b (term {term_b}) adopted the job's ranks from 8 agents; "
              f"no rank started or stopped after SIGCONT, {len(refusals)} refusal(s) of term "
              f"{term_a}; etcd and a's store hold nothing of a after seq {head}; a restarted "
              "as a standby")


def scenario_gap(binary, tmp):
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a"))
        b = Replica(binary, os.path.join(tmp, "b"), ha_config(etcd, "b"))
        try:
            a.start()
            setup_tiny(a)
            for n in range(2):
                status, out = submit(a, f"j{n}")
                assert status == 201, (status, out)
            a.stop()  # resigns: the key is free, head stays
            head = int(etcd_get(etcd, "head"))
            assert etcd_get(etcd, "topology/00000000000000000001") is not None
            # Someone else leads (a key without a lease), so b stays a standby.
            key = b64(f"/toposched/{CLUSTER}/leader")
            etcd.post(0, "/v3/kv/put", {"key": key, "value": b64("intruder")})
            share_identity(a, b)
            b.start_standby()
            wait_for(lambda: f"the store is at seq {head}" in b.log_all(), 15,
                     "an empty replica replays the whole log")
            bad = f"/toposched/{CLUSTER}/log/{head + 1:020d}"
            etcd.post(0, "/v3/kv/put", {"key": b64(bad), "value": b64("not json")})
            wait_for(lambda: f"etcd key {bad}: not a batch" in b.log_all(), 15,
                     "b names the key it cannot read")
            batch = json.dumps({"term": 1, "first_seq": head + 5, "entries": [{}]})
            etcd.post(0, "/v3/kv/put", {"key": b64(bad), "value": b64(batch)})
            want = (f"holds the batch from seq {head + 5} but this replica's store ends at "
                    f"seq {head}")
            wait_for(lambda: want in b.log_all(), 15, "b names the gap")
            assert not b.serving()
            etcd.post(0, "/v3/kv/deleterange", {"key": key})
            wait_for(lambda: b.proc.poll() is not None, 15, "b is elected and refuses to lead")
            assert b.proc.returncode != 0
            blog = b.log_all()
            assert "HA: catching up with the replicated log: " in blog, blog[-2000:]
            assert not b.serving()
            wait_for(lambda: etcd_get(etcd, "leader") is None, 5, "b resigned")
            print(f"empty replica replayed {head} seqs; bad key and gap refused by name")
        finally:
            for r in (a, b):
                r.kill9()


def scenario_quorum(binary, tmp):
    """One etcd member of three lost: the leader goes on. A second lost (no
    quorum): a write is refused with 503 and nothing is acknowledged; the
    leader's lease cannot be kept, so it steps down (exits non-zero, for the
    service manager to restart). Quorum back: the replica, restarted as
    systemd's Restart=on-failure would, leads again with every acknowledged job
    and takes writes."""
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a"))
        try:
            a.start()
            setup_tiny(a)
            acked = []
            status, out = submit(a, "three-members")
            assert status == 201, (status, out)
            acked.append("three-members")
            etcd.kill(2)
            status, out = submit(a, "two-members")
            assert status == 201, f"one member lost: {status} {out}"
            acked.append("two-members")
            etcd.kill(1)
            try:
                status, out = submit(a, "one-member")
            except Exception as e:  # noqa: BLE001 - the daemon went away mid-request
                status, out = None, repr(e)
            assert status != 201, f"a write was acknowledged without a quorum: {out}"
            if status is not None:
                assert status == 503, (status, out)
            no_quorum = status_text(status)
            wait_for(lambda: a.proc.poll() is not None, 4 * TTL + 10, "a steps down")
            assert a.proc.returncode != 0, a.proc.returncode
            etcd.restart(1)
            etcd.restart(2)
            a.start()
            names = job_names(a)
            # Every acknowledged job once. The refused write may exist too: etcd
            # can commit a proposal it took before losing its quorum once the
            # members are back (a request without an answer may or may not have
            # happened; a client retries it with its client_request_id).
            assert len(names) == len(set(names)), f"a job twice: {names}"
            assert set(acked) <= set(names) <= set(acked) | {"one-member"}, \
                f"after quorum returned: {names}, acknowledged {acked}"
            status, out = submit(a, "quorum-back")
            assert status == 201, (status, out)
            print(f"quorum: one member lost, writes go on; two lost: {no_quorum}, "
                  f"step-down; quorum back: {len(names)} acknowledged jobs, writes again")
        finally:
            a.kill9()


def status_text(status):
    return "no answer" if status is None else str(status)


def scenario_watch(binary, tmp):
    """With a 30 s lease a standby's rounds are 10 s apart: that it follows
    each new batch long before that shows it watches etcd rather than wait
    for its next round."""
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a", ttl=30))
        b = Replica(binary, os.path.join(tmp, "b"), ha_config(etcd, "b", ttl=30))
        try:
            a.start()
            share_identity(a, b)
            b.start_standby()
            wait_for(lambda: "standby: leader is 'a'" in b.log_all(), 15, "b says it is a standby")
            setup_tiny(a)
            for n in range(3):
                status, out = submit(a, f"w{n}")
                assert status == 201, (status, out)
                head = int(etcd_get(etcd, "head"))
                wait_for(lambda: f"the store is at seq {head}" in b.log_all(), 5,
                         f"b follows batch {n} without waiting out its 10 s round")
            print(f"b followed 3 submissions through its watch, up to seq {head}")
        finally:
            for r in (a, b):
                r.kill9()


def etcd_put(etcd, key, value):
    etcd.post(etcd.running()[0], "/v3/kv/put",
              {"key": b64(f"/toposched/{CLUSTER}/{key}"), "value": b64(value)})


def scenario_auth(binary, tmp):
    """A hostile `auth` value in etcd: a standby logs what is wrong and keeps
    its own users; elected on it, a replica refuses to serve and names the
    field; a good value again and it serves with the leader's users."""
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a"))
        b = Replica(binary, os.path.join(tmp, "b"), ha_config(etcd, "b"))
        try:
            a.start()
            a.api("POST", "/v1/users", {"name": "eve", "tenant": "default", "role": "user"},
                  a.admin_token, expect=201)
            good = etcd_get(etcd, "auth")
            assert "eve" in good, good
            share_identity(a, b)
            b.start_standby()
            wait_for(lambda: "standby: took the leader's users and tokens" in b.log_all(), 15,
                     "b takes the users and tokens")
            # A compressed value that is not a zlib stream, then one cut short.
            etcd_put(etcd, "auth", COMPRESSED_MARKER + b'{"users": []}')
            wait_for(lambda: "compressed value: not a zlib stream" in b.log_all(), 15,
                     "b names what is wrong with the compressed value")
            etcd_put(etcd, "auth", COMPRESSED_MARKER + zlib.compress(good.encode())[:-4])
            wait_for(lambda: "compressed value: its zlib stream ends early" in b.log_all(), 15,
                     "b refuses a stream cut short")
            assert b.proc.poll() is None and not b.serving(), b.log()
            bad = json.loads(good)
            bad["users"][0]["role"] = "root"
            etcd_put(etcd, "auth", json.dumps(bad))
            wait_for(lambda: "must be user, tenant-admin or cluster-admin" in b.log_all(), 15,
                     "b names the field it refuses")
            assert b.proc.poll() is None and not b.serving(), b.log()
            a.kill9()
            wait_for(lambda: b.proc.poll() is not None, 30, "b, elected, refuses to serve")
            assert b.proc.returncode != 0
            assert "taking the users and tokens from etcd" in b.log_all(), b.log()
            assert not b.serving()
            # Fixed in etcd, b serves with eve.
            etcd_put(etcd, "auth", good)
            b.start_standby()
            wait_for(b.serving, 30, "b serves once the value is good")
            b.attach()
            users = b.api("GET", "/v1/users", None, b.admin_token, expect=200)["users"]
            assert "eve" in [u["name"] for u in users], users
            print("a refused auth value is logged by a standby, stops an elected replica's "
                  "start with the field, and a good one lets it serve")
        finally:
            for r in (a, b):
                r.kill9()


def scenario_walcut(binary, tmp):
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a"))
        b = Replica(binary, os.path.join(tmp, "b"), ha_config(etcd, "b"))
        try:
            a.start()
            share_identity(a, b)
            b.start_standby()
            setup_tiny(a)
            for n in range(12):
                status, out = submit(a, f"w{n}")
                assert status == 201, (status, out)
            head = int(etcd_get(etcd, "head"))
            wait_for(lambda: f"the store is at seq {head}" in b.log_all(), 15, "b follows to head")
            # b's mark is its own store's: it follows what b applied.
            assert commit_mark_seq(b.state_dir) == head, (commit_mark_seq(b.state_dir), head)
            b.kill9()
            os.truncate(os.path.join(b.state_dir, "topo.db-wal"), 0)
            try:
                left = store_last_seq(b)
            except sqlite3.OperationalError:  # nothing had reached the database file
                left = 0
            assert left < head, f"the cut WAL lost nothing ({left} of {head})"
            p = subprocess.run([binary, "--state-dir", b.state_dir, "--listen", "127.0.0.1:0",
                                "--config", os.path.join(b.config_dir, "test.conf")],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode != 0, "b started on a store behind its mark"
            assert (f"its log ends at seq {left}," in p.stderr and
                    f"says seq {head} was committed" in p.stderr and
                    "--accept-data-loss" in p.stderr), p.stderr
            b.start_standby(["--accept-data-loss"])
            wait_for(lambda: "takes them again from the replicated log" in b.log_all(), 15,
                     "b says it takes the lost batches from etcd")
            wait_for(lambda: b.log_all().count(f"the store is at seq {head}") >= 2, 15,
                     "b follows to head again")
            names_a = job_names(a)
            a.stop()
            wait_for(b.serving, 15, "b takes over and serves")
            b.attach()
            assert job_names(b) == names_a, (job_names(b), names_a)
            print(f"b's mark followed it to seq {head}; its WAL cut to seq {left} was refused, "
                  f"then taken again from etcd with --accept-data-loss: {len(names_a)} jobs")
        finally:
            for r in (a, b):
                r.kill9()


SCENARIOS = {"config": scenario_config, "standby": scenario_standby, "fence": scenario_fence,
             "pause": scenario_pause, "gap": scenario_gap, "quorum": scenario_quorum,
             "watch": scenario_watch, "auth": scenario_auth, "walcut": scenario_walcut}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in SCENARIOS:
        print(f"usage: {sys.argv[0]} TOPO_SCHEDULER {{{','.join(SCENARIOS)}}}")
        return 2
    binary, name = sys.argv[1], sys.argv[2]
    if name != "config":
        skip_without_etcd()
    return run_scenario("topo-ha-", f"ha daemon {name}", lambda tmp: SCENARIOS[name](binary, tmp))


def run_scenario(prefix, label, body):
    """body(tmp) in a fresh temporary directory; on a failure each replica's
    daemon.log tail is printed; the directory goes in any case."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        body(tmp)
    except Exception:
        for d in sorted(os.listdir(tmp)):
            log = os.path.join(tmp, d, "daemon.log")
            if os.path.exists(log):
                with open(log, errors="replace") as f:
                    print(f"---- {d}/daemon.log\n" + f.read()[-3000:], file=sys.stderr)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{label}: 1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
