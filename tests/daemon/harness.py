"""A real topo-scheduler on loopback for the daemon tests.

Daemon(bin) starts `topo-scheduler --state-dir TMP --listen 127.0.0.1:0`,
waits for TMP/endpoint, and talks to it over real TLS, trusting TMP/ca.pem.
Standard library only (run with /usr/bin/python3).
"""

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time


class Daemon:
    def __init__(self, binary, state_dir=None, config=None, extra_args=(), log_dir=None,
                 config_dir=None):
        self.binary = binary
        self.own_dir = state_dir is None
        self.state_dir = state_dir or tempfile.mkdtemp(prefix="topo-daemon-")
        self.config = config
        self.config_dir = config_dir or self.state_dir
        self.extra_args = list(extra_args)
        self.proc = None
        self.url = None
        self.log_path = os.path.join(log_dir or self.state_dir, "daemon.log")

    # ---- lifecycle
    def start(self, timeout=20):
        endpoint = os.path.join(self.state_dir, "endpoint")
        if os.path.exists(endpoint):
            os.unlink(endpoint)
        args = [self.binary, "--state-dir", self.state_dir, "--listen", "127.0.0.1:0"]
        if self.config:
            path = os.path.join(self.config_dir, "test.conf")
            with open(path, "w") as f:
                f.write(self.config)
            args += ["--config", path]
        args += self.extra_args
        log = open(self.log_path, "ab")
        log_start = log.tell()
        self.url = None
        self.proc = subprocess.Popen(args, stdout=log, stderr=log)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("topo-scheduler exited with %s:\n%s" % (self.proc.returncode, self.log()))
            if os.path.exists(endpoint):
                with open(endpoint) as f:
                    self.url = f.read().strip()
            else:
                # On a full disk the daemon cannot write the endpoint file;
                # its log says where it listens.
                marker = "topo-scheduler listening on "
                with open(self.log_path, errors="replace") as f:
                    f.seek(log_start)
                    lines = f.read().splitlines()
                for line in lines:
                    if line.startswith(marker):
                        self.url = line[len(marker):].split()[0]
            if self.url:
                self.ctx = ssl.create_default_context(cafile=os.path.join(self.state_dir, "ca.pem"))
                return self
            time.sleep(0.05)
        raise RuntimeError("topo-scheduler did not start in %ss:\n%s" % (timeout, self.log()))

    def log(self):
        return self.log_all()[-4000:]

    def log_all(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        """SIGTERM; the daemon must exit 0 (under the sanitizers, a leak or
        an error report makes it exit non-zero)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill9()
                raise RuntimeError("topo-scheduler did not stop on SIGTERM:\n" + self.log())
            if self.proc.returncode != 0:
                raise RuntimeError("topo-scheduler exited with %d on SIGTERM:\n%s" %
                                   (self.proc.returncode, self.log()))

    def cleanup(self):
        try:
            self.stop()
        finally:
            if self.own_dir:
                shutil.rmtree(self.state_dir, ignore_errors=True)

    @property
    def admin_token(self):
        with open(os.path.join(self.state_dir, "admin-token")) as f:
            return f.read().strip()

    @property
    def port(self):
        return int(self.url.rsplit(":", 1)[1])

    def agent_port(self, timeout=10):
        """The agents' listener port, from STATE/agent-endpoint. The daemon
        writes that file after `endpoint` (all start() waits for), so a test
        that reads it at once can find it missing: wait for it."""
        path = os.path.join(self.state_dir, "agent-endpoint")
        deadline = time.time() + timeout
        while True:
            try:
                with open(path) as f:
                    text = f.read().strip()
                if text:
                    return int(text.rsplit(":", 1)[1].split("/")[0])
            except FileNotFoundError:
                pass
            if time.time() >= deadline:
                raise RuntimeError("no %s after %s s:\n%s" % (path, timeout, self.log()))
            time.sleep(0.02)

    # ---- API
    def request(self, method, path, body=None, token=None, headers=None, raw=None, timeout=30):
        """Returns (status, parsed JSON or text)."""
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=timeout)
        h = {}
        if token:
            h["Authorization"] = "Bearer " + token
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        if headers:
            h.update(headers)
        try:
            conn.request(method, path, body=data, headers=h)
            resp = conn.getresponse()
            text = resp.read().decode(errors="replace")
        finally:
            conn.close()
        try:
            return resp.status, json.loads(text)
        except ValueError:
            return resp.status, text

    def api(self, method, path, body=None, token=None, expect=None):
        status, out = self.request(method, path, body, token or self.admin_token)
        if expect is not None and status != expect:
            raise AssertionError("%s %s: expected %s, got %s: %s" % (method, path, expect, status, out))
        return out

    def raw_exchange(self, data, timeout=10):
        """Sends raw bytes over TLS and returns what comes back (for malformed HTTP)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            with self.ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
                tls.sendall(data)
                chunks = []
                try:
                    while True:
                        chunk = tls.recv(65536)
                        if not chunk:
                            break
                        chunks.append(chunk)
                except (socket.timeout, ssl.SSLError, ConnectionResetError):
                    pass
        return b"".join(chunks)


def commit_mark_seq(state_dir):
    """The seq of the newest valid record of STATE_DIR/topo.db.mark, the
    store's commit mark (scheduler/store/commit_mark.hpp: two 4096-byte
    slots, each a line "toposched-commit-mark 1 store=ID seq=N job=N
    sum=HEX16" whose sum is the SHA-256 of what precedes " sum=")."""
    import hashlib
    with open(os.path.join(state_dir, "topo.db.mark"), "rb") as f:
        data = f.read()
    best = None
    for at in (0, 4096):
        line = data[at:at + 4096].split(b"\n", 1)[0].decode(errors="replace")
        body, _, total = line.rpartition(" sum=")
        if body and hashlib.sha256(body.encode()).hexdigest()[:16] == total:
            seq = int(dict(w.split("=", 1) for w in body.split()[2:])["seq"])
            best = seq if best is None else max(best, seq)
    if best is None:
        raise Failure("no valid record in %s/topo.db.mark" % state_dir)
    return best


def tiny_topology():
    """Two spines x two leaves x two 8-GPU nodes (the generator's `tiny`)."""
    domains = []
    for s in range(2):
        children = []
        for l in range(2):
            leaf = 2 * s + l
            children.append({"name": "leaf%d" % leaf, "nodes": ["n%d" % (2 * leaf), "n%d" % (2 * leaf + 1)]})
        domains.append({"name": "spine%d" % s, "children": children})
    return {"version": 1, "name": "tiny", "tiers": ["node", "leaf", "spine"], "hbd": "node",
            "gpus_per_node": 8, "gpu_model": "H100", "domains": domains}


def setup_tiny(daemon):
    daemon.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(tiny_topology())}, expect=200)
    daemon.api("POST", "/v1/nodes/resume", {"nodes": "n[0-7]"}, expect=200)


class Failure(Exception):
    pass


class Cli:
    """The real `topo` binary against a daemon, as the admin unless a token
    is given, with HOME set to `home` and no XDG directories, so no config
    file of the machine's user counts."""

    def __init__(self, daemon, topo_bin, home):
        self.d, self.topo_bin, self.home = daemon, topo_bin, home

    def run(self, args, token=None, expect=0, stdin=None, timeout=60):
        """The finished process; a Failure unless it exited with `expect`."""
        env = dict(os.environ, HOME=self.home, TOPO_SERVER=self.d.url,
                   TOPO_CA=os.path.join(self.d.state_dir, "ca.pem"),
                   TOPO_TOKEN=token or self.d.admin_token)
        env.pop("XDG_CONFIG_HOME", None)
        env.pop("XDG_DATA_HOME", None)
        p = subprocess.run([self.topo_bin] + args, env=env, input=stdin, capture_output=True,
                           text=True, timeout=timeout)
        if p.returncode != expect:
            raise Failure("topo %s: exit %d (wanted %d)\nstdout: %s\nstderr: %s" %
                          (" ".join(args), p.returncode, expect, p.stdout[-2000:], p.stderr[-2000:]))
        return p

    def json(self, args, token=None, expect=0):
        """The --json output, parsed. --json goes before a "--", after which
        everything is the job's command."""
        at = args.index("--") if "--" in args else len(args)
        return json.loads(self.run(args[:at] + ["--json"] + args[at:], token, expect).stdout)


def run_topo(topo, args, env, expect=0, timeout=60):
    """The real `topo` with exactly `env`; a Failure unless it exited with
    `expect`."""
    p = subprocess.run([topo] + args, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != expect:
        raise Failure("topo %s: exit %d (wanted %d)\nstdout: %s\nstderr: %s"
                      % (" ".join(args), p.returncode, expect, p.stdout, p.stderr))
    return p


def relay_pids(marker):
    """The `topo relay` processes (docs/cli.md, "Connection sharing") whose
    command line mentions `marker` (a directory their socket is under)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[1] == b"relay" and any(marker.encode() in a for a in argv):
            pids.append(int(entry))
    return pids


def check(cond, message):
    if not cond:
        raise Failure(message)


def wait_for(pred, timeout, what):
    """pred()'s first true value within `timeout` seconds (polled every
    50 ms), else a Failure naming `what`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise Failure("timed out after %s s waiting for %s" % (timeout, what))


@contextlib.contextmanager
def serving(daemon, *cleanup_dirs):
    """Prints the daemon's log when the block fails; stops the daemon and
    removes the given directories in any case."""
    try:
        yield daemon
    except Exception:
        print(daemon.log(), file=sys.stderr)
        raise
    finally:
        try:
            daemon.cleanup()
        finally:
            for d in cleanup_dirs:
                shutil.rmtree(d, ignore_errors=True)


def run(main):
    """Runs a test's main(): exit 1 with the message on a Failure."""
    try:
        main()
    except Failure as e:
        print("FAIL:\n%s" % e, file=sys.stderr)
        sys.exit(1)
