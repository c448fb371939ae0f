"""kill -9 failover of topo-scheduler on etcd (docs/ha.md, label `ha`).

    test_failover.py TOPO_SCHEDULER TOPO SCENARIO [KILLS] [--json FILE] [--agents N]

Three TLS etcd members on loopback, two replicas a and b (own state directories, the same
ha_cluster, a's CA and admin token file given to b before its first start).

  kill   a leads; a topology is imported and jobs submitted on a; b follows as a standby.
         kill -9 a: b takes over within TTL + 5 s and lists every acknowledged job exactly
         once; submissions continue on b. a restarts as a standby, catches up, and after
         kill -9 b leads with everything, b's jobs included.
  topology  a leads with running and queued jobs and takes a live topology change (a leaf
         added, a node removed); kill -9 a: b serves the new version with every job on its
         GPUs, the queue and the tenants' usage (its replicated epoch carries the state the
         change carried over).
  kills  KILLS (default 20) kill -9 cycles of whichever replica leads, while three
         submitters post jobs with a client_request_id (retrying each one with the same id
         on the other replica until it is acknowledged) and a fourth runs `topo submit
         --server A,B` (the CLI moves on when one does not answer). The killed replica
         restarts as a standby once the other serves. At the end every acknowledged
         submission exists exactly once on the final leader, none twice. With --json FILE,
         the failover times (kill -9 to the successor answering) go to FILE.

Skips (77) where /usr/bin/etcd is missing.
"""

import copy
import http.client
import json
import os
import secrets
import ssl
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))
from etcd_cluster import EtcdCluster, skip_without_etcd  # noqa: E402
from harness import setup_tiny, tiny_topology  # noqa: E402
from test_daemon_ha import (TTL, Replica, etcd_get, free_port, ha_config,  # noqa: E402
                            pair_with_agents, run_scenario, share_identity, sim_events,
                            wait_for)

# Kill to the successor answering: the lease's TTL, a campaign interval
# (TTL/3), the catch-up and the start.
FAILOVER_LIMIT_S = TTL + 5


def endpoint(r):
    try:
        with open(os.path.join(r.state_dir, "endpoint")) as f:
            return f.read().strip()
    except OSError:
        return None


class Client:
    """POSTs and GETs against whichever replica answers, with the shared CA and token."""

    def __init__(self, replicas, ca, token):
        self.replicas, self.token = replicas, token
        self.ctx = ssl.create_default_context(cafile=ca)

    def call(self, url, method, path, body=None, timeout=5):
        host, port = url.removeprefix("https://").rsplit(":", 1)
        conn = http.client.HTTPSConnection(host, int(port), context=self.ctx, timeout=timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers={
                "Authorization": "Bearer " + self.token, "Content-Type": "application/json"})
            r = conn.getresponse()
            text = r.read().decode(errors="replace")
            try:
                return r.status, json.loads(text)
            except ValueError:
                return r.status, text
        finally:
            conn.close()

    def leader_call(self, method, path, body=None, deadline_s=30):
        """The first answer other than 503 from any replica, retrying until deadline_s."""
        deadline = time.monotonic() + deadline_s
        last = None
        while time.monotonic() < deadline:
            for r in self.replicas:
                url = endpoint(r)
                if url is None:
                    continue
                try:
                    status, out = self.call(url, method, path, body)
                except (OSError, http.client.HTTPException) as e:
                    last = repr(e)
                    continue
                if status != 503:
                    return status, out
                last = out
            time.sleep(0.05)
        raise AssertionError(f"{method} {path}: no replica answered within {deadline_s} s: {last}")


def submit_body(name, request_id):
    return {"spec": {"gpus": 1, "name": name}, "command": ["true"],
            "client_request_id": request_id}


def jobs_on(client, url):
    status, out = client.call(url, "GET", "/v1/jobs?all=1&limit=10000", timeout=15)
    assert status == 200, (status, out)
    jobs = out["jobs"] if isinstance(out, dict) else out
    assert len(jobs) < 10000, "more jobs than one page holds"
    return [(j["spec"]["name"] if "spec" in j else j.get("name"), j["id"]) for j in jobs]


def leader_of(replicas, etcd):
    name = etcd_get(etcd, "leader")
    for r in replicas:
        if r.name == name and r.proc is not None and r.proc.poll() is None and endpoint(r):
            return r
    return None


def make_replicas(binary, tmp, etcd):
    a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a"))
    b = Replica(binary, os.path.join(tmp, "b"), ha_config(etcd, "b"))
    a.name, b.name = "a", "b"
    return a, b


def lead_with_standby(a, b):
    """a leads with the tiny topology, b follows it as a standby; a Client of both."""
    a.start()
    share_identity(a, b)
    b.start_standby()
    wait_for(lambda: "standby: leader is 'a'" in b.log_all(), 15, "b is a standby")
    setup_tiny(a)
    return Client([a, b], os.path.join(a.state_dir, "ca.pem"), a.admin_token)


def failover(replicas, etcd, client):
    """kill -9 the leader; the seconds until the other answers, and the new leader."""
    old = leader_of(replicas, etcd)
    assert old is not None, "no leader serving"
    new = next(r for r in replicas if r is not old)
    assert endpoint(new) is None, "the standby writes no endpoint file"
    t0 = time.monotonic()
    old.kill9()
    deadline = t0 + FAILOVER_LIMIT_S + 10
    while time.monotonic() < deadline:
        url = endpoint(new)
        if url is not None:
            try:
                status, _ = client.call(url, "GET", "/v1/jobs?limit=1", timeout=2)
                if status == 200:
                    break
            except (OSError, http.client.HTTPException):
                pass
        assert new.proc.poll() is None, "the standby exited:\n" + new.log()[-3000:]
        time.sleep(0.02)
    took = time.monotonic() - t0
    assert endpoint(new) is not None, "the standby did not take over:\n" + new.log()[-3000:]
    # How long it took is bench/ha's to report (docs/benchmarks.md), not a test's to assert.
    os.unlink(os.path.join(old.state_dir, "endpoint"))
    return took, old, new


def scenario_kill(binary, topo, tmp, kills, json_out):
    with EtcdCluster(3) as etcd:
        a, b = make_replicas(binary, tmp, etcd)
        try:
            client = lead_with_standby(a, b)
            acked = []
            for n in range(5):
                status, out = client.call(a.url, "POST", "/v1/jobs",
                                          submit_body(f"a{n}", secrets.token_hex(16)))
                assert status == 201, (status, out)
                acked.append(f"a{n}")
            took, _, _ = failover([a, b], etcd, client)
            names = sorted(n for n, _ in jobs_on(client, endpoint(b)))
            assert names == sorted(acked), names
            status, out = client.call(endpoint(b), "POST", "/v1/jobs",
                                      submit_body("b0", secrets.token_hex(16)))
            assert status == 201, (status, out)
            print(f"kill -9 a: b served {len(acked)} jobs after {took:.2f} s and took b0")
            # a comes back as a standby, follows b's log, and leads after b's death.
            a.start_standby()
            wait_for(lambda: "standby: leader is 'b'" in a.log_all(), 15, "a is a standby")
            took2, _, _ = failover([a, b], etcd, client)
            names = sorted(n for n, _ in jobs_on(client, endpoint(a)))
            assert names == sorted(acked + ["b0"]), names
            # The topology came through etcd too: a places a job on b's nodes.
            status, out = client.call(endpoint(a), "POST", "/v1/jobs",
                                      submit_body("a-again", secrets.token_hex(16)))
            assert status == 201, (status, out)
            print(f"kill -9 b: a served {len(names)} jobs after {took2:.2f} s")
        finally:
            for r in (a, b):
                r.kill9()


class Submitters:
    """Threads that submit until stopped; each submission retried with the same
    client_request_id until some replica acknowledges it."""

    def __init__(self, client, replicas, topo, ca, token, count=3):
        self.client, self.replicas, self.topo, self.ca, self.token = (client, replicas, topo, ca,
                                                                      token)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked = {}  # name -> job id
        self.duplicates = 0  # retries answered "duplicate": true
        self.errors = []
        self.threads = [threading.Thread(target=self.api_loop, args=(i,)) for i in range(count)]
        if topo:
            self.threads.append(threading.Thread(target=self.cli_loop))

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(120)

    def ack(self, name, job_id, duplicate):
        with self.lock:
            assert name not in self.acked
            self.acked[name] = job_id
            self.duplicates += int(bool(duplicate))

    def api_loop(self, i):
        n = 0
        while not self.stop.is_set():
            name, rid = f"s{i}-{n}", secrets.token_hex(16)
            tries = 0
            while True:
                tries += 1
                url = endpoint(self.replicas[tries % 2])
                if url is None:
                    time.sleep(0.05)
                    continue
                try:
                    status, out = self.client.call(url, "POST", "/v1/jobs",
                                                   submit_body(name, rid))
                except (OSError, http.client.HTTPException):
                    time.sleep(0.05)
                    continue
                if status in (200, 201):
                    self.ack(name, out["id"], out.get("duplicate"))
                    break
                if status != 503:
                    self.errors.append(f"{name}: {status} {out}")
                    return
                time.sleep(0.05)
                if tries > 2000:
                    self.errors.append(f"{name}: never acknowledged")
                    return
            n += 1
            time.sleep(0.02)

    def cli_loop(self):
        n = 0
        while not self.stop.is_set():
            name, rid = f"cli-{n}", secrets.token_hex(16)
            for _ in range(100):
                servers = [u for u in (endpoint(r) for r in self.replicas) if u]
                # A dead replica's address first when there is one: the CLI must move on.
                servers += ["https://127.0.0.1:1"]
                env = dict(os.environ, HOME=os.path.dirname(self.ca), TOPO_CA=self.ca,
                           TOPO_TOKEN=self.token)
                p = subprocess.run([self.topo, "submit", "--server", ",".join(servers[::-1]),
                                    "--request-id", rid, "--gpus", "1", "--name", name,
                                    "--json", "--", "true"], env=env, capture_output=True,
                                   text=True, timeout=60)
                if p.returncode == 0:
                    out = json.loads(p.stdout)
                    self.ack(name, out["id"], out.get("duplicate"))
                    break
                time.sleep(0.1)
            else:
                self.errors.append(f"{name}: topo submit never succeeded: {p.stderr[-500:]}")
                return
            n += 1
            time.sleep(0.05)


def flat_topology(nodes):
    """`nodes` 8-GPU nodes n0.. in leaves of 16 under one spine each 8 leaves."""
    names = [f"n{i}" for i in range(nodes)]
    leaves = [{"name": f"leaf{j}", "nodes": names[16 * j:16 * j + 16]}
              for j in range((nodes + 15) // 16)]
    spines = [{"name": f"spine{k}", "children": leaves[8 * k:8 * k + 8]}
              for k in range((len(leaves) + 7) // 8)]
    return {"version": 1, "name": f"flat{nodes}", "tiers": ["node", "leaf", "spine"],
            "hbd": "node", "gpus_per_node": 8, "gpu_model": "H100", "domains": spines}


def registrations(replica, since):
    return replica.log_all()[since:].count(" registered from ")


def scenario_kills(binary, topo, tmp, kills, json_out, agents=0):
    """With agents > 0 (bench/ha: --agents 1000), `topo-agent --simulate` runs that many
    nodes given both replicas' agent addresses, and each failover's time also runs until
    every agent has registered with the new leader."""
    with EtcdCluster(3) as etcd:
        a, b = make_replicas(binary, tmp, etcd)
        ports = {"a": free_port(), "b": free_port()}
        if agents:
            for r in (a, b):
                r.config += f"agent_listen = 127.0.0.1:{ports[r.name]}\n"
        subs = None
        sim = None
        try:
            a.start()
            share_identity(a, b)
            b.start_standby()
            wait_for(lambda: "standby: leader is 'a'" in b.log_all(), 15, "b is a standby")
            if agents:
                a.api("PUT", "/v1/topology",
                      {"format": "json", "content": json.dumps(flat_topology(agents))}, expect=200)
                servers = ",".join(f"wss://127.0.0.1:{ports[n]}/v1/agent" for n in ("a", "b"))
                sim = subprocess.Popen(
                    [os.environ["TOPO_AGENT_BIN"], "--simulate", str(agents), "--node-prefix",
                     "n", "--server", servers, "--ca", os.path.join(a.state_dir, "ca.pem"),
                     "--ca-key", os.path.join(a.state_dir, "ca-key.pem"), "--stats-every-s", "0"],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                    stderr=open(os.path.join(tmp, "sim.log"), "ab"))
                wait_for(lambda: registrations(a, 0) >= agents, 120, f"{agents} agents on a")
            else:
                setup_tiny(a)
            ca = os.path.join(a.state_dir, "ca.pem")
            client = Client([a, b], ca, a.admin_token)
            subs = Submitters(client, [a, b], topo, ca, a.admin_token)
            subs.start()
            times = []
            for k in range(kills):
                time.sleep(1.0)  # submissions land on the leader meanwhile
                new = next(r for r in (a, b) if r is not leader_of([a, b], etcd))
                seen_new = len(new.log_all())
                t0 = time.monotonic()
                took, old, _ = failover([a, b], etcd, client)
                if agents:
                    wait_for(lambda: registrations(new, seen_new) >= agents, 120,
                             f"{agents} agents re-registered with {new.name}")
                    took = time.monotonic() - t0
                times.append(took)
                seen = len(old.log_all())
                old.start_standby()
                wait_for(lambda old=old, seen=seen: "standby: leader is" in old.log_all()[seen:],
                         15, f"{old.name} restarts as a standby")
                print(f"kill {k + 1}: failover {took:.2f} s, {len(subs.acked)} acknowledged")
                assert not subs.errors, subs.errors
            time.sleep(1.0)
            subs.finish()
            assert not subs.errors, subs.errors
            leader = leader_of([a, b], etcd)
            jobs = jobs_on(client, endpoint(leader))
            names = [n for n, _ in jobs]
            twice = sorted({n for n in names if names.count(n) > 1})
            assert not twice, f"submissions that exist twice: {twice[:20]}"
            by_name = dict(jobs)
            missing = sorted(n for n in subs.acked if n not in by_name)
            assert not missing, f"acknowledged but missing: {missing[:20]}"
            moved = sorted(n for n, i in subs.acked.items() if by_name[n] != i)
            assert not moved, f"acknowledged with another id: {moved[:20]}"
            cli = sum(1 for n in subs.acked if n.startswith("cli-"))
            assert cli > 0, "the CLI submitter got nothing acknowledged"
            p50 = statistics.median(times)
            p99 = sorted(times)[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))]
            print(f"{kills} kills: {len(subs.acked)} acknowledged submissions ({cli} by the CLI, "
                  f"{subs.duplicates} answered as duplicates) each exactly once on "
                  f"{leader.name}; {len(jobs)} jobs; failover p50 {p50:.2f} s, "
                  f"max {max(times):.2f} s")
            if json_out:
                with open(json_out, "w") as f:
                    json.dump({"kills": kills, "ha_lease_ttl_s": TTL, "etcd_members": 3,
                               "agents": agents,
                               "failover_s": [round(t, 3) for t in times],
                               "failover_p50_s": round(p50, 3), "failover_p99_s": round(p99, 3),
                               "acknowledged": len(subs.acked)}, f, indent=2)
                    f.write("\n")
        finally:
            if subs is not None:
                subs.stop.set()
            if sim is not None and sim.poll() is None:
                sim.kill()
                sim.wait()
            for r in (a, b):
                r.kill9()


def scenario_agents(binary, topo, tmp, kills, json_out):
    """Agents follow the leader: `topo-agent --simulate 8` given both replicas'
    agent addresses runs a job's ranks for a; after kill -9 a, every node
    re-registers with b (which sends its newer term) and b adopts the running
    ranks: the job stays running, not restarted, and no rank is started again."""
    with EtcdCluster(3) as etcd, \
            pair_with_agents(binary, tmp, etcd, ("--step-ms", "100")) as (a, b, events, _):
        client = Client([a, b], os.path.join(a.state_dir, "ca.pem"), a.admin_token)
        status, job = client.call(a.url, "POST", "/v1/jobs", {
            "spec": {"gpus": 16, "name": "adopted", "parallelism": {"tp": 8}},
            "command": ["true"], "client_request_id": secrets.token_hex(16)})
        assert status == 201 and job["state"] == "running", (status, job)
        jid = job["id"]
        wait_for(lambda: len([e for e in sim_events(events)
                              if e.get("ev") == "start" and e.get("job") == jid]) == 2,
                 15, "the job's ranks started on its 2 nodes")

        took, _, _ = failover([a, b], etcd, client)
        url = endpoint(b)
        # b's own log, not the node states it replayed from a's log.
        wait_for(lambda: all(f"agent n{i} registered" in b.log_all() for i in range(8)), 30,
                 "every agent re-registered with b")
        status, after = client.call(url, "GET", f"/v1/jobs/{jid}")
        assert status == 200, (status, after)
        assert after["state"] == "running" and after["restarts"] == 0, after
        starts = [e for e in sim_events(events) if e.get("ev") == "start" and e.get("job") == jid]
        assert len(starts) == 2 and all(e.get("restart_count") == 0 for e in starts), starts
        for node in ("n0", "n1"):
            assert f"agent {node} registered from 127.0.0.1 (8 GPUs, 8 ranks running" in \
                b.log_all(), b.log_all()[-3000:]
        time.sleep(1)  # a few heartbeats: nothing stops or restarts the adopted ranks
        status, later = client.call(url, "GET", f"/v1/jobs/{jid}")
        assert later["state"] == "running" and later["restarts"] == 0, later
        assert not [e for e in sim_events(events) if e.get("ev") == "stop"], sim_events(events)
        print(f"kill -9 a: b served after {took:.2f} s; 8 agents re-registered with it and its "
              f"job {jid} kept running (adopted, restarts 0)")


def scenario_topology(binary, topo, tmp, kills, json_out):
    """A live topology change on the leader survives a failover: the standby that followed
    the log takes over with the new version (added nodes down until they register, the
    removed one gone), every job on the GPUs it held, the queue and the tenants' usage.
    Nodes are not checked beyond that: without agents, b's liveness takes them down."""
    with EtcdCluster(3) as etcd:
        a, b = make_replicas(binary, tmp, etcd)
        try:
            client = lead_with_standby(a, b)  # n0..n7: four leaves of two 8-GPU nodes
            status, out = client.call(a.url, "POST", "/v1/nodes/drain",
                                      {"nodes": "n7", "reason": "rack out"})
            assert status == 200, (status, out)
            ids = []
            for gpus in (16, 24, 48):
                status, out = client.call(a.url, "POST", "/v1/jobs", {
                    "spec": {"gpus": gpus, "parallelism": {"tp": 8}},
                    "command": ["sleep", "600"], "client_request_id": secrets.token_hex(16)})
                assert status == 201, (status, out)
                ids.append(out["id"])

            def view(url):
                status, out = client.call(url, "GET", "/v1/jobs?all=true")
                assert status == 200, (status, out)
                js = {j["id"]: j["state"] for j in out["jobs"]}
                ranks = {}
                for i in ids:
                    status, d = client.call(url, "GET", "/v1/jobs/%d" % i)
                    assert status == 200, (status, d)
                    ranks[i] = sorted((r["node"], r["gpu"]) for r in d.get("ranks", []))
                status, t = client.call(url, "GET", "/v1/tenants")
                assert status == 200, (status, t)
                usage = {x["name"]: x["usage_gpus"] for x in t["tenants"]}
                status, n = client.call(url, "GET", "/v1/nodes")
                assert status == 200, (status, n)
                return js, ranks, usage, {x["name"]: x["state"] for x in n["nodes"]}

            states, ranks, usage, _ = view(a.url)
            assert [states[i] for i in ids] == ["running", "running", "queued"], states
            # Version 2 on the leader: leaf4 with n8, n9 added, n7 removed.
            v2 = copy.deepcopy(tiny_topology())
            leaf3 = v2["domains"][1]["children"][1]
            leaf3["nodes"] = [n for n in leaf3["nodes"] if n != "n7"]
            v2["domains"][1]["children"].append({"name": "leaf4", "nodes": ["n8", "n9"]})
            status, out = client.call(a.url, "PUT", "/v1/topology",
                                      {"format": "json", "content": json.dumps(v2)})
            assert status == 200, (status, out)
            took, _, _ = failover([a, b], etcd, client)
            url = endpoint(b)
            states_b, ranks_b, usage_b, nodes_b = view(url)
            assert states_b == states, (states, states_b)
            assert ranks_b == ranks, (ranks, ranks_b)
            assert usage_b == usage, (usage, usage_b)
            assert "n7" not in nodes_b, nodes_b
            assert nodes_b["n8"] == "down" and nodes_b["n9"] == "down", nodes_b
            status, n = client.call(url, "GET", "/v1/nodes")
            assert {x["name"]: x["leaf"] for x in n["nodes"]}["n8"] == "leaf4", n
            print(f"kill -9 a after a topology change: b served the new version after "
                  f"{took:.2f} s with {len(ids)} jobs, their GPUs and the usage kept")
        finally:
            for r in (a, b):
                r.kill9()


SCENARIOS = {"kill": scenario_kill, "kills": scenario_kills, "agents": scenario_agents,
             "topology": scenario_topology}


def main():
    args = sys.argv[1:]
    json_out = None
    if "--json" in args:
        i = args.index("--json")
        json_out = args[i + 1]
        del args[i:i + 2]
    agents = 0
    if "--agents" in args:
        i = args.index("--agents")
        agents = int(args[i + 1])
        del args[i:i + 2]
    if len(args) not in (3, 4) or args[2] not in SCENARIOS:
        print(f"usage: {sys.argv[0]} TOPO_SCHEDULER TOPO {{{','.join(SCENARIOS)}}} [KILLS] "
              "[--json FILE]")
        return 2
    binary, topo, name = args[0], args[1], args[2]
    kills = int(args[3]) if len(args) == 4 else 20
    skip_without_etcd()
    if agents and name != "kills":
        print("--agents is for the kills scenario")
        return 2
    extra = {"agents": agents} if agents else {}
    return run_scenario("topo-failover-", f"ha failover {name}",
                        lambda tmp: SCENARIOS[name](binary, topo, tmp, kills, json_out, **extra))


if __name__ == "__main__":
    sys.exit(main())
