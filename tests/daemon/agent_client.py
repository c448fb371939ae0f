"""A minimal WebSocket client over TLS with a client certificate, standard
library only, for the agent-protocol tests (RFC 6455: handshake, masked
text frames out, unmasked frames in)."""

import base64
import json
import os
import socket
import ssl
import struct


class AgentConnection:
    def __init__(self, port, ca, cert=None, key=None, timeout=10):
        ctx = ssl.create_default_context(cafile=ca)
        if cert:
            ctx.load_cert_chain(cert, key)
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        key_b64 = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET /v1/agent HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n" % key_b64).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed during the WebSocket handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError("WebSocket handshake refused: %r" % head[:100])
        self.buf = head.split(b"\r\n\r\n", 1)[1]

    def send(self, obj):
        data = (json.dumps(obj) if not isinstance(obj, (bytes, str)) else obj)
        data = data.encode() if isinstance(data, str) else data
        mask = os.urandom(4)
        n = len(data)
        header = bytes([0x81])
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(header + mask + masked)

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _frame(self):
        """(opcode, payload) of the first whole frame in the buffer, consumed;
        None while it is incomplete."""
        if len(self.buf) < 2:
            return None
        b0, b1 = self.buf[0], self.buf[1]
        n, head = b1 & 0x7F, 2
        if n == 126:
            if len(self.buf) < 4:
                return None
            n, head = struct.unpack(">H", self.buf[2:4])[0], 4
        elif n == 127:
            if len(self.buf) < 10:
                return None
            n, head = struct.unpack(">Q", self.buf[2:10])[0], 10
        if len(self.buf) < head + n:
            return None
        payload = self.buf[head:head + n]
        self.buf = self.buf[head + n:]
        return b0 & 0x0F, payload

    def recv(self, timeout=None):
        """The next text message as JSON; None when the server closed. With a
        timeout, raises TimeoutError when no whole message came in time (a
        partial one stays buffered for the next call)."""
        old = self.sock.gettimeout()
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            while True:
                frame = self._frame()
                if frame is None:
                    try:
                        chunk = self.sock.recv(65536)
                    except socket.timeout:
                        raise TimeoutError("no message within %s s" % timeout)
                    if not chunk:
                        raise ConnectionError("connection closed")
                    self.buf += chunk
                    continue
                opcode, payload = frame
                if opcode == 0x8:
                    return None
                if opcode == 0x9:  # ping: answer with a pong
                    mask = os.urandom(4)
                    self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + mask +
                                      bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
                    continue
                if opcode in (0x1, 0x2):
                    return json.loads(payload.decode())
        finally:
            if timeout is not None:
                self.sock.settimeout(old)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
