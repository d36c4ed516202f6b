"""The gateway's ASGI app: FastAPI for the HTTP API (its pydantic types are the OpenAPI
schema, served at /openapi.json and /docs), the MCP server mounted at /mcp, Prometheus
metrics, health checks and one error format."""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio.to_thread
import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from mcp.server.transport_security import TransportSecuritySettings
from sqlalchemy import Engine, text
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memoryd import logging as mlog
from memoryd import validation as check
from memoryd.auth.keys import KeyVerifier
from memoryd.client import MemoryClient
from memoryd.config import Settings
from memoryd.errors import MemorydError, ValidationError
from memoryd.gateway import access, admin, mcp_tools, problems, routes, schema, threads
from memoryd.gateway.accepted import AcceptedTasks
from memoryd.gateway.body_limit import BodyLimitMiddleware, BodyTooLarge, RawTextMiddleware
from memoryd.gateway.metrics import GatewayMetrics, MetricsMiddleware, route_label, served

READY_TIMEOUT_S = 2.0
# How deep an MCP message may nest: a tool's argument nested deeper than an HTTP body
# may be, inside JSON-RPC's envelope, reaches the tool and is refused by its name; a
# message nested far deeper than any parser should go is refused here.
MCP_MAX_DEPTH = 3 * check.MAX_JSON_DEPTH
# The methods the access log names; any other (a token the caller chose) is "other".
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def create_app(settings: Settings, engine: Engine, client: MemoryClient | None = None
               ) -> FastAPI:
    """The gateway on ``engine`` (API keys) and the broker of ``settings`` (everything
    else). ``client`` defaults to a ``MemoryClient`` that waits ``gateway_timeout_s``."""
    client = client or MemoryClient(settings=settings, timeout=settings.gateway_timeout_s)
    verifier = KeyVerifier(engine)
    accepted = AcceptedTasks(settings)
    mcp = mcp_tools.build_server(client, mcp_tools.KeyBinding(verifier), accepted)
    mcp_http = mcp.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True,
        max_request_body_size=settings.gateway_max_body_bytes,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.gateway_threads
        async with mcp.session_manager.run():
            yield
        client.close()
        accepted.close()

    app = FastAPI(title="memoryd", version="0.1.0", lifespan=lifespan,
                  description="Long-term memory for fleets of LLM agents. Every /v1 call "
                              "takes `Authorization: Bearer mdk_...`; a key reaches only "
                              "the agents its scope covers.")
    app.state.settings, app.state.client, app.state.verifier = settings, client, verifier
    app.state.engine, app.state.accepted = engine, accepted
    # Threads first: ``/memories/{memory_id}`` or ``/sessions`` of an agent id ending in
    # "/threads" would otherwise take the threads named "memories" and "sessions".
    app.include_router(threads.router)
    app.include_router(routes.router)
    app.include_router(admin.router)
    _add_operational_routes(app)
    mcp_endpoint = next(r for r in mcp_http.routes if isinstance(r, Route) and r.path == "/mcp")
    app.router.routes.append(Route("/mcp", McpGate(mcp_endpoint.app, verifier),
                                   methods=["GET", "POST", "DELETE"]))
    _add_error_handlers(app)
    metrics = GatewayMetrics()
    app.state.metrics = metrics
    served = [*threads.router.routes, *routes.router.routes, *admin.router.routes,
              *app.router.routes]
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.gateway_max_body_bytes)
    app.add_middleware(RawTextMiddleware)
    app.add_middleware(MetricsMiddleware, metrics=metrics, routes=served)
    app.add_middleware(AccessLog, routes=served)
    schema.install(app, [*routes.REQUEST_MODELS, *admin.REQUEST_MODELS,
                         *threads.REQUEST_MODELS])
    return app


class McpGate:
    """Refuses MCP over HTTP without a usable key (401) or a bound agent (403) before
    the MCP server sees the request; each tool call checks the binding again. A POST's
    body must be JSON as ``validation.json_body`` reads every body, and one JSON-RPC
    message: else a JSON-RPC error naming what is wrong (the SDK would answer a form or
    a text in plain text, and a message of the wrong shape quoting it)."""

    def __init__(self, app: ASGIApp, verifier: KeyVerifier) -> None:
        self.app = app
        self.verifier = verifier

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            key = await anyio.to_thread.run_sync(access.authenticate, self.verifier,
                                                 request.headers)
            access.bound_agent(key, request.headers)
        except Exception as exc:
            await problems.from_exception(exc)(scope, receive, send)
            return
        if request.method == "POST":
            try:
                body = await request.body()
                message = check.json_body(body, request.headers.get("content-type"),
                                          max_depth=MCP_MAX_DEPTH)
                mcp_tools.jsonrpc_message(message)
            except ClientDisconnect:
                return
            except ValidationError as exc:
                await problems.jsonrpc_error(exc)(scope, receive, send)
                return
            scope, receive = _with_body(scope, receive, _as_read(message))
        await self.app(scope, receive, send)


def _as_read(message: Any) -> bytes:
    """The message as memoryd read it, for the SDK to parse again: its parser and
    ``json_body`` then agree on every byte (a BOM, a duplicate key, NaN)."""
    return json.dumps(message, ensure_ascii=True, allow_nan=False).encode()


def _with_body(scope: Scope, receive: Receive, body: bytes) -> tuple[Scope, Receive]:
    """``scope`` and ``receive`` of a request whose body, already read, is ``body``."""
    headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:  # (a disconnect, while the response streams)
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}, replay


class AccessLog:
    """One line per request on uvicorn's access logger (``--access-log``): method, the
    route's template (``unmatched`` for a path no route serves), status, duration and a
    request id, also bound to every other line logged while serving the request. Never
    the path as sent: it holds agent ids, job names, eviction ids and whatever a caller
    puts in a path no route serves (``memoryd.logging`` drops uvicorn's own line)."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.routes = routes
        self.logger = logging.getLogger(mlog.ACCESS_LOGGER)
        self.log = structlog.get_logger(mlog.ACCESS_LOGGER)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # Not reset: the request's task ends with it, and the 500 answered outside this
        # middleware is logged with it.
        mlog.bind(request_id=uuid.uuid4().hex)
        await served(self.app, scope, receive, send, self._write)

    def _write(self, scope: Scope, status: int, duration_s: float) -> None:
        # Off unless uvicorn's --access-log left the logger a handler (or its root's).
        if self.logger.isEnabledFor(logging.INFO) and self.logger.hasHandlers():
            route = route_label(scope, self.routes)
            method = scope["method"] if scope["method"] in HTTP_METHODS else "other"
            self.log.info(f"{method} {route} {status}", method=method, route=route,
                          status=status, duration_ms=round(duration_s * 1000, 1))


def _add_operational_routes(app: FastAPI) -> None:
    @app.get("/healthz", tags=["operations"], summary="The gateway process is up")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"],
             summary="The broker and the database are reachable (503 if not)")
    def readyz(request: Request) -> JSONResponse:
        checks = {"broker": _broker_ready(request.app.state.client),
                  "database": _database_ready(request.app.state.engine)}
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse({"status": "ready" if ready else "unavailable", **checks},
                            status_code=200 if ready else 503)

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics")
    def metrics(request: Request) -> Response:
        payload, content_type = request.app.state.metrics.exposition()
        return Response(payload, media_type=content_type)


def _broker_ready(client: MemoryClient) -> str:
    try:
        client.check_broker(READY_TIMEOUT_S)
    except Exception as exc:
        return f"unreachable: {type(exc).__name__}"
    return "ok"


def _database_ready(engine: Engine) -> str:
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:
        return f"unreachable: {type(exc).__name__}"
    return "ok"


def _add_error_handlers(app: FastAPI) -> None:
    async def memoryd_error(_request: Request, exc: Exception) -> Response:
        return problems.from_exception(exc)

    async def invalid_request(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first: dict[str, Any] = exc.errors()[0] if exc.errors() else {}
        where = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")]
        return problems.response(422, "validation_error", str(first.get("msg", "invalid")),
                                 ".".join(where) or "body")

    async def body_too_large(_request: Request, _exc: Exception) -> Response:
        max_bytes = app.state.settings.gateway_max_body_bytes
        return problems.response(413, "too_large", f"request body is over {max_bytes} bytes",
                                 "body")

    async def http_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kinds = {404: "not_found", 405: "method_not_allowed", 400: "bad_request"}
        return problems.response(exc.status_code, kinds.get(exc.status_code, "http_error"),
                                 str(exc.detail), headers=dict(exc.headers or {}))

    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(BodyTooLarge, body_too_large)
    # Expected failures by class (answered, not re-raised); anything else is a 500 that
    # Starlette answers with the same body and logs.
    handled: tuple[type[Exception], ...] = (MemorydError, *problems.UNREACHABLE, Exception)
    for cls in handled:
        app.add_exception_handler(cls, memoryd_error)
