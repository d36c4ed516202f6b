"""What the gateway checks of a request's bytes before a route reads them: a body over
``gateway_max_body_bytes`` is 413 before it is read whole (by Content-Length when the
caller sends one, by counting otherwise), and a path or query string whose
percent-encoded bytes are not UTF-8 never reaches a route as replacement characters."""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memoryd import validation as check
from memoryd.gateway import problems


class BodyTooLarge(Exception):
    """The streamed body passed the limit (raised inside ``receive``)."""


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge:
            if not started:
                await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = problems.response(
            413, "too_large", f"request body is over {self.max_bytes} bytes", "body")
        await refusal(scope, receive, send)


class RawTextMiddleware:
    """The server decodes a path's bytes with replacement characters, so ``%ED%A0%80``
    would reach a route as ``'���'``, a valid id. Here a path that is not UTF-8 reaches
    the routes with lone surrogates in place of its bad bytes (Python's
    ``surrogateescape``, as for a command line), which the argument rules refuse naming
    the parameter; a query parameter that is not UTF-8 is refused here, by its name."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            bad = _bad_query_parameter(scope.get("query_string", b""))
            if bad is not None:
                refusal = problems.response(422, "validation_error", "is not valid UTF-8",
                                            bad)
                await refusal(scope, receive, send)
                return
            scope = _path_as_sent(scope)
        await self.app(scope, receive, send)


def _path_as_sent(scope: Scope) -> Scope:
    """``scope`` with its path decoded from the bytes sent, where they are not UTF-8 and
    a route takes the path (a copy: the server's own scope keeps what its access log
    prints). A path no route takes is left as it was: the router would answer it with
    a redirect, whose URL must encode."""
    raw = scope.get("raw_path")
    if not raw:
        return scope
    sent = unquote_to_bytes(raw)
    try:
        sent.decode("utf-8")
    except UnicodeDecodeError:
        escaped = {**scope, "path": sent.decode("utf-8", "surrogateescape")}
        routes = getattr(getattr(scope.get("app"), "router", None), "routes", ())
        if any(route.matches(escaped)[0] is not Match.NONE for route in routes):
            return escaped
    return scope


def _bad_query_parameter(query: bytes) -> str | None:
    """The field to name for the first query parameter that is not UTF-8, if any."""
    for pair in query.split(b"&"):
        name, _, value = pair.partition(b"=")
        try:
            shown = _form_text(name)
        except UnicodeDecodeError:
            return "query"
        try:
            _form_text(value)
        except UnicodeDecodeError:
            return check.field_name("", shown, unnamed="query")
    return None


def _form_text(part: bytes) -> str:
    return unquote_to_bytes(part.replace(b"+", b" ")).decode("utf-8")
