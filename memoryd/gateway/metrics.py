"""Prometheus metrics of the gateway: requests by route and status, and their latency.

A plain ASGI middleware (no per-request task or body buffering, so MCP's streamed
responses pass through untouched). Routes are labelled by their template
(``/v1/agents/{agent}/recall``, ``/mcp``, ``/docs``), never by the concrete path: agent
ids stay out of the metrics and the label set stays small. Only a path no route serves
is ``unmatched``."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class GatewayMetrics:
    """One registry per gateway app, so several apps in one process never collide."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("memoryd_http_requests", "HTTP requests served",
                                ("method", "route", "status"), registry=self.registry)
        self.latency = Histogram("memoryd_http_request_duration_seconds",
                                 "Time to the end of the response", ("method", "route"),
                                 buckets=LATENCY_BUCKETS, registry=self.registry)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def route_label(scope: Scope, routes: Sequence[BaseRoute] = ()) -> str:
    """The template of the route that served the request: the one routing recorded, else
    the first of ``routes`` that the path and method match. Requests answered before
    routing (a body over the limit gets 413 in a middleware) and routes that leave no
    record (MCP, /docs, /openapi.json) are named so; only a path no route serves is
    ``unmatched``."""
    route: Any = scope.get("route")
    path = getattr(route, "path_format", None)  # the template without its converters
    return str(path or _template_of(scope, routes) or "unmatched")


def _template_of(scope: Scope, routes: Sequence[BaseRoute]) -> str | None:
    partial = None
    for route in routes:
        path = getattr(route, "path_format", None)
        match = route.matches(scope)[0] if path else Match.NONE
        if match is Match.FULL:
            return str(path)
        if match is Match.PARTIAL and partial is None:  # the path, another method: 405
            partial = str(path)
    return partial


class MetricsMiddleware:
    """``routes`` (the app's, those of included routers listed one by one) name the
    requests that routing did not."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics,
                 routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await served(self.app, scope, receive, send, self._count)

    def _count(self, scope: Scope, status: int, seconds: float) -> None:
        method, route = scope["method"], route_label(scope, self.routes)
        self.metrics.requests.labels(method, route, str(status)).inc()
        self.metrics.latency.labels(method, route).observe(seconds)


async def served(app: ASGIApp, scope: Scope, receive: Receive, send: Send,
                 done: Callable[[Scope, int, float], None]) -> None:
    """Serve one HTTP request through ``app``, then tell ``done`` the status the caller
    saw and the seconds it took: also when the app failed (the 500 answered outside the
    middleware), before its error goes on."""
    started = time.perf_counter()
    status = 500  # what the caller sees if the app fails before it answers

    async def record_status(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        await send(message)

    try:
        await app(scope, receive, record_status)
    finally:
        done(scope, status, time.perf_counter() - started)
