"""Connections for `serve`, on uvicorn: the socket it listens on, and the two deadlines uvicorn lacks.

uvicorn (with h11) bounds what it can from its settings: open connections (`limit_concurrency`; one more
asking is answered 503), the idle time between requests (`timeout_keep_alive`) and the size of a request's
head (`h11_max_incomplete_event_size`). It has no deadline for a connection that never sends a request, nor
for one that sends its request slowly: a client dripping a byte every few seconds would hold its connection,
and its slot under `limit_concurrency`, for ever. `DeadlineProtocol` is uvicorn's h11 protocol with those
two timers, read off h11's own state (nothing here parses HTTP):
- a connection that sends nothing for `read_timeout` seconds, before its first request or in the middle
  of one, is closed;
- a request must arrive whole (head and body) within `receive_timeout` seconds of its first byte, however
  often bytes come. The model's work and the reply are not part of it.
"""

from __future__ import annotations

import errno
import socket
import sys

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_READ_TIMEOUT_S = 300.0  # a connection silent this long is closed
DEFAULT_RECEIVE_TIMEOUT_S = 60.0  # the time to send one whole request, from its first byte
DEFAULT_MAX_CONNECTIONS = 64  # open connections
MAX_HEAD = 64 * 1024  # the request line and headers, in bytes (h11 answers a larger head with a 400)


class DeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, with a read timeout before and within a request and a receive deadline for
    the whole request (see the module docstring). A subclass sets the two timeouts."""

    read_timeout = DEFAULT_READ_TIMEOUT_S
    receive_timeout = DEFAULT_RECEIVE_TIMEOUT_S

    def connection_made(self, transport) -> None:
        self.deadline: float | None = None  # loop time by which the request being received must be in
        self.timer = None
        super().connection_made(transport)
        self.watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self.watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.watch()  # a pipelined request may be under way already

    def connection_lost(self, exc) -> None:
        self.stop_timer()
        super().connection_lost(exc)

    def stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def watch(self) -> None:
        """Arm the one timer this connection's state calls for."""
        self.stop_timer()
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        receiving = state is h11.SEND_BODY or (state is h11.IDLE and bool(self.conn.trailing_data[0]))
        if not receiving:  # the request is in (the model's turn), or nothing is asked
            self.deadline = None
            if state is h11.IDLE and self.cycle is None:  # after a reply, uvicorn's keep-alive timeout applies
                self.timer = self.loop.call_later(self.read_timeout, self.close, None)
            return
        now = self.loop.time()
        if self.deadline is None:
            self.deadline = now + self.receive_timeout
        if self.deadline - now <= self.read_timeout:
            self.timer = self.loop.call_later(self.deadline - now, self.close,
                                              f"client sent no complete request within the receive timeout of "
                                              f"{self.receive_timeout:g} s (--receive-timeout); connection closed")
        else:
            self.timer = self.loop.call_later(self.read_timeout, self.close, self.silent())

    def silent(self) -> str:
        """What a client silent for the read timeout in the middle of its request had left to send."""
        if self.conn.their_state is h11.SEND_BODY:
            length = dict(self.headers or []).get(b"content-length")
            promised = f"{length.decode()} bytes promised" if length else "chunked"
            what = f"no complete body ({promised})"
        else:
            what = "no complete request head"
        return f"client sent {what} within the read timeout of {self.read_timeout:g} s; connection closed"

    def close(self, message: str | None) -> None:
        """Close the connection, saying why on stderr (an idle one closes silently)."""
        self.timer = None
        if message is not None:
            client = self.client[0] if self.client else "unknown client"
            print(f"{message} ({client})", file=sys.stderr, flush=True)
        self.transport.close()


def bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host`:`port`, not yet listening (uvicorn listens on it once it can answer, so
    clients are refused, not queued, while the model loads). OSError when the address cannot be had."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def listen_error(host: str, port: int, error: OSError) -> str:
    """Why `--host`/`--port` cannot be listened on, in one line that names the option to change."""
    reason = error.strerror or str(error)
    if isinstance(error, socket.gaierror):
        return f"--host {host}: not a host name or address this machine can resolve ({reason})"
    if error.errno == errno.EADDRINUSE:
        return (f"--port {port}: {host}:{port} is already in use ({reason}); stop the server there, or pick "
                f"another port (--port 0 picks a free one)")
    if error.errno == errno.EADDRNOTAVAIL:
        return (f"--host {host}: not an address of this machine ({reason}); use 127.0.0.1 (this machine only) "
                f"or 0.0.0.0 (every interface)")
    if error.errno == errno.EACCES:
        return f"--port {port}: permission denied ({reason}); ports below 1024 need privileges, use a higher one"
    return f"--host {host} --port {port}: cannot listen there ({reason})"
