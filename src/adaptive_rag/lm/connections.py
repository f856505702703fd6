"""HTTP connections that cannot pile up, for `serve`: a bounded number at a time, each request received
within a deadline.

`http.server` gives every connection a thread and every read a timeout. Neither bounds a client that
drips one byte every few seconds (each read succeeds), nor a crowd of clients that open connections and
send nothing. So:
- `BoundedServer` holds at most `max_connections` connections at a time; one more is answered with a
  503 OpenAI error body from the accepting thread, at once and without reading its request, and closed.
- `BoundedHandler` waits up to its read timeout for a request's first byte (an idle keep-alive), then
  gives the client `receive_timeout` seconds to send the whole request (request line, headers, body);
  the model's work and the reply are not part of it.
"""

from __future__ import annotations

import errno
import io
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_READ_TIMEOUT_S = 300.0  # a connection silent this long is closed
DEFAULT_RECEIVE_TIMEOUT_S = 60.0  # the time to send one whole request, from its first byte
DEFAULT_MAX_CONNECTIONS = 64  # open connections (one thread each)


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict:
    """An OpenAI error body."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class ReceiveTimeout(TimeoutError):
    """The client did not send one whole request within the receive timeout of its first byte."""


class _RequestReader(io.RawIOBase):
    """The connection's bytes for `BoundedHandler.rfile`: each read waits at most the read timeout and,
    while a request is being received, no longer than what is left of its receive deadline."""

    def __init__(self, handler: "BoundedHandler"):
        super().__init__()
        self.handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        handler = self.handler
        timeout, deadline = handler.timeout, handler.deadline
        by_deadline = False
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise handler.too_slow()
            by_deadline = timeout is None or left < timeout
            timeout = left if by_deadline else timeout
        handler.connection.settimeout(timeout)
        try:
            return handler.connection.recv_into(buffer)
        except TimeoutError:
            if by_deadline:
                raise handler.too_slow() from None
            raise


class BoundedHandler(BaseHTTPRequestHandler):
    """A request handler whose every request must arrive within `receive_timeout` seconds of its first
    byte (`timeout`, http.server's own, is each read's). A subclass calls `received()` once it has read
    the request's body, so that the reply and the next request wait the plain read timeout again."""

    timeout = DEFAULT_READ_TIMEOUT_S
    receive_timeout = DEFAULT_RECEIVE_TIMEOUT_S
    deadline: float | None = None  # time.monotonic() by which the request being received must be in

    def setup(self):
        super().setup()
        self.rfile.close()  # the socket's own file: left open, it would keep the socket open after close
        self.rfile = io.BufferedReader(_RequestReader(self))

    def handle_one_request(self):
        try:
            started = self.rfile.peek(1)
        except OSError:  # silent for the read timeout, or reset: nothing was asked
            started = b""
        if not started:
            self.close_connection = True
            return
        self.deadline = time.monotonic() + self.receive_timeout
        try:
            super().handle_one_request()
        finally:
            self.received()

    def received(self) -> None:
        """The request is in: from now on the connection's reads and writes wait the read timeout."""
        if self.deadline is not None:
            self.deadline = None
            try:
                self.connection.settimeout(self.timeout)
            except OSError:
                pass

    def too_slow(self) -> ReceiveTimeout:
        return ReceiveTimeout(f"client sent no complete request within the receive timeout of "
                              f"{self.receive_timeout:g} s (--receive-timeout); connection closed")

    def log_error(self, format, *args):  # noqa: A002 - http.server's signature
        """A receive timeout in the request line or headers always reaches stderr (http.server reports it as
        an error, which a quiet handler's `log_message` may drop)."""
        timeout = next((arg for arg in args if isinstance(arg, ReceiveTimeout)), None)
        if timeout is not None:
            print(f"{timeout} ({self.client_address[0]})", file=sys.stderr, flush=True)
        else:
            super().log_error(format, *args)


class BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` at a time. Bound at construction (so a bad
    address fails at once); it listens only when `server_activate` is called, so that clients are
    refused, not queued, until it can answer."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BoundedHandler],
                 max_connections: int = DEFAULT_MAX_CONNECTIONS):
        super().__init__(address, handler, bind_and_activate=False)
        self.max_connections = max_connections
        self.connections = threading.BoundedSemaphore(max_connections)
        try:
            self.server_bind()
        except BaseException:
            self.server_close()
            raise

    def process_request(self, request, client_address):
        if not self.connections.acquire(blocking=False):
            self.refuse(request, client_address)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.connections.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()

    def refuse(self, request, client_address) -> None:
        """Answer 503 and close, from the accepting thread: it never waits on this client."""
        message = (f"this server is at its limit of open connections (--max-connections {self.max_connections}); "
                   f"retry later")
        print(f"refused a connection from {client_address[0]}: {message}", file=sys.stderr, flush=True)
        data = json.dumps(error_body(message, "server_error", code="too_many_connections")).encode()
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {len(data)}"
                f"\r\nRetry-After: 1\r\nConnection: close\r\n\r\n").encode()
        try:
            request.setblocking(False)  # a fresh socket's send buffer takes the whole reply
            request.send(head + data)
            request.shutdown(socket.SHUT_WR)
            for _ in range(16):  # what the client already sent: left unread, closing would reset the connection
                if not request.recv(65536):
                    break
        except OSError:
            pass
        self.close_request(request)


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
