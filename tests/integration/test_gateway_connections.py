"""The gateway's connections over raw sockets: a real gateway process closes those that
send nothing, a request head or a body too slowly, and refuses those beyond its cap
while it goes on serving the rest."""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from memoryd.memory.store import MemoryStore
from tests.support.gateway import GatewayProcess, make_key

pytestmark = pytest.mark.slow

# How long a test waits for the gateway to act: far beyond the timeouts configured
# below (1 s), so that a busy machine is not a failure, and a gateway that never acts is.
PATIENCE_S = 45.0
HEAD = b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n"


@pytest.fixture(scope="module")
def gateway_with_deadlines(service_env: dict[str, str], _session_store: object,
                           tmp_path_factory: pytest.TempPathFactory
                           ) -> Iterator[GatewayProcess]:
    yield from _gateway(service_env, tmp_path_factory, MEMORYD_GATEWAY_HEADER_TIMEOUT_S="1",
                        MEMORYD_GATEWAY_BODY_TIMEOUT_S="1")


@pytest.fixture(scope="module")
def gateway_with_a_cap(service_env: dict[str, str], _session_store: object,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    # A long header timeout: the connections held open stay open for the whole test.
    yield from _gateway(service_env, tmp_path_factory, MEMORYD_GATEWAY_MAX_CONNECTIONS="4",
                        MEMORYD_GATEWAY_HEADER_TIMEOUT_S="300")


def _gateway(service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory,
             **env: str) -> Iterator[GatewayProcess]:
    log = tmp_path_factory.mktemp("gateway") / "gateway.log"
    process = GatewayProcess({**service_env, **env}, log, None, "--no-migrate")
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


def _connect(gateway: GatewayProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.port), timeout=PATIENCE_S)


def _until_closed(sock: socket.socket) -> bytes:
    """What the gateway sends until it closes the connection; ``TimeoutError`` if it
    keeps it open past ``PATIENCE_S``."""
    chunks = []
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _one_response(sock: socket.socket) -> bytes:
    """One whole response (with a Content-Length) read from a kept-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed mid-response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(
        gateway_with_deadlines: GatewayProcess) -> None:
    with _connect(gateway_with_deadlines) as sock:
        assert _until_closed(sock) == b""


def test_a_connection_that_stops_in_its_request_head_is_answered_408_and_closed(
        gateway_with_deadlines: GatewayProcess) -> None:
    with _connect(gateway_with_deadlines) as sock:
        sock.sendall(HEAD)
        answer = _until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b'"request_timeout"' in answer and b"connection: close" in answer


def test_a_request_head_sent_a_byte_at_a_time_is_cut_off_at_the_header_timeout(
        gateway_with_deadlines: GatewayProcess) -> None:
    with _connect(gateway_with_deadlines) as sock:
        sock.sendall(HEAD + b"X-Slow: ")
        deadline = time.monotonic() + PATIENCE_S
        answered = False
        while not answered and time.monotonic() < deadline:
            # Each byte is progress, but the head as a whole is late.
            answered = bool(select.select([sock], [], [], 0.2)[0])
            with contextlib.suppress(OSError):
                sock.send(b"a") if not answered else None
        assert answered, "the gateway kept reading a head that never ends"
        answer = _until_closed(sock)
    # A byte crossing the close may make the answer a reset; either way it is closed.
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer


def test_a_kept_alive_connection_whose_next_head_stalls_is_closed(
        gateway_with_deadlines: GatewayProcess) -> None:
    with _connect(gateway_with_deadlines) as sock:
        sock.sendall(HEAD + b"\r\n")
        assert _one_response(sock).startswith(b"HTTP/1.1 200")
        # Any byte stops uvicorn's keep-alive timer: the header timeout takes over.
        sock.sendall(b"GET /hea")
        answer = _until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer


def test_a_body_that_stalls_is_answered_408_and_the_connection_closed(
        gateway_with_deadlines: GatewayProcess, store: MemoryStore, agent_id: str) -> None:
    key = make_key(store, agents=(agent_id,))
    with _connect(gateway_with_deadlines) as sock:
        sock.sendall(f"POST /v1/agents/{agent_id}/memories HTTP/1.1\r\nHost: gateway\r\n"
                     f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: 100\r\n\r\n".encode() + b'{"content": "half')
        answer = _until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b'"request_timeout"' in answer


def test_connections_beyond_the_cap_are_refused_at_once_and_the_rest_are_served(
        gateway_with_a_cap: GatewayProcess) -> None:
    held = [_connect(gateway_with_a_cap) for _ in range(4)]
    beyond = [_connect(gateway_with_a_cap) for _ in range(3)]
    try:
        # Answered before anything is sent (the held ones wait 300 s for a head).
        for sock in beyond:
            answer = _until_closed(sock)
            assert answer.startswith(b"HTTP/1.1 503"), answer
            assert b"retry-after: 1" in answer and b'"unavailable"' in answer
        served = held[0]
        served.sendall(HEAD + b"\r\n")
        assert _one_response(served).startswith(b"HTTP/1.1 200")
    finally:
        for sock in held + beyond:
            sock.close()
    _eventually_healthy(gateway_with_a_cap.url)


def _eventually_healthy(url: str) -> None:
    """Until a fresh connection is served (the gateway sees the closed ones go)."""
    deadline = time.monotonic() + PATIENCE_S
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            last = httpx.get(f"{url}/healthz", timeout=PATIENCE_S)
            if last.status_code == 200:
                return
        time.sleep(0.2)
    raise AssertionError(f"the gateway serves nothing after the refusals: {last}")
