#!/usr/bin/python3
"""Logs are bytes (docs/api.md, GET /v1/jobs/{id}/logs; docs/agent-protocol.md,
`logs`), against a real daemon and a protocol-speaking test agent on n0:

  bytes    the agent answers a logs request with NUL, ESC, CR and bytes that
           are not UTF-8 (data_base64): the API's answer carries them exactly
           in data_base64 (data: the text, U+FFFD for what is not UTF-8);
           `topo logs` writes them exactly to a pipe, escapes them on a
           terminal (a pty) and writes them raw there with --raw.
  refused  an answer the scheduler refuses (the old `data` text with a NUL,
           base64 that is not) answers the waiting request at once with 503
           naming what was refused, not 504 after the 10 s the daemon waits.

usage: test_logs.py TOPO_SCHEDULER_BIN TOPO_BIN
"""

import base64
import json
import os
import pty
import select
import subprocess
import sys
import tempfile
import threading

from harness import Daemon, Failure, check, run, serving, tiny_topology
from test_agents import CONFIG, Agent, issue

LOG = b"step 1\x00nul \x1b[31mred\x1b[0m\r\nnot utf-8: \xff\xfe; ok \xc3\xa9\rover\n"


def serve_logs(agent, reply_for):
    """Answers the next `logs` request with reply_for(request) (a dict or raw
    text); returns the request."""
    while True:
        m = agent.recv(timeout=20)
        if m["type"] == "logs":
            agent.send(reply_for(m))
            return m


def good_reply(m, data=LOG):
    return {"type": "logs", "req": m["req"], "offset": 0, "next_offset": len(data),
            "size": len(data), "data_base64": base64.b64encode(data).decode()}


def api_in_thread(d, path):
    out = {}
    t = threading.Thread(target=lambda: out.update(r=d.request("GET", path, token=d.admin_token,
                                                               timeout=60)))
    t.start()
    return t, out


def topo_env(d, home):
    return dict(os.environ, HOME=home, TOPO_SERVER=d.url, TOPO_CA=os.path.join(d.state_dir, "ca.pem"),
                TOPO_TOKEN=d.admin_token)


def cli_with_agent(topo, d, home, agent, args, tty):
    """Runs `topo ARGS` while the agent answers its logs request; returns
    (exit code, stdout bytes)."""
    if tty:
        master, slave = pty.openpty()
        p = subprocess.Popen([topo] + args, env=topo_env(d, home), stdout=slave,
                             stderr=subprocess.PIPE)
        os.close(slave)
    else:
        p = subprocess.Popen([topo] + args, env=topo_env(d, home), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    serve_logs(agent, good_reply)
    if not tty:
        out, err = p.communicate(timeout=30)
        return p.returncode, out, err
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    err = p.stderr.read()
    p.wait(timeout=30)
    return p.returncode, out, err


def main():
    binary, topo = sys.argv[1], sys.argv[2]
    d = Daemon(binary, config=CONFIG).start()
    work = tempfile.mkdtemp(prefix="topo-logs-")
    home = os.path.join(work, "home")
    os.makedirs(home)
    with serving(d, work):
        d.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(tiny_topology())},
              expect=200)
        cert = issue(binary, d.state_dir, "n0", work)
        agent = Agent(d.agent_port(), os.path.join(d.state_dir, "ca.pem"), cert, "n0", beat=True)
        try:
            jid = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8}, "command": ["true"]},
                        expect=201)["id"]
            check(d.api("GET", "/v1/jobs/%d" % jid, expect=200)["state"] == "running",
                  "the job runs on n0")
            path = "/v1/jobs/%d/logs" % jid

            # ---- bytes, through the API
            t, out = api_in_thread(d, path)
            serve_logs(agent, good_reply)
            t.join(60)
            status, body = out["r"]
            check(status == 200, "logs: %s %s" % (status, body))
            check(base64.b64decode(body["data_base64"]) == LOG,
                  "data_base64 carries the bytes exactly: %r" % body.get("data_base64"))
            check("\x00nul \x1b[31m" in body["data"] and "\ufffd\ufffd" in body["data"],
                  "data is the text, U+FFFD for what is not UTF-8: %r" % body.get("data"))

            # ---- bytes, through `topo logs`
            rc, raw_out, err = cli_with_agent(topo, d, home, agent, ["logs", str(jid)], tty=False)
            check(rc == 0 and raw_out == LOG, "piped, topo logs writes the bytes exactly: %s %r %r"
                  % (rc, raw_out, err))
            rc, shown, err = cli_with_agent(topo, d, home, agent, ["logs", str(jid)], tty=True)
            # The pty turns each "\n" into "\r\n" (onlcr): undo that, to see what topo wrote.
            shown = shown.replace(b"\r\n", b"\n")
            check(rc == 0 and b"\x1b" not in shown and b"\x00" not in shown and b"\xff" not in shown,
                  "on a terminal no control byte or invalid UTF-8 gets through: %r" % shown)
            # A CR that ends a line stays (written "\r\n", seen "\r\r\n"); one that
            # does not is escaped.
            check(b"step 1\\x00nul \\x1b[31mred\\x1b[0m\r\nnot utf-8: \\xff\\xfe; ok \xc3\xa9\\rover\n"
                  == shown, "on a terminal they are escaped, lines and UTF-8 kept: %r" % shown)
            rc, raw_tty, err = cli_with_agent(topo, d, home, agent, ["logs", str(jid), "--raw"],
                                              tty=True)
            check(rc == 0 and b"\x1b[31mred" in raw_tty and b"\x00" in raw_tty,
                  "--raw writes them as they are on a terminal too: %r" % raw_tty)

            # ---- refused answers reach the waiting request at once
            for what, reply, names in (
                    ("the old data text with a NUL",
                     lambda m: json.dumps({"type": "logs", "req": m["req"], "offset": 0,
                                           "next_offset": 2, "size": 2, "data": "a\u0000"}),
                     "logs.data"),
                    ("base64 that is not",
                     lambda m: dict(good_reply(m), data_base64="!!!!"), "logs.data_base64")):
                t, out = api_in_thread(d, path)
                serve_logs(agent, reply)
                t.join(60)
                status, body = out["r"]
                message = body["error"]["message"] if isinstance(body, dict) else str(body)
                check(status == 503 and "refused" in message and names in message,
                      "%s: the request gets the refusal (503 naming %s), not a timeout: %s %s"
                      % (what, names, status, message))
            # The daemon goes on answering the next request from the agent.
            t, out = api_in_thread(d, path)
            serve_logs(agent, good_reply)
            t.join(60)
            check(out["r"][0] == 200, "a good answer after the refused ones: %s" % (out["r"],))
        finally:
            agent.close()
        print("ok: log bytes (NUL, ESC, CR, invalid UTF-8) carried exactly, shown safely on a "
              "terminal, and a refused agent answer reaches the request at once")


if __name__ == "__main__":
    run(main)
