"""job_submit/topo against real Slurm: slurmctld + 16 slurmd + munged on
loopback (slurm_cluster.py), the plugin loaded from the build tree, and a real
topo-scheduler in Slurm mode.

  1. a job gets exactly the nodes toposched chose (ReqNodeList, NodeList; the
     rank order is in AdminComment);
  2. a job toposched rejects fails with its reason;
  3. a job held for capacity starts on toposched's nodes once capacity frees;
  4. with topo-scheduler stopped, jobs still run (fail-open), and a restarted
     topo-scheduler keeps off the nodes they hold;
  5. a GPU fault reported by a toposched agent drains the node in Slurm; an
     admin's drain and resume in toposched reach Slurm.

Usage: test_slurm_e2e.py TOPO_SCHEDULER PLUGIN_SO
Exit 77 (skip) only when Slurm is not installed.
"""

import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))

import slurm_cluster  # noqa: E402
from agent_client import AgentConnection  # noqa: E402
from agent_protocol import Protocol  # noqa: E402
from harness import Daemon, check, run  # noqa: E402
from slurm_cluster import running, SlurmCluster, ask  # noqa: E402


def toposched_nodes(daemon, topo_id):
    """The nodes of a toposched job, in rank order."""
    job = daemon.api("GET", "/v1/jobs/%d" % topo_id, expect=200)
    out = []
    for r in job["ranks"]:
        if r["node"] not in out:
            out.append(r["node"])
    return out, job


def wait_node(cluster, name, pred, timeout=15):
    deadline = time.time() + timeout
    node = {}
    while time.time() < deadline:
        node = slurm_cluster.parse_kv(cluster.run(["scontrol", "show", "node", "-o", name]).stdout)
        if pred(node):
            return node
        time.sleep(0.1)
    raise AssertionError("node %s did not get there in %ss: %s %s" % (name, timeout, node.get("State"),
                                                                      node.get("Reason")))


def topo_id_of(info):
    comment = info.get("AdminComment", "").strip()
    check(comment.startswith("toposched:"), "AdminComment is %r, not toposched:ID" % comment)
    return int(comment.split(":", 1)[1].split()[0])


def check_on_toposched_nodes(cluster, daemon, job_id, info):
    topo_id = topo_id_of(info)
    want, tjob = toposched_nodes(daemon, topo_id)
    check(tjob["state"] == "running", "toposched job %d is %s, not running" % (topo_id, tjob["state"]))
    req = cluster.expand(info["ReqNodeList"])
    got = cluster.expand(info["NodeList"])
    check(sorted(req) == sorted(want), "job %d: ReqNodeList %s, toposched chose %s" % (job_id, req, want))
    check(got == sorted(want), "job %d: NodeList %s, toposched chose %s" % (job_id, got, want))
    return want


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: test_slurm_e2e.py TOPO_SCHEDULER PLUGIN_SO")
    scheduler_bin, plugin = sys.argv[1], sys.argv[2]
    slurm_cluster.require(plugin)
    t0 = time.time()
    cluster = SlurmCluster(plugin_dir=os.path.dirname(os.path.abspath(plugin)), job_submit_plugins="topo")
    sock = cluster.path("topo.sock")
    slurm_cluster.write_plugin_conf(cluster, sock, timeout_ms=500)
    os.environ["SLURM_CONF"] = cluster.conf  # for the daemon's scontrol
    daemon = Daemon(scheduler_bin, config="\n".join([
        "agent_listen = 127.0.0.1:0",
        "slurm_socket = " + sock,
        "slurm_topology = " + cluster.path("topology.conf"),
        "slurm_poll_interval_ms = 300",
        "slurm_job_grace_s = 30",
        "stack = toposched",
    ]) + "\n")
    with running(daemon, cluster):
        cluster.start()
        print("cluster up in %.1f s" % (time.time() - t0))
        daemon.start()
        slurm_cluster.wait_socket(sock)
        check(ask(sock, {"op": "refresh"}, timeout=30).startswith("OK"), "the first sync did not finish")
        nodes = daemon.api("GET", "/v1/nodes", expect=200)
        up = sorted(n["name"] for n in nodes["nodes"] if n["state"] == "up") if isinstance(nodes, dict) else []
        check(up == [slurm_cluster.node_name(i) for i in range(1, 17)],
              "toposched should see exactly the 16 real nodes up, sees %s" % up[:20])

        # 1. Placed: Slurm runs it exactly where toposched chose.
        a, r = cluster.sbatch("-J", "placed", "-N", "4", "--comment", "topo: tp=8,pp=4", "--wrap", "sleep 300")
        check(a is not None, "sbatch failed: %s" % r.stderr)
        info = cluster.wait_job(a, {"RUNNING"})
        want_a = check_on_toposched_nodes(cluster, daemon, a, info)
        # scontrol's one-liner splits "AdminComment=toposched:ID ranks=..." in two.
        check(info.get("ranks", "").strip() == ",".join(want_a),
              "AdminComment ranks= is %r, not toposched's rank order %s" % (info.get("ranks"), want_a))
        print("placed: job %d on %s" % (a, ",".join(want_a)))

        # srun takes the same path.
        r = cluster.run(["srun", "-N", "2", "-J", "interactive", "--comment", "topo: tp=8", "hostname"], check=False)
        check(r.returncode == 0, "srun through the plugin failed: %s" % r.stderr)
        check(ask(sock, {"op": "refresh"}).startswith("OK"), "no sync after srun")

        # 2. Rejected, with the reason shown to the user.
        j, r = cluster.sbatch("-J", "toowide", "-N", "2", "--comment", "topo: tp=16", "--wrap", "true")
        check(j is None, "a tp=16 job on 8-GPU nodes was accepted as job %s" % j)
        check("toposched:" in r.stderr and "tp" in r.stderr, "the rejection does not say why: %r" % r.stderr)
        print("rejected: %s" % r.stderr.strip().splitlines()[0])
        j, r = cluster.sbatch("-J", "badkey", "-N", "2", "--comment", "topo: tpp=8", "--wrap", "true")
        check(j is None and "unknown layout key" in r.stderr and "tpp" in r.stderr,
              "a bad layout key was not rejected by name: %r" % r.stderr)
        j, r = cluster.sbatch("-J", "envbad", "-N", "2", "--wrap", "true",
                              env=dict(cluster.env, TOPO_LAYOUT="tp=3"))
        check(j is None and "TOPO_LAYOUT" not in r.stdout and "toposched:" in r.stderr,
              "TOPO_LAYOUT=tp=3 on 16 GPUs was not rejected: %r" % r.stderr)

        # 2b. Slurm's topology options: --switches=1 through the real plugin;
        #     --segment and --exclusive=topo (newer Slurm's sbatch) as the
        #     plugin built for those releases sends them.
        j, r = cluster.sbatch("-J", "oneleaf", "-N", "8", "--switches=1", "--wrap", "true")
        check(j is None and "--switches=1" in r.stderr and "leaf" in r.stderr,
              "an 8-node job under one 4-node leaf switch was not refused with the reason: %r" % r.stderr)
        print("switches: %s" % r.stderr.strip().splitlines()[0])
        base = {"op": "test", "uid": 0, "name": "opt", "comment": "topo: tp=8,pp=2", "min_nodes": 2,
                "max_nodes": 2, "batch": True, "array": False, "env": {}}
        a2 = ask(sock, dict(base, req_switch=1, wait4switch=60))
        check(a2.startswith("PLACE 0 "), "--switches=1 on 2 nodes: %r" % a2)
        leaves = {(int(n[3:]) - 1) // 4 for n in a2.split()[2].split(",")}
        check(len(leaves) == 1, "--switches=1 placed across leaves: %r" % a2)
        a2 = ask(sock, dict(base, segment=2))
        check(a2.startswith("REJECT") and "needs blocks" in a2, "--segment=2 without blocks: %r" % a2)
        a2 = ask(sock, dict(base, segment=3))
        check(a2.startswith("REJECT") and "does not divide" in a2, "--segment=3 on 2 nodes: %r" % a2)
        a2 = ask(sock, dict(base, exclusive_topo=True))
        check(a2.startswith("REJECT") and "--exclusive=topo" in a2, "--exclusive=topo: %r" % a2)
        print("topology options: --switches, --segment, --exclusive=topo mapped or refused with the reason")

        # 3. Held for capacity, then started on toposched's nodes.
        b, r = cluster.sbatch("-J", "filler", "-N", "12", "--wrap", "sleep 300")
        check(b is not None, "sbatch failed: %s" % r.stderr)
        check_on_toposched_nodes(cluster, daemon, b, cluster.wait_job(b, {"RUNNING"}))
        c, r = cluster.sbatch("-J", "waits", "-N", "4", "--comment", "topo: tp=8", "--wrap", "sleep 300")
        check(c is not None, "sbatch failed: %s" % r.stderr)
        check("held until capacity frees" in r.stderr, "the user was not told of the hold: %r" % r.stderr)
        info = cluster.show_job(c)
        check(info["JobState"] == "PENDING" and info["Priority"] == "0",
              "job %d should be held: %s %s" % (c, info["JobState"], info["Priority"]))
        time.sleep(1.0)
        check(cluster.show_job(c)["JobState"] == "PENDING", "the held job started before capacity freed")
        cluster.run(["scancel", str(a)])
        info = cluster.wait_job(c, {"RUNNING"}, timeout=30)
        want_c = check_on_toposched_nodes(cluster, daemon, c, info)
        check(cluster.expand(info["ReqNodeList"]) == want_c, "ReqNodeList %s is not in rank order %s"
              % (info["ReqNodeList"], want_c))
        check(info.get("ranks", "").strip() == ",".join(want_c) and info.get("map") and info.get("layout"),
              "the released job's AdminComment lacks its rank map: ranks=%r map=%r layout=%r"
              % (info.get("ranks"), info.get("map"), info.get("layout")))
        print("held job %d started on %s after job %d ended" % (c, ",".join(want_c), a))
        ta = topo_id_of(cluster.show_job(a))
        deadline = time.time() + 10
        while time.time() < deadline and daemon.api("GET", "/v1/jobs/%d" % ta)["state"] == "running":
            time.sleep(0.1)
        check(daemon.api("GET", "/v1/jobs/%d" % ta)["state"] != "running",
              "toposched still thinks job %d runs after scancel" % ta)
        cluster.run(["scancel", str(b), str(c)])

        # 4. Fail-open: topo-scheduler stopped, jobs still run.
        cluster.cancel_all()
        daemon.stop()
        t = time.time()
        d, r = cluster.sbatch("-J", "failopen", "-N", "3", "--wrap", "sleep 300")
        took = time.time() - t
        check(d is not None, "with topo-scheduler down, sbatch failed: %s" % r.stderr)
        check(took < 3, "sbatch took %.1f s with topo-scheduler down" % took)
        info = cluster.wait_job(d, {"RUNNING"})
        check("fail-open" in cluster.log_tail(chars=20000), "slurmctld's log does not say fail-open")
        foreign = cluster.expand(info["NodeList"])
        print("fail-open: job %d ran on %s in %.2f s" % (d, ",".join(foreign), took))
        # A socket that never answers: the plugin gives up after timeout_ms.
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.bind(sock)
        silent.listen(16)
        try:
            t = time.time()
            f, r = cluster.sbatch("-J", "silent", "-N", "1", "--wrap", "sleep 300")
            took = time.time() - t
        finally:
            silent.close()
            os.unlink(sock)
        check(f is not None, "with a silent topo-scheduler, sbatch failed: %s" % r.stderr)
        check(0.4 < took < 3, "sbatch took %.2f s against a silent socket (timeout_ms 500)" % took)
        check("no answer in time" in cluster.log_tail(chars=20000), "slurmctld's log does not say it timed out")
        foreign += cluster.expand(cluster.wait_job(f, {"RUNNING"})["NodeList"])
        print("fail-open: job %d ran after the plugin waited %.2f s for a silent socket" % (f, took))
        # Restarted, toposched sees those nodes taken and places around them.
        daemon.start()
        slurm_cluster.wait_socket(sock)
        check(ask(sock, {"op": "refresh"}, timeout=30).startswith("OK"), "no sync after the restart")
        e, r = cluster.sbatch("-J", "after", "-N", "12", "--wrap", "sleep 300")
        check(e is not None, "sbatch failed: %s" % r.stderr)
        want_e = check_on_toposched_nodes(cluster, daemon, e, cluster.wait_job(e, {"RUNNING"}))
        check(not set(want_e) & set(foreign), "toposched placed onto nodes Slurm gave job %d" % d)
        cluster.cancel_all()
        check(ask(sock, {"op": "refresh"}).startswith("OK"), "no sync after the jobs ended")

        # 5. Node health from a toposched agent beside slurmd drains the node
        #    in Slurm too; an admin's drain and resume in toposched follow.
        certs = cluster.path("agent-certs")
        subprocess.run([scheduler_bin, "--state-dir", daemon.state_dir, "ca", "issue", "--node", "gpu0016",
                        "--out", certs], check=True, capture_output=True)
        with open(os.path.join(daemon.state_dir, "agent-endpoint")) as f:
            agent_port = int(f.read().strip().rsplit(":", 1)[1].split("/")[0])
        agent = AgentConnection(agent_port, os.path.join(daemon.state_dir, "ca.pem"),
                                os.path.join(certs, "gpu0016.pem"), os.path.join(certs, "gpu0016-key.pem"))
        try:
            protocol = Protocol()
            gpus = [{"index": i, "model": "H100", "uuid": "GPU-%d" % i, "memory_mb": 81559}
                    for i in range(8)]
            agent.send(protocol.agent("register", node="gpu0016", addr="127.0.0.1", gpus=gpus,
                                      ranks=[], agent="test-agent", protocol=protocol.version))
            check(agent.recv()["type"] == "registered", "the agent did not register")
            agent.send(protocol.agent("gpu_event", gpu=3, kind="xid", code=79))
            node = wait_node(cluster, "gpu0016", lambda n: "DRAIN" in n["State"])
        finally:
            agent.close()
        check(node["Reason"].startswith("toposched:") and "XID 79" in node["Reason"],
              "Slurm's drain reason is %r" % node["Reason"])
        print("agent health: gpu0016 %s in Slurm: %s" % (node["State"], node["Reason"]))
        daemon.api("POST", "/v1/nodes/drain", {"nodes": "gpu0015", "reason": "bad cable"}, expect=200)
        wait_node(cluster, "gpu0015", lambda n: "DRAIN" in n["State"] and "bad cable" in n["Reason"])
        daemon.api("POST", "/v1/nodes/resume", {"nodes": "gpu0015"}, expect=200)
        wait_node(cluster, "gpu0015", lambda n: "DRAIN" not in n["State"])
        print("ok in %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    run(main)
