#!/usr/bin/python3
"""Idempotent submissions and several servers (issue 17's client side) against
a real daemon: a submission with a client_request_id that was made before is
answered with the job it made (200, "duplicate": true), nothing new logged;
per user; an array's repeat gets the same tasks; concurrent repeats make one
job; the key survives a kill -9 and restart (it is in the log and the store);
`topo submit --request-id` repeats print the same job; `topo --server A,B`
goes on to B when A does not answer.

usage: test_request_id.py TOPO_SCHEDULER_BIN TOPO_BIN
"""

import os
import sys
import tempfile
import threading

from harness import Cli, Daemon, check, run, serving, setup_tiny


def main():
    d = Daemon(sys.argv[1]).start()
    work = tempfile.mkdtemp(prefix="topo-request-id-")
    home = os.path.join(work, "home")
    os.makedirs(home)
    cli = Cli(d, sys.argv[2], home)
    topo, js = cli.run, cli.json

    def submit(key, token=None, expect=None, **fields):
        body = {"spec": {"gpus": 8}, "time_limit_s": 3600, "command": ["/bin/true"],
                "client_request_id": key}
        body.update(fields)
        status, answer = d.request("POST", "/v1/jobs", body, token or d.admin_token)
        if expect is not None:
            check(status == expect, "POST %s: %s %s (wanted %s)" % (key, status, answer, expect))
        return status, answer

    def all_jobs():
        return d.api("GET", "/v1/jobs?all=1&limit=1000", expect=200)["jobs"]

    with serving(d, work):
        setup_tiny(d)
        topo(["users", "create", "bob", "--tenant", "default", "--role", "user"])
        bob = js(["token", "create", "--user", "bob"])["token"]

        # A repeat answers with the first job, and logs nothing.
        _, first = submit("train-7f3a", expect=201)
        check("duplicate" not in first, "a first submission is not a duplicate: %s" % first)
        before = len(all_jobs())
        _, again = submit("train-7f3a", expect=200)
        check(again["id"] == first["id"] and again.get("duplicate") is True and
              again.get("state") in ("queued", "running"), "the repeat: %s" % again)
        check(len(all_jobs()) == before, "a repeat made a job")
        # A repeat with another body still names the first job: the key is
        # the submission's identity.
        _, other = submit("train-7f3a", expect=200, spec={"gpus": 16})
        check(other["id"] == first["id"], "another body under the same key: %s" % other)

        # Keys are per user: bob's same key is his own submission.
        _, bobs = submit("train-7f3a", token=bob, expect=201)
        check(bobs["id"] != first["id"], "bob's key is not the admin's: %s" % bobs)

        # An array: the repeat names the same tasks.
        _, arr = submit("sweep-1", expect=201, array="0-3")
        _, arr2 = submit("sweep-1", expect=200, array="0-3")
        check(arr2["ids"] == arr["ids"] and arr2["id"] == arr["id"] and arr2["duplicate"],
              "array repeat: %s vs %s" % (arr2, arr))

        # Bad keys are refused, naming the field.
        for bad in ("", "x" * 65, "a b", "a/b", "caf\u00e9", 17):
            status, e = submit(bad)
            check(status == 400 and e["error"].get("field") == "client_request_id",
                  "key %r: %s %s" % (bad, status, e))

        # Eight concurrent submissions with one key: one job, every answer names it.
        answers = []
        lock = threading.Lock()

        def send():
            status, a = submit("race-1")
            with lock:
                answers.append((status, a))

        threads = [threading.Thread(target=send) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ids = {a.get("id") for _, a in answers}
        made = [j for j in all_jobs() if j["id"] in ids]
        check(len(ids) == 1 and len(made) == 1 and sorted(s for s, _ in answers) == [200] * 7 + [201],
              "concurrent repeats: %s" % answers)

        # A crash and restart keep the keys (the log and the store hold them).
        d.kill9()
        d.start()
        _, after = submit("train-7f3a", expect=200)
        check(after["id"] == first["id"], "after a restart: %s" % after)
        _, arr3 = submit("sweep-1", expect=200, array="0-3")
        check(arr3["ids"] == arr["ids"], "array after a restart: %s" % arr3)

        # The CLI: --request-id repeats print the same job; without one each
        # submit is new.
        p1 = topo(["submit", "--gpus", "8", "--request-id", "nightly-2026-11-26", "--", "/bin/true"])
        p2 = topo(["submit", "--gpus", "8", "--request-id", "nightly-2026-11-26", "--", "/bin/true"])
        check(p1.stdout.split()[2] == p2.stdout.split()[2] and p1.stdout.startswith("Submitted job"),
              "CLI repeat: %r vs %r" % (p1.stdout, p2.stdout))
        dup = js(["submit", "--gpus", "8", "--request-id", "nightly-2026-11-26", "--", "/bin/true"])
        check(dup.get("duplicate") is True, "CLI --json repeat: %s" % dup)
        a = js(["submit", "--gpus", "8", "--", "/bin/true"])
        b = js(["submit", "--gpus", "8", "--", "/bin/true"])
        check(a["id"] != b["id"], "two plain submits are two jobs")
        bad = topo(["submit", "--gpus", "8", "--request-id", "a b", "--", "/bin/true"], expect=1)
        check("--request-id" in bad.stderr and "letters, digits" in bad.stderr, bad.stderr)
        dry = js(["submit", "--gpus", "8", "--dry-run", "--", "/bin/true"])
        check("client_request_id" not in dry, "a dry run shows no random key: %s" % dry)

        # Several servers: the first does not answer, the second does.
        env_server = "https://127.0.0.1:1," + d.url
        p = topo(["submit", "--gpus", "8", "--server", env_server, "--request-id", "ha-1",
                  "--", "/bin/true"])
        check(p.stdout.startswith("Submitted job") and "did not answer; trying" in p.stderr,
              "--server A,B: %r %r" % (p.stdout, p.stderr))
        q = topo(["queue", "--all", "--server", "https://127.0.0.1:1", "--server", d.url])
        check("ID" in q.stdout, "repeated --server: %r" % q.stdout)
        dead = topo(["queue", "--server", "https://127.0.0.1:1,https://127.0.0.1:2"], expect=7)
        check("127.0.0.1:2" in dead.stderr, dead.stderr)
        print("ok: repeats answer with the first job (per user, arrays, concurrent, after a "
              "crash), the CLI's --request-id, and --server A,B")


if __name__ == "__main__":
    run(main)
