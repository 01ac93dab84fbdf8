"""A TCP forwarder for the cluster tier: a service on 127.0.0.1 (the test PostgreSQL) made reachable from
inside the namespaced hosts at their root-side veth address, and only there.

It listens on `host.root_addr:port` (an address that exists only on this machine's veth pairs) and
copies bytes both ways to `127.0.0.1:target_port`. A cut link then cuts the hosts' connections to the
service as a network would.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterable


class Forwarder:
    def __init__(self, addrs: Iterable[str], port: int, target_port: int) -> None:
        self.port = port
        self._target = ("127.0.0.1", target_port)
        self._stop = threading.Event()
        self._listeners: list[socket.socket] = []
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        for addr in addrs:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((addr, port))
            sock.listen(64)
            sock.settimeout(0.2)
            self._listeners.append(sock)
            thread = threading.Thread(target=self._accept, args=(sock,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _accept(self, listener: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self._open |= {client, upstream}
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop listening (the address and port are free again when this returns) and drop every connection."""
        self._stop.set()
        for thread in self._threads:
            thread.join(5)
        for sock in self._listeners:
            sock.close()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.close()
