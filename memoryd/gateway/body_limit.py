"""Refuse request bodies over ``gateway_max_body_bytes`` with 413 before reading them
whole: by Content-Length when the caller sends one, by counting otherwise."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
