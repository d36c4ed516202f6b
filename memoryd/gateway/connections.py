"""The gateway's connections: deadlines for a request's head and body, and a cap on how
many are open, which uvicorn's HTTP server lacks.

uvicorn (0.54) closes a kept-alive connection that stays idle (``timeout_keep_alive``)
but never one that sends nothing after connecting, or sends a request head or a body a
byte at a time: each holds a file descriptor for ever, and a few thousand exhaust the
process's. Its ``limit_concurrency`` answers 503 only once a whole head has arrived, so
it caps nothing of the kind. ``guarded_protocol`` is uvicorn's httptools protocol with
one timer per connection that enforces both deadlines, and a refusal at connect time
beyond the cap; it reads the protocol's request state (``cycle``, ``flow``), which
tests/integration/test_gateway_connections.py holds to its behaviour."""

from __future__ import annotations

import asyncio
import json
from asyncio import TimerHandle
from dataclasses import dataclass
from typing import ClassVar

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from memoryd.config import Settings
from memoryd.gateway import problems


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float
    body_timeout_s: float
    max_connections: int

    @classmethod
    def of(cls, settings: Settings) -> ConnectionLimits:
        return cls(settings.gateway_header_timeout_s, settings.gateway_body_timeout_s,
                   settings.gateway_max_connections)


def _raw_response(status: int, kind: str, message: str, *extra: bytes) -> bytes:
    """A whole response written straight to the socket: the app never saw the request."""
    payload = json.dumps(problems.body(kind, message)).encode()
    return b"".join([STATUS_LINE[status], b"content-type: application/json\r\n",
                     b"content-length: %d\r\n" % len(payload), *extra,
                     b"connection: close\r\n\r\n", payload])


AT_CAPACITY = _raw_response(503, "unavailable", "the gateway holds as many connections as "
                                                "it may; retry later", b"retry-after: 1\r\n")
TOO_SLOW = _raw_response(408, "request_timeout", "the request did not arrive in time")


def guarded_protocol(limits: ConnectionLimits) -> type[asyncio.Protocol]:
    """The protocol class to give uvicorn (``http=``), enforcing ``limits``."""

    class Guarded(GuardedProtocol):
        LIMITS = limits

    return Guarded


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's protocol with deadlines: the request head must arrive within the header
    timeout of the connection opening (or of the first byte of a later request), and a
    body may pause no longer than the body timeout. A kept-alive connection with nothing
    sent is uvicorn's (``timeout_keep_alive``); a request whose body has arrived is the
    app's, for as long as it takes."""

    LIMITS: ClassVar[ConnectionLimits]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._timer: TimerHandle | None = None
        self._head_since: float | None = self.loop.time()
        self._head_bytes = False  # some of the awaited head has arrived
        self._last_read = self._head_since
        if len(self.connections) > self.LIMITS.max_connections:
            self.logger.warning("Refused a connection: at MEMORYD_GATEWAY_MAX_CONNECTIONS.")
            self.transport.write(AT_CAPACITY)
            self.transport.close()
            return
        self._watch()

    def data_received(self, data: bytes) -> None:
        self._last_read = self.loop.time()
        if self._between_requests():
            if self._head_since is None:  # the first byte of a request after another
                self._head_since = self._last_read
            self._head_bytes = True
        super().data_received(data)
        if not self._between_requests():
            self._head_since, self._head_bytes = None, False
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _watch(self) -> None:
        """Have the timer go off by the connection's deadline (an earlier one when a
        request head has given way to a body)."""
        due = self._deadline()
        if due is None or self.transport.is_closing():
            return
        if self._timer is not None:
            if self._timer.when() <= due:
                return
            self._timer.cancel()
        self._timer = self.loop.call_at(due, self._check)

    def _check(self) -> None:
        """Time the connection out if its deadline has passed, else look again then."""
        self._timer = None
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            return  # closed, or handed to another protocol (an upgrade)
        due = self._deadline()
        if due is None:
            return
        if self.loop.time() >= due:
            self._time_out()
        else:
            self._timer = self.loop.call_at(due, self._check)

    def _deadline(self) -> float | None:
        if self._between_requests():
            if self._head_since is None:
                return None
            return self._head_since + self.LIMITS.header_timeout_s
        if not self.cycle.more_body:
            return None
        if self.flow.read_paused or self.cycle.waiting_for_100_continue:
            # The server holds the body back (the app has not read what came, or has not
            # asked for it yet): the client is not the one stalling.
            self._last_read = self.loop.time()
        return self._last_read + self.LIMITS.body_timeout_s

    def _time_out(self) -> None:
        between = self._between_requests()
        if not between and not self.cycle.response_started:
            # The app, waiting on the body, sees the client gone; what it sends is dropped.
            self.cycle.disconnected = True
            self.cycle.message_event.set()
            self.transport.write(TOO_SLOW)
        elif between and self._head_bytes:
            self.transport.write(TOO_SLOW)
        self.transport.close()
