#!/usr/bin/python3
"""A rank's output is bytes, end to end: a real topo-agent runs a rank (as a
Unix account the test makes) that prints NUL, ESC sequences, a bare CR and
bytes that are not UTF-8; the scheduler takes the agent's `logs` answer (no
refusal, no 10 s wait), GET /v1/jobs/ID/logs carries the bytes exactly in
data_base64, and `topo logs` writes them exactly when piped and escapes them
on a terminal (docs/cli.md, Logs).

usage: test_logs.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN
Standard library only (/usr/bin/python3). Needs root (useradd).
"""

import base64
import os
import pty
import select
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from harness import Daemon, Failure, check, run  # noqa: E402
from agents import Agent, agent_cluster, job, nodes, run_jobs_as, setup, wait_for  # noqa: E402

# What the rank prints (printf's octal escapes), and the bytes that makes.
SCRIPT = r"printf 'begin\000nul \033[2J\033[31mred\033[0m bare\rcr\r\nbad \377\376 ok \303\251\n'"
PRINTED = b"begin\x00nul \x1b[2J\x1b[31mred\x1b[0m bare\rcr\r\nbad \xff\xfe ok \xc3\xa9\n"


def topo(topo_bin, d, *args, tty=False):
    """`topo ARGS` as the admin: (exit code, stdout bytes, stderr)."""
    env = dict(os.environ, HOME=os.path.join(d.state_dir, "home"), TOPO_SERVER=d.url,
               TOPO_CA=os.path.join(d.state_dir, "ca.pem"), TOPO_TOKEN=d.admin_token)
    if not tty:
        p = subprocess.run([topo_bin] + list(args), env=env, capture_output=True, timeout=60)
        return p.returncode, p.stdout, p.stderr.decode(errors="replace")
    master, slave = pty.openpty()
    p = subprocess.Popen([topo_bin] + list(args), env=env, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    out = b""
    while select.select([master], [], [], 60)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO once the child closed its side
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    err = p.stderr.read().decode(errors="replace")
    p.wait(timeout=60)
    # The pty turns each "\n" into "\r\n" (onlcr): undo that, to see what topo wrote.
    return p.returncode, out.replace(b"\r\n", b"\n"), err


def main():
    if os.geteuid() != 0:
        raise Failure("run as root: the test creates a Unix account (useradd)")
    sched_bin, agent_bin, topo_bin = sys.argv[1:4]
    d = Daemon(sched_bin, config="heartbeat_interval_ms = 200\n").start()
    with agent_cluster(d, "topo-logs-test-") as c:
        work, agents = c
        certs = setup(d, work, ["n0"])
        run_jobs_as(d, c.account("logs"))
        agents["n0"] = Agent(agent_bin, d, work, "n0", certs["n0"][0], certs["n0"][1],
                             "false").start()
        wait_for(lambda: nodes(d)["n0"]["state"] == "up", 20, "n0 up")
        jid = d.api("POST", "/v1/jobs", {"spec": {"gpus": 1, "name": "bytes"},
                                         "command": ["/bin/sh", "-c", SCRIPT]}, expect=201)["id"]
        wait_for(lambda: job(d, jid)["state"] == "completed", 30, "the job to complete")

        status, piece = d.request("GET", "/v1/jobs/%d/logs" % jid, token=d.admin_token)
        check(status == 200, "GET logs of a rank that printed NUL: %s %s" % (status, piece))
        data = base64.b64decode(piece["data_base64"])
        check(data.endswith(PRINTED), "data_base64 holds the rank's bytes exactly: %r" % data[-200:])
        check(len(data) == piece["next_offset"] - piece["offset"], "data_base64 is the whole piece")

        rc, out, err = topo(topo_bin, d, "logs", str(jid))
        check(rc == 0 and out == data, "piped, topo logs writes the bytes: %s %r %r" % (rc, out, err))
        rc, out, err = topo(topo_bin, d, "logs", str(jid), "--tail", "2")
        check(rc == 0 and out == PRINTED,
              "--tail 2 gives the rank's two lines exactly: %s %r %r" % (rc, out, err))
        rc, shown, err = topo(topo_bin, d, "logs", str(jid), tty=True)
        check(rc == 0, "topo logs on a terminal: %s %r" % (rc, err))
        check(not any(b in shown for b in (b"\x00", b"\x1b", b"\xff", b"\xfe")),
              "no control byte or invalid UTF-8 reaches the terminal: %r" % shown[-200:])
        want = (b"begin\\x00nul \\x1b[2J\\x1b[31mred\\x1b[0m bare\\rcr\r\nbad \\xff\\xfe ok "
                b"\xc3\xa9\n")
        check(shown.endswith(want), "escaped, lines and UTF-8 kept: %r" % shown[-200:])
        print("ok: a rank's NUL, ESC, CR and invalid UTF-8 reach the API exactly and "
              "`topo logs` shows them safely")


if __name__ == "__main__":
    run(main)
