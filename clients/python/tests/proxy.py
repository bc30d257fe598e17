"""A small TCP proxy in front of the service that a test can make hostile: it closes a
connection at the first request that matches a rule (as a middlebox that breaks streams or
long requests does, or a network that loses a request), answers a request with an error status
itself, holds a request back a while, closes every connection a set time after it opened, or
forwards faithfully. It keeps a log of the requests it saw and what it did with each. The
Python SDK's tests and the runners' conformance suite (clients/conformance) share it."""

from __future__ import annotations

from collections.abc import Callable

import socket
import threading
import time


class Proxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = int(self.listener.getsockname()[1])
        self.base = f"http://127.0.0.1:{self.port}"
        #: Close each connection this many seconds after it opened; ``None`` forwards as is.
        self.cut_after: float | None = None
        #: A connection is closed at the first request (head and body) this accepts.
        self.refuse: Callable[[bytes], bool] | None = None
        self.refused = 0
        #: A request this gives a status for is answered with it here (a problem body,
        #: ``Connection: close``) and never reaches the service.
        self.fail: Callable[[bytes], int | None] | None = None
        #: A request this gives seconds for is held back that long before it is forwarded.
        self.delay: Callable[[bytes], float] | None = None
        #: Every request seen: (monotonic time, its request line, "forwarded", "refused",
        #: "failed" or "delayed", its body).
        self.log: list[tuple[float, str, str, bytes]] = []
        self.connections = 0
        self._open: list[tuple[socket.socket, socket.socket, float]] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()
        threading.Thread(target=self._reaper, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        self.cut_all()

    def cut_all(self) -> None:
        with self._lock:
            for client, upstream, _ in self._open:
                for s in (client, upstream):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    s.close()
            self._open.clear()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
        except OSError:
            client.close()
            return
        with self._lock:
            self.connections += 1
            self._open.append((client, upstream, time.monotonic()))
        threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        """Forwards requests one by one (head and body, by Content-Length), closing the
        connection at the first one the ``refuse`` rule matches."""
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = client.recv(65536)
                    if not chunk:
                        raise EOFError
                    buffer += chunk
                head, _, rest = buffer.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                while len(rest) < length:
                    chunk = client.recv(65536)
                    if not chunk:
                        raise EOFError
                    rest += chunk
                request, buffer = head + b"\r\n\r\n" + rest[:length], rest[length:]
                request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
                refuse, fail, delay = self.refuse, self.fail, self.delay
                if refuse is not None and refuse(request):
                    self.refused += 1
                    self.log.append((time.monotonic(), request_line, "refused", rest[:length]))
                    break
                status = fail(request) if fail is not None else None
                if status is not None:
                    self.log.append((time.monotonic(), request_line, "failed", rest[:length]))
                    body = b'{"type":"about:blank","title":"failed by the test proxy","status":%d}' % status
                    client.sendall(b"HTTP/1.1 %d Proxy Failure\r\ncontent-type: application/problem+json\r\n"
                                   b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (status, len(body), body))
                    break
                held = delay(request) if delay is not None else 0.0
                self.log.append((time.monotonic(), request_line, "delayed" if held else "forwarded", rest[:length]))
                if held:
                    time.sleep(held)
                upstream.sendall(request)
        except (OSError, ValueError, EOFError):
            pass
        for s in (client, upstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _reaper(self) -> None:
        while not self._closed:
            time.sleep(0.05)
            cut_after = self.cut_after
            if cut_after is None:
                continue
            now = time.monotonic()
            with self._lock:
                keep = []
                for client, upstream, opened in self._open:
                    if now - opened >= cut_after:
                        for s in (client, upstream):
                            try:
                                s.shutdown(socket.SHUT_RDWR)
                            except OSError:
                                pass
                            s.close()
                    else:
                        keep.append((client, upstream, opened))
                self._open = keep
