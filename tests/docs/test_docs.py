#!/usr/bin/python3
"""The docs are tested: every example command of docs/cli.md and README.md,
and every row of the exit-status table, against a real topo-scheduler.

The commands are read from the docs, never copied here, so a changed example
is tested as it now reads. The conventions (also at the top of docs/cli.md):

  - In a fenced code block, a line that runs `topo` (or `./build/cli/topo`)
    is an example: at the start of the line, after `$ `, after a pipe or in
    `$(...)`. A line ending in `\\` or `|` goes on on the next line. Each runs
    through `bash -o pipefail -c` (so `topo ... | jq` fails when topo does)
    with `topo` first on PATH, in a scratch directory. Other lines (README's
    `make demo`, `make test`) are not examples.
  - `$ COMMAND` followed by lines: those lines are its output (stdout and
    stderr together), compared exactly after NORMALISE (and with the daemon's
    address read as DEFAULT_URL). Output shown any other way fails the test
    (unshown_outputs): no illustration escapes the comparison.
  - A trailing `# exit N` says the example fails with status N; otherwise it
    must exit 0. A trailing comment holding `not run: REASON` skips it (the
    reason shows in the summary); SKIP below skips by command text, for what no doc line
    should be cluttered with.
  - A command with `--follow` runs for FOLLOW_S seconds, then is interrupted;
    it passes when it had not exited with an error by then.
  - Each code block starts from a copy of one prepared daemon state (the
    example cluster, EXAMPLE_CLUSTER below): `topo` finds the daemon as the
    README promises, through its default state directory
    (~/.local/share/toposched, HOME being the scratch directory). A block that
    imports a topology starts from a daemon without one, since an import
    needs a cluster without jobs; README.md's block, which imports one, too.
  - The exit-status table of docs/cli.md: each code is provoked (PROVOKE)
    and the set of codes must equal the table's.
  - Files the examples name come from the docs where they show them
    (train.sh: the #TOPO batch script) or are written here (FILES).

usage: test_docs.py TOPO_SCHEDULER TOPO TOPO_AGENT [--only PATTERN]
Standard library only (/usr/bin/python3).
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "daemon"))
import harness  # noqa: E402
from harness import Failure, check  # noqa: E402

DOCS = ["docs/cli.md", "README.md"]

# Examples that cannot run here, by their command text (without a trailing
# comment); a key ending in a space skips every command it starts. Keep this
# short: a doc line may say `# not run: REASON` instead.
SKIP = {
    # A rank's log is served by the agent of the node that ran it, and the
    # example cluster has no agents running jobs (tests/agent/test_agent.py
    # reads logs through real topo-agent processes; the exit-code check here
    # asks for one and gets the documented 9).
    "topo logs ": "needs an agent running job 17's ranks",
    # Token ids are random: no doc can name a real one (tests/daemon/test_e2e.py
    # revokes tokens).
    "topo token revoke 0a1b2c3d": "a token id is random",
}

# The only differences allowed between a shown output and the real one:
# each pattern is replaced by its placeholder on both sides.
NORMALISE = [
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"), "<time>"),  # a local date and time
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"), "<utc time>"),  # a drain's stamp
    (re.compile(r"(?<![\d:])\d+:\d\d(:\d\d)?(?![\d:])"), "<run time>"),  # M:SS, H:MM:SS, HH:MM
]
# The example daemon listens on a port it picks (--listen 127.0.0.1:0); in a
# real output its address reads as the default one, which the docs show. Only
# that one address: any other in an output is compared as it is.
DEFAULT_URL = "https://127.0.0.1:8443"
# The examples run at about noon local time: a time that is today shows
# without its date (`topo queue --start`'s `~14:05 (est.)`), so a run close
# to midnight would show dates where the docs show none. POSIX TZ: "DOC-9"
# is UTC+9.
LOCAL_TZ = "DOC%+d" % (time.gmtime().tm_hour - 12)

# bash, not dash: `topo ... | jq` must fail when topo does (pipefail).
SHELL = ["/bin/bash", "-o", "pipefail", "-c"]
FOLLOW_S = 2.0
COMMAND_TIMEOUT_S = 120

# The example cluster every cli.md block starts from: node names, tenants,
# users and jobs the examples name. 2 spines x 4 leaves x 8 racks x 8 nodes of
# 8 GPUs (gpu0001-gpu0512, 4096 GPUs); the HBD is a rack of 64 GPUs.
EXAMPLE_CLUSTER = """\
nodes   gpu0001-gpu0512 (racks of 8 nodes as HBDs), up but gpu0007
tenants org, org/team
users   ada (org/team), bob (org)
gpus    gpu0007's GPU 2 failed (XID 79, from a simulated agent, gone since),
        which keeps gpu0007 drained
jobs    1-14 ada's, cancelled; 15 bob's, completed, and 16 bob's, failed
        (exit status 3), both 8 GPUs on gpu0001, run by a simulated agent;
        17 ada's, 64 GPUs, running; 18 ada's, 4096 GPUs, queued
env     HF_HOME and WANDB_PROJECT set (the --export example names them)
"""


def example_topology():
    domains, n = [], 0
    for s in range(2):
        leaves = []
        for l in range(4):
            racks = []
            for r in range(8):
                nodes = ["gpu%04d" % (n + i + 1) for i in range(8)]
                n += 8
                racks.append({"name": "rack%02d" % (8 * (4 * s + l) + r), "nodes": nodes})
            leaves.append({"name": "leaf%d" % (4 * s + l), "children": racks})
        domains.append({"name": "spine%d" % s, "children": leaves})
    return {"version": 1, "name": "example", "tiers": ["node", "rack", "leaf", "spine"],
            "hbd": "rack", "gpus_per_node": 8, "gpu_model": "H100", "domains": domains}


# Files the examples name that no doc shows.
FILES = {
    # A batch script over the 131071-byte limit: 150,000 bytes.
    "big.sh": "#!/bin/sh\n" + "#" * (150000 - len("#!/bin/sh\n")),
    "job.json": json.dumps({"spec": {"gpus": 8, "parallelism": {"tp": 8}},
                            "command": ["python", "eval.py"]}),
    "topology.json": json.dumps(example_topology(), indent=1),
}
# Written by the real `topo` offline (command -> file).
GENERATED = {
    "topology.conf": ["topology", "export", "--generate", "tiny", "--format", "slurm"],
}


# ---------------------------------------------------------------- the docs

class Example:
    def __init__(self, doc, line, text, block):
        self.doc, self.line, self.block = doc, line, block
        self.shown = None  # the output lines after `$ `, or None
        self.expect = 0
        self.skip = None
        code, comment = split_comment(text)
        self.text = text
        self.command = code.strip()
        if comment:
            m = re.match(r"exit (\d+)\b", comment)
            if m:
                self.expect = int(m.group(1))
            if "not run:" in comment:  # "# not run: why" or "# ... (not run: why)"
                self.skip = comment.split("not run:", 1)[1].strip()
                if "(not run:" in comment:
                    self.skip = self.skip.rstrip(")")
        for key, reason in SKIP.items():
            if self.command == key or (key.endswith(" ") and self.command.startswith(key)):
                self.skip = reason

    def where(self):
        return "%s:%d" % (self.doc, self.line)


def split_comment(text):
    """(code, comment) of a shell line: the comment is the text after the last
    unquoted `#` that starts a word, on the last physical line."""
    last = text.split("\n")[-1]
    quote, prev = None, " "
    for i, c in enumerate(last):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and prev in " \t":
            head = text[:len(text) - len(last) + i]
            return head.rstrip(), last[i + 1:].strip()
        prev = c
    return text, ""


def fenced_blocks(path, text=None):
    """(first line number, info string, lines) of each fenced code block of
    the doc `path` (or of `text`, read as that doc)."""
    if text is None:
        with open(os.path.join(ROOT, path)) as f:
            text = f.read()
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^(```+)(.*)$", lines[i])
        if m:
            fence, info, start, body = m.group(1), m.group(2).strip(), i + 2, []
            i += 1
            while i < len(lines) and not lines[i].startswith(fence):
                body.append(lines[i])
                i += 1
            out.append((start, info, body))
        i += 1
    return out


RUNS_TOPO = re.compile(r"(^|[|;&]|\$\()\s*(\./build/cli/)?topo\s")


def examples_of(path):
    """The examples of one doc, by block: [(block line, [Example])]."""
    blocks = []
    for start, info, body in fenced_blocks(path):
        if info not in ("", "sh", "bash", "console", "shell"):
            continue
        found, i = [], 0
        while i < len(body):
            line, at = body[i], start + i
            dollar = line.startswith("$ ")
            text = line[2:] if dollar else line
            while (text.endswith("\\") or text.rstrip().endswith("|")) and i + 1 < len(body):
                i += 1
                text += "\n" + body[i]
            i += 1
            code = split_comment(text)[0].strip()
            if not RUNS_TOPO.search(code):
                continue
            e = Example(path, at, text, start)
            if dollar:
                e.shown = []
                while i < len(body) and not body[i].startswith("$ "):
                    e.shown.append(body[i])
                    i += 1
            found.append(e)
        if found:
            blocks.append((start, found))
    return blocks


# What only a command prints: a table's header (three or more upper-case
# column names apart by two or more spaces, as `ID  USER  TENANT ...`), an
# error or a note of `topo`, the first line of a submission or a report.
OUTPUT_LOOKING = re.compile(r"^\s*([A-Z][A-Z0-9()./-]*(\s{2,}|\s*$)){3,}$"
                            r"|^topo: |^Submitted (array )?job |^Usage by ")


def unshown_outputs(path, text=None):
    """Where the doc shows output that no `$ COMMAND` produced, so that no test
    compares it: [(line, why)]. A line that looks like output (OUTPUT_LOOKING)
    must follow a `$ ` line in its block (the lines after a `$ COMMAND` are its
    output); and in docs/cli.md, a block without an info string is a
    transcript: it holds a `$ ` line (files and scripts say what they are:
    ```ini, ```bash, ```sh)."""
    found = []
    for start, info, body in fenced_blocks(path, text):
        under_dollar = False
        for at, line in enumerate(body, start):
            if line.startswith("$ "):
                under_dollar = True
            elif not under_dollar and OUTPUT_LOOKING.search(line):
                found.append((at, "looks like a command's output but follows no `$ COMMAND` "
                                  "line: %r" % line[:80]))
        if (path == "docs/cli.md" and info == "" and body
                and not any(l.startswith("$ ") for l in body)):
            found.append((start, "a block without an info string and without a `$ COMMAND` "
                                 "line (an illustration no test runs)"))
    return found


def check_unshown_outputs():
    """Failures for the docs' outputs that no test compares: each must be the
    real output of a `$ COMMAND` from the example cluster."""
    # The check itself, on an illustration and on a transcript.
    sample = "```\nID  USER  STATE\n17  ada   running\n```\n\n```\n$ topo queue\nID  USER  STATE\n```\n"
    check([at for at, _ in unshown_outputs("docs/cli.md", sample)] == [2, 2],
          "unshown_outputs does not find the sample's illustration: %s"
          % unshown_outputs("docs/cli.md", sample))
    return ["%s:%d: %s: show it as `$ COMMAND` and the output the example cluster gives "
            "(see the conventions at the top of docs/cli.md)" % (doc, at, why)
            for doc in DOCS for at, why in unshown_outputs(doc)]


def batch_script_from_docs():
    """train.sh: the #TOPO batch script docs/cli.md shows."""
    for _, info, body in fenced_blocks("docs/cli.md"):
        if body and body[0].startswith("#!") and any(l.startswith("#TOPO") for l in body):
            return "\n".join(body) + "\n"
    raise Failure("docs/cli.md shows no #TOPO batch script (a block starting with #! and "
                  "holding #TOPO lines) for the examples' train.sh")


def exit_table():
    """{code: meaning} of docs/cli.md's "## Exit status" table."""
    with open(os.path.join(ROOT, "docs/cli.md")) as f:
        text = f.read()
    m = re.search(r"^## Exit status\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    check(m is not None, "docs/cli.md has no '## Exit status' section")
    rows = {}
    for line in m.group(1).split("\n"):
        r = re.match(r"^\|\s*(\d+)\s*\|\s*(.*?)\s*\|$", line)
        if r:
            rows[int(r.group(1))] = r.group(2)
    check(rows, "no rows in docs/cli.md's exit status table")
    return rows


def normalise(text):
    for pattern, placeholder in NORMALISE:
        text = pattern.sub(placeholder, text)
    return "\n".join(l.rstrip() for l in text.rstrip("\n").split("\n"))


# ---------------------------------------------------------------- the daemon

class Scratch:
    """A scratch directory with HOME in it, `topo` on PATH, the files the
    examples name, and a daemon whose state is the default state directory
    HOME/.local/share/toposched."""

    def __init__(self, scheduler, topo, template=None):
        self.dir = tempfile.mkdtemp(prefix="topo-doctest-")
        self.home = os.path.join(self.dir, "home")
        self.work = os.path.join(self.home, "work")
        self.bin = os.path.join(self.dir, "bin")
        state = os.path.join(self.home, ".local", "share", "toposched")
        os.makedirs(self.work)
        os.makedirs(self.bin)
        os.symlink(topo, os.path.join(self.bin, "topo"))
        # README's commands run from a checkout after `make build`.
        os.makedirs(os.path.join(self.work, "build", "cli"))
        os.symlink(topo, os.path.join(self.work, "build", "cli", "topo"))
        for d in ("tests", "packaging"):
            os.symlink(os.path.join(ROOT, d), os.path.join(self.work, d))
        shared = os.environ.get("TOPO_SHARED_DIR") or os.path.join(ROOT, "..", "shared")
        os.symlink(os.path.abspath(shared), os.path.join(self.home, "shared"))
        for name, content in FILES.items():
            with open(os.path.join(self.work, name), "w") as f:
                f.write(content)
        # The certificate of a CA that did not sign the daemon's.
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-keyout", "/dev/null",
                        "-subj", "/CN=other CA", "-days", "1",
                        "-out", os.path.join(self.work, "other-ca.pem")],
                       check=True, capture_output=True)
        for name, args in GENERATED.items():
            with open(os.path.join(self.work, name), "w") as f:
                subprocess.run([topo] + args, stdout=f, check=True)
        with open(os.path.join(self.work, "train.sh"), "w") as f:
            f.write(batch_script_from_docs())
        if template:
            shutil.copytree(template, state)
        else:
            os.makedirs(state)
        self.daemon = harness.Daemon(scheduler, state_dir=state,
                                     config="rate_limit_per_second = 100000\n")
        self.daemon.start()

    def env(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TOPO_", "XDG_"))}
        env.update(HOME=self.home, PATH=self.bin + ":" + env.get("PATH", "/usr/bin:/bin"),
                   TOPO_SHARED_DIR=os.path.join(self.home, "shared"),
                   HF_HOME=os.path.join(self.home, "hf"), WANDB_PROJECT="llama", TZ=LOCAL_TZ)
        return env

    def run(self, command, stdin=None):
        """(status, stdout, stderr) of a shell command in the work directory."""
        p = subprocess.run(SHELL + [command], cwd=self.work, env=self.env(),
                           input=stdin, capture_output=True, text=True,
                           timeout=COMMAND_TIMEOUT_S)
        return p.returncode, p.stdout, p.stderr

    def run_merged(self, command):
        p = subprocess.run(SHELL + ["exec 2>&1; " + command], cwd=self.work, env=self.env(),
                           stdout=subprocess.PIPE, text=True, timeout=COMMAND_TIMEOUT_S)
        return p.returncode, p.stdout

    def run_follow(self, command):
        """A --follow command for FOLLOW_S: (exited status or None, output)."""
        p = subprocess.Popen(SHELL + [command], cwd=self.work, env=self.env(),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        try:
            out, _ = p.communicate(timeout=FOLLOW_S)
            return p.returncode, out
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGINT)
            try:
                out, _ = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                out, _ = p.communicate()
            return None, out

    def api(self, method, path, body=None, token=None):
        """The answer of a request that must succeed (2xx)."""
        status, out = self.daemon.request(method, path, body, token or self.daemon.admin_token)
        check(200 <= status < 300, "%s %s: %s %s" % (method, path, status, out))
        return out

    def close(self):
        try:
            self.daemon.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class SimAgents:
    """`topo-agent --simulate` for the named nodes, registered with the daemon
    of Scratch `s` and driven through its stdin (docs: topo-agent --help);
    its stdout is JSON lines, one per event."""

    def __init__(self, s, agent, nodes):
        names = os.path.join(s.dir, "sim-nodes-" + nodes[0])
        with open(names, "w") as f:
            f.write("\n".join(nodes) + "\n")
        self.log = open(os.path.join(s.dir, "sim.log"), "a+")
        self.proc = subprocess.Popen(
            [agent, "--simulate", str(len(nodes)), "--simulate-nodes", names,
             "--scheduler-state-dir", s.daemon.state_dir, "--stats-every-s", "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        for _ in nodes:
            self.until("up")

    def until(self, event, **fields):
        """The simulator's next event `event` with these fields."""
        for line in self.proc.stdout:
            self.log.write(line)
            e = json.loads(line)
            if e.get("ev") == event and all(e.get(k) == v for k, v in fields.items()):
                return e
        raise Failure("the simulator ended before its %r event %s" % (event, fields))

    def command(self, line):
        """Sends a control command; fails unless the simulator accepts it."""
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        ack = self.until("ack", cmd=line)
        check("error" not in ack, "the simulator refused %r: %s" % (line, ack))

    def close(self, failed):
        if failed:
            self.log.seek(0)
            print(self.log.read()[-3000:], file=sys.stderr)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def fail_gpu(sim, s, node, gpu):
    """Makes `node`'s GPU fail with an XID 79 through its simulated agent."""
    sim.command("xid %s %d 79" % (node, gpu))
    wait_for(lambda: node_view(s, node)["gpu_health"][gpu] == "failed", 10,
             "%s GPU %d to fail" % (node, gpu))


def run_ended_jobs(sim, s, token):
    """Jobs 15 (completed: every rank exits 0) and 16 (failed: rank 0 exits
    3) as the owner of `token`, on gpu0001, which `sim` runs."""
    def run(job_id, exits, state):
        j = s.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "eval"},
                                       "command": ["python", "eval.py"]}, token=token)
        check(j["id"] == job_id and j["state"] == "running", "job %d: %s" % (job_id, j))
        sim.until("start", job=job_id, node="gpu0001")
        for rank, code in exits:
            sim.command("exit gpu0001 %d %d %d" % (job_id, rank, code))
        wait_for(lambda: s.api("GET", "/v1/jobs/%d" % job_id)["state"] == state, 10,
                 "job %d to be %s" % (job_id, state))

    run(15, [(r, 0) for r in range(8)], "completed")
    # The first application failure ends the job (not 10 restarts later).
    s.api("PUT", "/v1/config/max_app_failures", {"value": 1})
    run(16, [(0, 3)], "failed")
    s.api("PUT", "/v1/config/max_app_failures", {"value": 10})


def node_view(s, name):
    return next(n for n in s.api("GET", "/v1/nodes")["nodes"] if n["name"] == name)


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise Failure("timed out after %s s waiting for %s" % (timeout, what))


def prepare_example_cluster(scheduler, topo, agent, into):
    """Builds the example cluster's daemon state in `into` (a stopped daemon).

    The simulated agents of gpu0007 and gpu0001 stay connected until the
    daemon has stopped: an agent that leaves makes its node suspect, then
    down 2 s later (docs/agent-protocol.md), which would change the example
    cluster depending on how long the setup took."""
    s, sims, ok = Scratch(scheduler, topo), [], False
    try:
        s.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(example_topology())})
        s.api("POST", "/v1/nodes/resume", {"nodes": "gpu[0001-0512]"})
        sims.append(SimAgents(s, agent, ["gpu0007"]))
        fail_gpu(sims[-1], s, "gpu0007", 2)
        for tenant in ("org", "org/team"):
            s.api("PUT", "/v1/tenants/" + tenant, {})
        for user, tenant in (("ada", "org/team"), ("bob", "org")):
            s.api("POST", "/v1/users", {"name": user, "tenant": tenant, "role": "user"})
        ada = s.api("POST", "/v1/tokens", {"user": "ada"})["token"]
        bob = s.api("POST", "/v1/tokens", {"user": "bob"})["token"]
        for _ in range(14):
            j = s.api("POST", "/v1/jobs", {"spec": {"gpus": 8}, "command": ["/bin/true"]},
                      token=ada)
            s.api("POST", "/v1/jobs/%d/cancel" % j["id"], {})
        sims.append(SimAgents(s, agent, ["gpu0001"]))
        run_ended_jobs(sims[-1], s, bob)
        j17 = s.api("POST", "/v1/jobs", {"spec": {"gpus": 64, "name": "llama-70b",
                                                  "parallelism": {"tp": 8}},
                                         "command": ["python", "train.py"]}, token=ada)
        j18 = s.api("POST", "/v1/jobs", {"spec": {"gpus": 4096, "name": "moe"},
                                         "command": ["python", "moe.py"]}, token=ada)
        check(j17["id"] == 17 and j17["state"] == "running", "job 17: %s" % j17)
        check(j18["id"] == 18 and j18["state"] == "queued", "job 18: %s" % j18)
        s.daemon.stop()
        shutil.copytree(s.daemon.state_dir, into)
        os.unlink(os.path.join(into, "endpoint"))
        ok = True
    except Exception:
        print(s.daemon.log(), file=sys.stderr)
        raise
    finally:
        for sim in sims:
            sim.close(not ok)
        s.close()


# ---------------------------------------------------------------- the runs

def needs_empty_daemon(block):
    return any("topology import" in e.command for e in block)


def run_example(s, e):
    """None when the example behaves as its doc says, else what differs."""
    if "--follow" in e.command:
        status, out = s.run_follow(e.command)
        if status is not None and status != e.expect:
            return "exited %d (wanted %d, or still following after %s s):\n%s" % (
                status, e.expect, FOLLOW_S, out[-2000:])
        return None
    if e.shown is not None:
        status, out = s.run_merged(e.command)
        out = out.replace(s.daemon.url, DEFAULT_URL)
        got, want = normalise(out), normalise("\n".join(e.shown))
        if got != want:
            return "output differs from the doc's\n--- shown\n%s\n--- real\n%s" % (want, got)
        if status != e.expect:
            return "exited %d (wanted %d)\n%s" % (status, e.expect, out[-2000:])
        return None
    status, out, err = s.run(e.command)
    if status != e.expect:
        return "exited %d (wanted %d)\nstdout: %s\nstderr: %s" % (status, e.expect, out[-2000:],
                                                                   err[-2000:])
    return None


def closed_port():
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# For each row of the exit-status table, a command that provokes it for real
# in the example cluster, and why it does. A row added to the table without
# one here fails the test.
PROVOKE = {
    0: ("topo whoami", "a valid admin token"),
    1: ("topo queue --state bogus", "a flag's value CLI11 refuses (a mistyped flag is in the "
        "docs' own transcript)"),
    2: ("echo '{\"gpus\": 64}' | topo place --generate tiny --fill 60 --job -",
        "tiny has 64 GPUs, 60% of them taken"),
    3: ("topo submit --gpus 128 --tp 128 -- /bin/true", "TP 128 needs an HBD of 128 GPUs; "
        "the example cluster's hold 64"),
    4: ("topo show 999", "no job 999"),
    5: ("topo whoami --token topo_" + "0" * 64, "a well-formed token the daemon never issued"),
    6: ("topo cancel 1", "job 1 was cancelled already"),
    7: ("topo whoami --server https://127.0.0.1:{closed_port} --timeout 5",
        "nothing listens on that port"),
    8: ("topo config set preempt_grace_s -5", "a value out of the key's range"),
    9: ("topo logs 17", "job 17's nodes have no agent connected: 503"),
}


def test_exit_table(scheduler, topo, template):
    table = exit_table()
    failures = []
    if set(table) != set(PROVOKE):
        failures.append("docs/cli.md's exit status table has codes %s; this test provokes %s: "
                        "add a command that provokes each new code to PROVOKE in %s (or remove "
                        "the row)" % (sorted(table), sorted(PROVOKE), os.path.basename(__file__)))
    s = Scratch(scheduler, topo, template)
    try:
        for code, (command, why) in sorted(PROVOKE.items()):
            if code not in table:
                continue
            command = command.replace("{closed_port}", str(closed_port()))
            status, out, err = s.run(command)
            if status != code:
                failures.append("exit %d (%s): `%s` (%s) exited %d\nstdout: %s\nstderr: %s"
                                % (code, table[code], command, why, status, out[-1000:],
                                   err[-1000:]))
            elif code not in (0, 2) and not err.startswith("topo: "):  # busy is no error
                failures.append("exit %d: `%s` printed no `topo: ` error: %r" % (code, command, err))
    finally:
        s.close()
    return len(table), failures


def test_docs(scheduler, topo, template, only):
    ran = compared = 0
    skipped, failures = [], []
    for doc in DOCS:
        for start, block in examples_of(doc):
            if only and not any(re.search(only, e.command) for e in block):
                continue
            empty = doc == "README.md" or needs_empty_daemon(block)
            s = Scratch(scheduler, topo, None if empty else template)
            try:
                for e in block:
                    if e.skip:
                        skipped.append((e, e.skip))
                        continue
                    ran += 1
                    compared += e.shown is not None
                    problem = run_example(s, e)
                    if problem:
                        failures.append("%s: `%s`: %s" % (e.where(), e.command, problem))
            except Exception:
                print(s.daemon.log(), file=sys.stderr)
                raise
            finally:
                s.close()
    return ran, compared, skipped, failures


def main():
    args = sys.argv[1:]
    only = None
    if "--only" in args:
        at = args.index("--only")
        only = args[at + 1]
        del args[at:at + 2]
    scheduler, topo, agent = (os.path.abspath(a) for a in args[:3])
    # The docs pipe into jq; without it those examples would fail with 127.
    check(shutil.which("jq") is not None,
          "jq is not installed; the docs' `topo ... | jq` examples need it (apt-get install jq, "
          "or `make deps`, which installs the Makefile's APT_PACKAGES)")
    top = tempfile.mkdtemp(prefix="topo-doctest-template-")
    try:
        template = os.path.join(top, "state")
        prepare_example_cluster(scheduler, topo, agent, template)
        ran, compared, skipped, failures = test_docs(scheduler, topo, template, only)
        codes, table_failures = test_exit_table(scheduler, topo, template)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    print("%d commands run, %d outputs compared, %d skipped; %d exit codes provoked"
          % (ran, compared, len(skipped), codes), flush=True)
    for e, reason in skipped:
        print("  skipped %s `%s`: %s" % (e.where(), e.command, reason), flush=True)
    failures += table_failures + check_unshown_outputs()
    if failures:
        raise Failure("%d example(s) disagree with the docs (each block ran on the example "
                      "cluster:\n%s):\n\n%s"
                      % (len(failures), EXAMPLE_CLUSTER, "\n\n".join(failures)))
    print("ok")


if __name__ == "__main__":
    harness.run(main)
