#!/usr/bin/python3
"""End to end through the CLI: a real topo-scheduler in a temp state dir, the
real `topo` binary over TLS on loopback. Tenants, users and quotas, a
topology, submissions three ways (flags, a #TOPO batch script, a JSON spec),
placement, listing, hold/release, cancel, drain/resume, events, token
revocation, a restart; and what each role may and may not do.

usage: test_e2e.py TOPO_SCHEDULER_BIN TOPO_BIN
"""

import json
import os
import re
import sys
import tempfile

from harness import Cli, Daemon, check, run, serving, tiny_topology

OK, NOT_FOUND, AUTH, CONFLICT, INVALID = 0, 4, 5, 6, 8


def main():
    d = Daemon(sys.argv[1]).start()
    topo_bin = sys.argv[2]
    work = tempfile.mkdtemp(prefix="topo-e2e-")
    home = os.path.join(work, "home")
    os.makedirs(home)

    cli = Cli(d, topo_bin, home)
    topo, js = cli.run, cli.json

    with serving(d, work):
        topo_file = os.path.join(work, "tiny.json")
        with open(topo_file, "w") as f:
            json.dump(tiny_topology(), f)
        # Before a topology exists, submissions are refused with the fix.
        p = topo(["submit", "--gpus", "8", "--", "python", "train.py"], expect=CONFLICT)
        check("topology import" in p.stderr, "no-topology message: " + p.stderr)
        topo(["topology", "import", topo_file])
        topo(["resume", "n[0-7]"])
        nodes = js(["nodes"])["nodes"]
        check(len(nodes) == 8 and all(n["state"] == "up" for n in nodes), "nodes up: %s" % nodes)

        # org/a's tenant-admin (carol) may map users to these accounts only.
        topo(["quota", "set", "org/a", "--guaranteed", "32", "--shares", "2",
              "--unix-accounts", "dave,dave2,frank"])
        topo(["quota", "set", "org/b", "--guaranteed", "16", "--max-job-gpus", "16"])
        topo(["users", "create", "alice", "--tenant", "org/a", "--role", "user"])
        topo(["users", "create", "bob", "--tenant", "org/b", "--role", "user"])
        topo(["users", "create", "carol", "--tenant", "org/a", "--role", "tenant-admin"])
        # Without --role a user gets the least privilege.
        topo(["users", "create", "erin", "--tenant", "org/b"])
        erin = [u for u in js(["users"])["users"] if u["name"] == "erin"]
        check(len(erin) == 1 and erin[0]["role"] == "user", "users create without --role: %s" % erin)
        alice = js(["token", "create", "--user", "alice"])["token"]
        bob = js(["token", "create", "--user", "bob"])["token"]
        carol = js(["token", "create", "--user", "carol"])["token"]
        who = js(["whoami"], alice)
        check(who["user"] == "alice" and who["tenant"] == "org/a" and who["role"] == "user", str(who))

        # Three ways to submit.
        j1 = js(["submit", "--gpus", "16", "--tp", "8", "--time", "1h", "--name", "flags", "--",
                 "python", "train.py"], alice)
        check(j1["state"] == "running", "16-GPU job should start: %s" % j1)
        check(js(["show", str(j1["id"])], alice)["command"] == ["python", "train.py"],
              "what follows -- is the command")
        # After --, a program is the command, never read as a batch script.
        dry = js(["submit", "--gpus", "8", "--dry-run", "--", "/bin/true", "--tp", "x"], alice)
        check(dry["command"] == ["/bin/true", "--tp", "x"] and dry["spec"]["parallelism"]["tp"] == 1,
              "-- /bin/true: %s" % dry)
        wrapped = js(["submit", "--gpus", "8", "--dry-run", "--wrap", "echo hi > out"], alice)
        check(wrapped["command"] == ["/bin/sh", "-c", "echo hi > out"], str(wrapped))
        # A job that can never fit (TP 16 needs an HBD of 16 GPUs; tiny has 8):
        # refused as infeasible, exit status 3, the reason says what to change.
        p = topo(["submit", "--gpus", "16", "--tp", "16", "--", "python", "train.py"], alice,
                 expect=3)
        check("never be placed" in p.stderr, p.stderr)
        # More GPUs than the cluster has is as infeasible (tiny has 64): exit 3.
        p = topo(["submit", "--gpus", "72", "--", "python", "train.py"], alice, expect=3)
        check("--gpus 72" in p.stderr and "more than the cluster has (64)" in p.stderr, p.stderr)
        # A job without a command is refused before anything is sent.
        none = topo(["submit", "--gpus", "8"], alice, expect=1)
        check("has no command" in none.stderr and "--wrap" in none.stderr, none.stderr)
        script = os.path.join(work, "train.sh")
        with open(script, "w") as f:
            f.write("#!/bin/bash\n#TOPO --gpus 8 --tp 8\n#TOPO --time 30m\n"
                    "#TOPO --launch node --env WANDB_MODE=offline\n"
                    "#TOPO --chdir /srv/run --output out-%j-%r.log\necho training\n")
        # (--env on the command line: a #TOPO line is part of the script's text,
        # which is the job's command.)
        j2 = js(["submit", script, "--env", "API_KEY=s3cr3t"], alice)
        spec = os.path.join(work, "job.json")
        with open(spec, "w") as f:
            json.dump({"gpus": 8, "name": "from-spec", "parallelism": {"tp": 4}}, f)
        j3 = js(["submit", "--spec", spec, "--wrap", "python train.py"], alice)
        shown = js(["show", str(j2["id"])], alice)
        check(shown["spec"]["gpus"] == 8 and shown["spec"]["parallelism"]["tp"] == 8, "#TOPO: %s" % shown["spec"])
        check(shown["name"] == "train.sh", "script names the job: %r" % shown["name"])
        check(shown["time_limit_s"] == 1800, "#TOPO --time 30m: %s" % shown["time_limit_s"])
        check(shown["command"][:2] == ["/bin/bash", "-c"] and "echo training" in shown["command"][2],
              "the script runs through its interpreter: %s" % shown["command"])
        # How the processes start: in --json with the values, in human output
        # the variables' names only (values may be secrets).
        check(shown["launch"] == "node" and shown["chdir"] == "/srv/run"
              and shown["env"] == {"WANDB_MODE": "offline", "API_KEY": "s3cr3t"}
              and shown["output"] == "out-%j-%r.log" and shown["error"] is None,
              "#TOPO --launch/--env/--chdir/--output: %s" % shown)
        human2 = topo(["show", str(j2["id"])], alice).stdout
        check("Launch:      node (one process per node)" in human2
              and "Env:         API_KEY, WANDB_MODE (names only" in human2
              and "s3cr3t" not in human2 and "Directory:   /srv/run" in human2
              and "Output:      out-%j-%r.log (in /srv/run)" in human2
              and "Error:       with the output" in human2, "human show of job 2: " + human2)
        s1 = js(["show", str(j1["id"])], alice)
        check(s1["launch"] == "rank" and s1["env"] == {} and s1["chdir"] is None
              and s1["output"] is None and s1["error"] is None, "the defaults: %s" % s1)
        check("Output:      the agent's log (topo logs %d)" % j1["id"]
              in topo(["show", str(j1["id"])], alice).stdout, "topo show of the defaults")
        check(len(s1["ranks"]) == 16 and s1["placement"]["nodes"] == 2, "placement of job 1: %s" % s1["placement"])
        check(s1["metrics"]["required_met"] is True, "constraints met")
        human = topo(["show", str(j1["id"])], alice).stdout
        # The predicted step on its placement (the step-time model), as topo place gives it.
        pr = s1["predicted"]
        check(pr is not None and pr["slowdown"] >= 1.0 and pr["step_s"] >= pr["ideal_step_s"] > 0
              and pr["breakdown"]["total_s"] == pr["step_s"], "predicted: %s" % pr)
        check("Predicted step" in human and "slowdown" in human, "human show: " + human[:800])
        # /metrics: the series for alice's running job, to her and not to bob.
        status, text = d.request("GET", "/metrics", token=alice)
        mine = 'toposched_job_predicted_slowdown{job="%d",tenant="org/a"}' % j1["id"]
        check(status == 200 and mine in text, "alice's /metrics lacks %s" % mine)
        status, text = d.request("GET", "/metrics", token=bob)
        check(status == 200 and mine not in text, "bob sees alice's job series")
        check("Placement" in human and "leaf" in human, "human show: " + human[:500])

        # bob cannot see or touch alice's jobs; he submits within his own quota.
        check(js(["queue"], bob)["jobs"] == [], "bob sees no jobs of org/a")
        topo(["show", str(j1["id"])], bob, expect=NOT_FOUND)
        topo(["cancel", str(j1["id"])], bob, expect=NOT_FOUND)
        topo(["submit", "--gpus", "8", "--tenant", "org/a", "--", "python", "train.py"], bob,
             expect=AUTH)
        big = js(["submit", "--gpus", "32", "--tp", "8", "--", "python", "train.py"], bob)
        check(big["state"] == "queued" and "quota" in big["reason"], "max_job_gpus holds: %s" % big)
        b1 = js(["submit", "--gpus", "8", "--", "python", "train.py"], bob)

        # alice sees exactly her tenant's jobs, all with id and state.
        mine = js(["queue", "--all"], alice)["jobs"]
        check(sorted(j["id"] for j in mine) == sorted([j1["id"], j2["id"], j3["id"]]), "alice's queue: %s" % mine)
        check(all("state" in j for j in mine), "every job has a state")
        everything = js(["queue", "--all"])["jobs"]
        check(len(everything) == 5, "admin sees all 5 jobs: %s" % [j["id"] for j in everything])

        # Roles: users may not set quotas, drain, create users; tenant-admins only in their scope.
        topo(["quota", "set", "org/a", "--guaranteed", "64"], alice, expect=AUTH)
        topo(["drain", "n0", "--reason", "x"], alice, expect=AUTH)
        topo(["users", "create", "eve", "--tenant", "org/a", "--role", "user"], alice, expect=AUTH)
        topo(["users", "create", "dave", "--tenant", "org/a", "--role", "user"], carol)
        topo(["users", "create", "erin", "--tenant", "org/b", "--role", "user"], carol, expect=AUTH)
        topo(["users", "create", "root2", "--tenant", "org/a", "--role", "cluster-admin"], carol, expect=AUTH)
        check(len(js(["queue", "--all"], carol)["jobs"]) == 3, "carol sees org/a's jobs")
        topo(["cancel", str(b1["id"])], carol, expect=NOT_FOUND)
        users = {u["name"] for u in js(["users"], carol)["users"]}
        check("alice" in users and "dave" in users and "bob" not in users, "carol's users: %s" % users)

        # Unix accounts: by default the user's name; an admin maps a user to
        # another account; a user mapped to root cannot submit.
        accounts = {u["name"]: u["unix_user"] for u in js(["users"])["users"]}
        check(accounts["alice"] == "alice" and accounts["admin"] == "admin", str(accounts))
        made = js(["users", "create", "frank@example.com", "--tenant", "org/a", "--role", "user",
                   "--unix-user", "frank"], carol)
        check(made["unix_user"] == "frank", str(made))
        check(js(["users", "set", "dave", "--unix-user", "dave2"], carol)["unix_user"] == "dave2",
              "users set")
        topo(["users", "set", "dave", "--unix-user", "x"], alice, expect=AUTH)
        out = topo(["users", "set", "dave", "--unix-user", "bob"], carol, expect=AUTH).stderr
        check("not granted to org/a" in out, "org/b's account is not carol's to map: %s" % out)
        out = topo(["users", "set", "dave", "--unix-user", "root"], carol, expect=AUTH).stderr
        check("root" in out and "allow_root_jobs" in out, "root is refused with the fix: %s" % out)
        topo(["users", "set", "dave", "--unix-user", "dave2"], carol)

        # hold / release / cancel.
        wait = js(["submit", "--gpus", "64", "--tp", "8", "--", "python", "train.py"], alice)
        check(wait["state"] == "queued", "64 GPUs must wait: %s" % wait)
        topo(["hold", str(wait["id"])], alice)
        check(js(["show", str(wait["id"])], alice)["state"] == "held", "held")
        topo(["release", str(wait["id"])], alice)
        check(js(["show", str(wait["id"])], alice)["state"] == "queued", "released")
        topo(["cancel", str(wait["id"]), "--reason", "not today"], alice)
        gone = js(["show", str(wait["id"])], alice)
        check(gone["state"] == "cancelled" and gone["reason"] == "not today", "cancelled: %s" % gone)
        topo(["cancel", str(wait["id"])], alice, expect=CONFLICT)

        # Limits of the job's cgroup on each node.
        lim = js(["submit", "--gpus", "8", "--mem-per-node", "64G", "--cpus-per-node", "12.5", "--",
                  "python", "train.py"], alice)
        shown = js(["show", str(lim["id"])], alice)["limits"]
        check(shown == {"memory_mb_per_node": 65536, "cpus_per_node": 12.5}, str(shown))
        topo(["cancel", str(lim["id"])], alice)
        bad = topo(["submit", "--gpus", "8", "--mem-per-node", "lots"], alice, expect=1)
        check("--mem-per-node" in bad.stderr, bad.stderr)

        # A filter that names no state is an error, not an empty table.
        p = topo(["nodes", "--state", "bogus"], expect=1)
        check("'bogus' is not a node state" in p.stderr and "drained" in p.stderr, p.stderr)
        p = topo(["queue", "--state", "running,sleeping"], alice, expect=1)
        check("'sleeping' is not a job state" in p.stderr, p.stderr)
        check(js(["nodes", "--state", "up,drained"])["nodes"], "a good filter still lists")

        # drain / resume with the admin.
        topo(["drain", "n7", "--reason", "bad cable"])
        n7 = js(["nodes", "n7"])
        # The admin's reason is kept with who drained it and when (UTC), as
        # Slurm's Reason=... [user@time], until the node is resumed.
        check(n7["state"] == "drained" and
              re.fullmatch(r"bad cable \[admin@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\]",
                           n7["reason"]), "drained: %s" % n7)
        check("bad cable [admin@" in topo(["nodes", "n7"]).stdout, "the table shows who")
        topo(["drain", "n99", "--reason", "x"], expect=INVALID)
        topo(["resume", "n7"])
        check(js(["nodes", "n7"])["state"] == "up", "resumed")

        # Events: the admin sees them all, alice only her jobs'.
        ev = js(["events", "--limit", "1000"])["events"]
        check(any(e["event"]["type"] == "node_state_requested" for e in ev), "admin sees node events")
        mine_ev = js(["events", "--limit", "1000"], alice)["events"]
        alice_ids = {j1["id"], j2["id"], j3["id"], wait["id"], lim["id"]}
        for e in mine_ev:
            ids = {e["event"].get("id")} | {c.get("id") for c in e["commands"]}
            check(ids & alice_ids, "alice sees an event not about her jobs: %s" % e)
        check(len(mine_ev) >= 4, "alice sees her jobs' events")

        # A researcher's job name can neither forge a row nor send escape
        # codes to an admin's terminal; --json keeps it exact.
        hostile = "x\n99  org/a     alice  forged  running\x1b[2J\u202e"
        hj = js(["submit", "--gpus", "8", "--name", hostile, "--", "python", "train.py"], bob)
        queue = topo(["queue", "--all"]).stdout
        check("\x1b" not in queue and "\u202e" not in queue, "raw escape codes in topo queue: %r" % queue)
        check(not any(l.startswith("99 ") for l in queue.splitlines()), "a forged row: %r" % queue)
        row = [l for l in queue.splitlines() if l.split()[:1] == [str(hj["id"])]]
        check(len(row) == 1 and "x\\n99  org/a" in row[0], "the name escaped in its own row: %r" % row)
        first = topo(["show", str(hj["id"])]).stdout.splitlines()[0]
        check(first == "Job %d: x\\n99  org/a     alice  forged  running\\x1b[2J\\u202e" % hj["id"],
              "topo show: %r" % first)
        check(js(["show", str(hj["id"])])["name"] == hostile, "--json keeps the name exact")
        topo(["cancel", str(hj["id"])], bob)

        # The CLI reads no more than a request can carry: --spec /dev/zero
        # (on the command line or a #TOPO line) and an oversized script fail
        # at once, naming the file, the limit and the fix.
        p = topo(["submit", "--spec", "/dev/zero"], bob, expect=1, timeout=20)
        check("/dev/zero" in p.stderr and "1 MiB" in p.stderr, "--spec /dev/zero: %s" % p.stderr)
        zero = os.path.join(work, "zero.sh")
        with open(zero, "w") as f:
            f.write("#!/bin/sh\n#TOPO --gpus 8 --spec /dev/zero\necho hi\n")
        p = topo(["submit", zero], bob, expect=1, timeout=20)
        check(zero + ":2: --spec /dev/zero" in p.stderr, "#TOPO --spec /dev/zero: %s" % p.stderr)
        p = topo(["submit", "--spec", "-"], bob, expect=1, stdin="{" * (2 << 20), timeout=20)
        check("<stdin>" in p.stderr and "1 MiB" in p.stderr, "--spec - too large: %s" % p.stderr)
        big = os.path.join(work, "big.sh")
        with open(big, "w") as f:
            f.write("#!/bin/sh\n#TOPO --gpus 8\n" + "# padding padding padding\n" * 6000 + "echo hi\n")
        p = topo(["submit", big], bob, expect=1, timeout=20)
        check(big in p.stderr and "131071 bytes" in p.stderr and "sh -c" in p.stderr,
              "a 150 KiB script: %s" % p.stderr)
        spec = os.path.join(work, "long-arg.json")
        with open(spec, "w") as f:
            json.dump({"spec": {"gpus": 8}, "command": ["python", "-c", "x" * 200000]}, f)
        p = topo(["submit", "--spec", spec], bob, expect=1)
        check(spec + ": command[2] is 195.3 KiB" in p.stderr and "E2BIG" in p.stderr,
              "a too-long argument: %s" % p.stderr)
        check(len(js(["queue", "--all"], bob)["jobs"]) == 3, "nothing was submitted")

        # Topology export from the server gives back what was imported.
        exported = json.loads(topo(["topology", "export"]).stdout)
        check(exported["name"] == "tiny" and len(exported["domains"]) == 2, "export: %s" % exported.keys())

        # token create --out writes the token to a file of mode 0600 that works.
        os.umask(0o022)
        tfile = os.path.join(work, "alice.token")
        made = js(["token", "create", "--user", "alice", "--out", tfile])
        check("token" not in made and made["out"] == tfile, str(made))
        check(os.stat(tfile).st_mode & 0o777 == 0o600, oct(os.stat(tfile).st_mode))
        with open(tfile) as f:
            check(js(["whoami"], f.read().strip())["user"] == "alice", "the written token works")
        link = os.path.join(work, "token-link")
        os.symlink(os.path.join(work, "elsewhere"), link)
        p = topo(["token", "create", "--out", link], expect=1)
        check("--out" in p.stderr and not os.path.exists(os.path.join(work, "elsewhere")), p.stderr)

        # Revoking a token locks it out at once.
        tokens = js(["token", "list", "--user", "alice"])["tokens"]
        for t in tokens:
            topo(["token", "revoke", t["id"]])
        topo(["queue"], alice, expect=AUTH)

        # A restart keeps every job, state and placement.
        before = js(["queue", "--all"])["jobs"]
        d.stop()
        d.start()
        after = js(["queue", "--all"])["jobs"]
        strip = lambda jobs: [(j["id"], j["state"], j["nodes"], j["tenant"]) for j in jobs]
        check(strip(before) == strip(after), "restart changed jobs:\n%s\n%s" % (strip(before), strip(after)))
        check(js(["show", str(j1["id"])])["ranks"] == s1["ranks"], "restart kept the placement")
        print("ok: %d jobs through the CLI, roles enforced, state kept across a restart" % len(after))


if __name__ == "__main__":
    run(main)
