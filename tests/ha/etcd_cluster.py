"""A real etcd cluster on loopback for the `ha` tests (docs/ha.md).

    with EtcdCluster(3) as etcd:
        etcd.endpoints            # ["https://127.0.0.1:P1", ...]
        etcd.ca, etcd.client_cert, etcd.client_key   # PEM files for the clients
        etcd.kill(0)              # SIGKILL member 0, by its PID
        etcd.restart(0)           # start it again on its data dir; waits for health
        etcd.wait_healthy()       # every running member answers /health
    EtcdCluster(3, max_request_bytes=8 << 20)   # members take requests up to 8 MiB

Each member is Debian's /usr/bin/etcd (etcd-server, 3.4) in a temporary directory, with TLS
on both the client and the peer URLs: a CA, one certificate for 127.0.0.1 per member (server
and peer, so it carries both serverAuth and clientAuth) and one client certificate, all made
with the openssl command in that directory. Clients must present a certificate
(--client-cert-auth), as the daemon will. Everything is cleaned up on exit, whatever happened:
members are killed by PID and the directory removed.

Tests call skip_without_etcd() first: it exits 77 (ctest's skip) where /usr/bin/etcd is
missing. Standard library only.
"""

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
import urllib.request

ETCD = os.environ.get("TOPO_ETCD_BIN", "/usr/bin/etcd")


def skip_without_etcd():
    if not os.access(ETCD, os.X_OK):
        print(f"SKIP: {ETCD} is missing (apt-get install etcd-server; `make deps` does)")
        sys.exit(77)
    if shutil.which("openssl") is None:
        print("SKIP: the openssl command is missing")
        sys.exit(77)


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (held open together while choosing)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _openssl(args, cwd):
    r = subprocess.run(["openssl"] + args, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {r.stderr.strip()}")


def make_certs(directory, members):
    """CA, one certificate per member (127.0.0.1, server and peer) and a client certificate."""
    _openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
              "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2",
              "-subj", "/CN=toposched test etcd CA"], directory)

    def issue(name, cn, ext):
        with open(os.path.join(directory, f"{name}.ext"), "w") as f:
            f.write(ext)
        _openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", f"{name}-key.pem", "-out", f"{name}.csr", "-subj", f"/CN={cn}"],
                 directory)
        _openssl(["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
                  "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
                  "-extfile", f"{name}.ext"], directory)

    for i in range(members):
        issue(f"member{i}", f"etcd{i}",
              "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
              "keyUsage=digitalSignature,keyEncipherment\n"
              "extendedKeyUsage=serverAuth,clientAuth\n")
    issue("client", "topo-scheduler",
          "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n")


class EtcdCluster:
    def __init__(self, members=3, startup_timeout_s=30, max_request_bytes=None):
        self.n = members
        # etcd's --max-request-bytes (1.5 MiB by default): a batch split over several
        # keys is written in ONE txn, which must fit it (docs/ha.md, Size limits), so
        # tests of batches above 1.5 MiB start the members with a larger one, as a site
        # that logs such batches must.
        self.max_request_bytes = max_request_bytes
        self.startup_timeout_s = startup_timeout_s
        self.dir = None
        self.procs = [None] * members
        self.client_ports = []
        self.peer_ports = []

    # ---- files and addresses
    def _path(self, name):
        return os.path.join(self.dir, name)

    @property
    def ca(self):
        return self._path("ca.pem")

    @property
    def client_cert(self):
        return self._path("client.pem")

    @property
    def client_key(self):
        return self._path("client-key.pem")

    @property
    def endpoints(self):
        return [f"https://127.0.0.1:{p}" for p in self.client_ports]

    def log(self, i):
        """The member's log so far (for a failure message)."""
        try:
            with open(self._path(f"member{i}.log")) as f:
                return f.read()
        except OSError:
            return ""

    # ---- lifecycle
    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="topo-etcd-")
        try:
            make_certs(self.dir, self.n)
            ports = free_ports(2 * self.n)
            self.client_ports, self.peer_ports = ports[: self.n], ports[self.n:]
            for i in range(self.n):
                self._start(i, "new")
            self.wait_healthy()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        for i in range(self.n):
            self.kill(i)
        if self.dir is not None and os.environ.get("TOPO_KEEP_ETCD_DIR") is None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _start(self, i, state):
        cluster = ",".join(f"etcd{j}=https://127.0.0.1:{self.peer_ports[j]}" for j in range(self.n))
        member = f"member{i}"
        args = [
            ETCD, "--name", f"etcd{i}", "--data-dir", self._path(f"data{i}"),
            "--listen-client-urls", f"https://127.0.0.1:{self.client_ports[i]}",
            "--advertise-client-urls", f"https://127.0.0.1:{self.client_ports[i]}",
            "--listen-peer-urls", f"https://127.0.0.1:{self.peer_ports[i]}",
            "--initial-advertise-peer-urls", f"https://127.0.0.1:{self.peer_ports[i]}",
            "--initial-cluster", cluster, "--initial-cluster-state", state,
            "--initial-cluster-token", os.path.basename(self.dir),
            "--cert-file", self._path(f"{member}.pem"), "--key-file", self._path(f"{member}-key.pem"),
            "--trusted-ca-file", self.ca, "--client-cert-auth",
            "--peer-cert-file", self._path(f"{member}.pem"),
            "--peer-key-file", self._path(f"{member}-key.pem"),
            "--peer-trusted-ca-file", self.ca, "--peer-client-cert-auth",
            # Loopback: a member's loss is followed by a raft election within
            # 0.5-1 s (etcd randomizes the timeout up to twice its value), well
            # inside the tests' 2 s lease TTL: with 1000 ms an election could
            # outlast the TTL and a leader lose its lease to a minority's loss.
            "--heartbeat-interval", "50", "--election-timeout", "500",
            "--logger", "zap", "--log-level", "warn",
        ]
        if self.max_request_bytes is not None:
            args += ["--max-request-bytes", str(self.max_request_bytes)]
        log = open(self._path(f"{member}.log"), "a")
        self.procs[i] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        log.close()

    def kill(self, i, sig=signal.SIGKILL):
        p = self.procs[i]
        if p is None:
            return
        if p.poll() is None:
            os.kill(p.pid, sig)
            p.wait()
        self.procs[i] = None

    def restart(self, i, wait=True):
        """Starts a killed member again on its data dir (it rejoins the cluster)."""
        self.kill(i)
        self._start(i, "existing")
        if wait:
            self.wait_healthy([i])

    def running(self):
        return [i for i in range(self.n) if self.procs[i] is not None and self.procs[i].poll() is None]

    # ---- requests (the tests' own view, through the JSON gateway)
    def ssl_context(self):
        ctx = ssl.create_default_context(cafile=self.ca)
        ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx

    def get(self, i, path, timeout=2):
        with urllib.request.urlopen(self.endpoints[i] + path, context=self.ssl_context(),
                                    timeout=timeout) as r:
            return json.loads(r.read())

    def post(self, i, path, body, timeout=2):
        req = urllib.request.Request(self.endpoints[i] + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=self.ssl_context(), timeout=timeout) as r:
            return json.loads(r.read())

    def healthy(self, i):
        try:
            return self.get(i, "/health", timeout=1).get("health") == "true"
        except Exception:
            return False

    def wait_healthy(self, members=None, timeout_s=None):
        members = self.running() if members is None else members
        deadline = time.monotonic() + (timeout_s or self.startup_timeout_s)
        while True:
            pending = [i for i in members if not self.healthy(i)]
            if not pending:
                return
            for i in pending:
                if self.procs[i] is None or self.procs[i].poll() is not None:
                    raise RuntimeError(f"etcd member {i} exited:\n{self.log(i)[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd members {pending} not healthy after "
                                   f"{timeout_s or self.startup_timeout_s} s:\n"
                                   f"{self.log(pending[0])[-3000:]}")
            time.sleep(0.1)


if __name__ == "__main__":
    # A quick look by hand: start N members, print the endpoints, wait for Enter.
    skip_without_etcd()
    with EtcdCluster(int(sys.argv[1]) if len(sys.argv) > 1 else 3) as c:
        print("endpoints:", ",".join(c.endpoints))
        print("ca:", c.ca, "cert:", c.client_cert, "key:", c.client_key)
        input("Enter stops the cluster ")
