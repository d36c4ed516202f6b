"""Prometheus metrics of the gateway: requests by route and status, and their latency.

A plain ASGI middleware (no per-request task or body buffering, so MCP's streamed
responses pass through untouched). Routes are labelled by their template
(``/v1/agents/{agent}/recall``), never by the concrete path: agent ids stay out of the
metrics and the label set stays small."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
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


def route_label(scope: Scope) -> str:
    route: Any = scope.get("route")
    path = getattr(route, "path_format", None)  # the template without its converters
    return str(path) if path else "unmatched"


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the caller sees if the app fails before it answers

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            method, route = scope["method"], route_label(scope)
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - started)
