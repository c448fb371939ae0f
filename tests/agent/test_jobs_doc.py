#!/usr/bin/python3
"""Every example of docs/jobs.md, run as the page says: `topo submit FILE`
through real topo-agent processes, as an unprivileged account.

Each block marked `<!-- example: NAME -->` is written to NAME and checked:
  show-env.sh   16 ranks (tp 4, pp 2) on two 8-GPU nodes print what they got:
                the account, GROUP_RANK per node, LOCAL_RANK, the GPU
                CUDA_VISIBLE_DEVICES[LOCAL_RANK] (the one the scheduler gave),
                the Megatron coordinates, and the working directory (the job's
                TOPO_CHECKPOINT_DIR: the account has no home here);
  hello-ddp.py  4 PyTorch ranks all-reduce with gloo (only where /usr/bin/python3
                has torch; otherwise said and skipped);
  counter.sh    `topo checkpoint` stores its step; an immediate drain of its
                node restarts it elsewhere, where it resumes from that step.
A marked block without a check here fails the test.

usage: test_jobs_doc.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN
Standard library only (/usr/bin/python3); run as root.
"""

import json
import os
import pwd
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))
from harness import Daemon, Failure, check, run  # noqa: E402
from agents import Agent, agent_cluster, job, nodes, run_jobs_as, setup, wait_for  # noqa: E402

DOC = os.path.join(HERE, "..", "..", "docs", "jobs.md")


def examples():
    """{name: text} of the blocks marked <!-- example: NAME --> in docs/jobs.md."""
    with open(DOC) as f:
        text = f.read()
    found = re.findall(r"<!-- example: (\S+) -->\s*```\w*\n(.*?)```", text, re.S)
    check(found, "docs/jobs.md has marked examples")
    return dict(found)


class Cli:
    def __init__(self, d, topo_bin, work):
        self.env = dict(os.environ, HOME=os.path.join(work, "home"), TOPO_SERVER=d.url,
                        TOPO_CA=os.path.join(d.state_dir, "ca.pem"), TOPO_TOKEN=d.admin_token)
        self.bin = topo_bin

    def __call__(self, *args):
        p = subprocess.run([self.bin] + list(args), env=self.env, capture_output=True, text=True,
                           timeout=60)
        check(p.returncode == 0, "topo %s: %d %s %s" % (" ".join(args), p.returncode, p.stdout,
                                                         p.stderr))
        return p.stdout

    def logs(self, jid):
        """Rank 0's log; "" while its node says it has not started there yet
        (a restart's launch waits for its checkpoint to be copied there)."""
        p = subprocess.run([self.bin, "logs", str(jid)], env=self.env, capture_output=True,
                           text=True, timeout=60)
        if p.returncode != 0 and "has not started on this node yet" in p.stderr:
            return ""
        check(p.returncode == 0, "topo logs %d: %d %s %s" % (jid, p.returncode, p.stdout, p.stderr))
        return p.stdout


def submit(cli, path):
    return json.loads(cli("submit", path, "--json"))["id"]


def placement(d, jid):
    """{rank: (node, gpu)} of the job's last start, from the event log (a
    finished job's view lists no ranks)."""
    out = {}
    for e in d.api("GET", "/v1/events?job=%d&limit=1000" % jid, expect=200)["events"]:
        for c in e.get("commands", []):
            if c.get("type") in ("start_job", "restart_job") and c.get("id") == jid:
                out = {r: (slot[0], slot[1]) for r, slot in enumerate(c["ranks"])}
    check(out, "job %d's placement is in the event log" % jid)
    return out


def wait_done(d, jid, timeout):
    def done():
        v = job(d, jid)
        if v["state"] in ("failed", "cancelled", "rejected"):
            raise Failure("job %d ended %s: %s" % (jid, v["state"], v.get("reason")))
        return v["state"] == "completed"
    wait_for(done, timeout, "job %d to complete" % jid)


def run_show_env(d, cli, path, agents, account):
    jid = submit(cli, path)
    wait_done(d, jid, 60)
    placed = placement(d, jid)
    group_of = {}
    for rank in range(16):
        out = cli("logs", str(jid), "--rank", str(rank))
        m = re.search(r"rank (\d+) of 16 as (\S+): node (\d) of 2, local rank (\d) of 8 on GPU (\d+); "
                      r"tp (\d) pp (\d) dp (\d); master ([\d.]+):(\d+); in (\S+)", out)
        check(m, "rank %d printed its line:\n%s" % (rank, out))
        r, acct, grp, local, gpu, tp, pp, dp, _addr, _port, cwd = m.groups()
        node = placed[rank][0]
        check(int(r) == rank and acct == account, "rank %d ran as %s" % (rank, acct))
        check(int(gpu) == placed[rank][1], "rank %d: GPU %s, scheduled %s" % (rank, gpu, placed[rank]))
        check(int(local) == rank % 8 and int(grp) == rank // 8, "rank %d: node %s local %s"
              % (rank, grp, local))
        check((int(tp), int(dp), int(pp)) == (rank % 4, (rank // 4) % 2, rank // 8),
              "rank %d: Megatron coordinates tp %s dp %s pp %s" % (rank, tp, dp, pp))
        check(cwd == os.path.join(agents[node].state_dir, "checkpoints", str(jid)),
              "rank %d runs in its checkpoint dir (no home): %s" % (rank, cwd))
        group_of.setdefault(node, set()).add(int(grp))
    check(all(len(g) == 1 for g in group_of.values()) and len(set().union(*group_of.values())) == 2,
          "one GROUP_RANK per node: %s" % group_of)
    return "show-env: 16 ranks as documented"


def run_hello_ddp(d, cli, path, agents, account):
    if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode:
        return "hello-ddp: SKIPPED (no torch for /usr/bin/python3)"
    jid = submit(cli, path)
    wait_done(d, jid, 180)
    for rank in range(4):
        out = cli("logs", str(jid), "--rank", str(rank))
        check("rank %d of 4: all-reduce gave 4" % rank in out, "rank %d:\n%s" % (rank, out))
    return "hello-ddp: 4 PyTorch ranks all-reduced"


def run_counter(d, cli, path, agents, account):
    jid = submit(cli, path)
    wait_for(lambda: "starting at step 0 (restart 0)" in cli.logs(jid), 20,
             "the counter to start")
    first = job(d, jid)["ranks"][0]["node"]
    cli("checkpoint", str(jid))
    wait_for(lambda: job(d, jid)["checkpoint_step"] > 0, 20, "its checkpoint to be stored")
    step = job(d, jid)["checkpoint_step"]
    check("checkpoint step %d" % step in cli("logs", str(jid)), "the counter said so")
    cli("drain", first, "--mode", "immediate", "--reason", "docs example")
    wait_for(lambda: job(d, jid)["restarts"] == 1 and job(d, jid)["state"] == "running", 20,
             "the counter to restart off " + first)
    moved = job(d, jid)["ranks"][0]["node"]
    check(moved != first, "restarted on another node")
    wait_for(lambda: "starting at step %d (restart 1)" % step in cli.logs(jid), 20,
             "the counter to resume from step %d on %s" % (step, moved))
    cli("cancel", str(jid))
    cli("resume", first)
    return "counter: checkpointed step %d, resumed from it on %s" % (step, moved)


def main():
    if os.geteuid() != 0:
        raise Failure("run as root: the test creates a Unix account (useradd)")
    sched_bin, agent_bin, topo_bin = sys.argv[1:4]
    blocks = examples()
    checks = {"show-env.sh": run_show_env, "hello-ddp.py": run_hello_ddp, "counter.sh": run_counter}
    unknown = sorted(set(blocks) - set(checks))
    check(not unknown, "examples in docs/jobs.md without a check here: %s" % unknown)
    missing = sorted(set(checks) - set(blocks))
    check(not missing, "examples gone from docs/jobs.md: %s" % missing)
    d = Daemon(sched_bin, config="heartbeat_interval_ms = 200\n").start()
    with agent_cluster(d, "topo-jobs-doc-") as c:
        work, agents = c
        certs = setup(d, work, ["n0", "n1", "n2"])
        account = c.account("doc")
        run_jobs_as(d, account)
        for n in ("n0", "n1", "n2"):
            agents[n] = Agent(agent_bin, d, work, n, certs[n][0], certs[n][1], "false").start()
        wait_for(lambda: all(nodes(d)[n]["state"] == "up" for n in agents), 20, "n0..n2 up")
        ex = os.path.join(work, "examples")
        os.makedirs(ex)
        os.chmod(ex, 0o755)
        cli = Cli(d, topo_bin, work)
        done = []
        for name, text in blocks.items():
            path = os.path.join(ex, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
            done.append(checks[name](d, cli, path, agents, account))
        check(pwd.getpwnam(account), "the account existed throughout")
        print("ok: " + "; ".join(done))


if __name__ == "__main__":
    run(main)
