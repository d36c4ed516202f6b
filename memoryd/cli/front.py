"""The front door's commands: ``memoryd gateway`` (HTTP API and MCP over HTTP) and
``memoryd mcp --agent A`` (MCP over stdio, for desktop hosts)."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    gateway = commands.add_parser("gateway", help="serve the HTTP API and MCP at /mcp")
    gateway.add_argument("--host", default=None, help="default MEMORYD_GATEWAY_HOST "
                                                      "(127.0.0.1)")
    gateway.add_argument("--port", type=int, default=None,
                         help="default MEMORYD_GATEWAY_PORT (8765)")
    gateway.add_argument("--access-log", action="store_true", help="log every request")
    gateway.add_argument("--no-migrate", action="store_true",
                         help="do not apply migrations at start-up")
    gateway.set_defaults(handler=_gateway)

    mcp = commands.add_parser("mcp", help="serve MCP over stdio for one agent (desktop "
                                          "hosts); needs the broker, like the client")
    mcp.add_argument("--agent", required=True, help="the agent every tool acts for")
    mcp.set_defaults(handler=_mcp)


def _gateway(args: argparse.Namespace) -> int:
    import uvicorn

    from memoryd.config import get_settings
    from memoryd.db.engine import get_engine
    from memoryd.db.migrate import upgrade
    from memoryd.gateway.app import create_app
    from memoryd.gateway.connections import ConnectionLimits, guarded_protocol

    settings = get_settings()
    engine = get_engine()
    if not args.no_migrate:
        upgrade(engine)
    app = create_app(settings, engine)
    # log_config=None: uvicorn's records go through memoryd's logging (JSON off a TTY).
    # The protocol closes connections that send their request too slowly, or too many.
    uvicorn.run(app, host=args.host or settings.gateway_host,
                port=args.port or settings.gateway_port, log_config=None,
                access_log=args.access_log, server_header=False,
                http=guarded_protocol(ConnectionLimits.of(settings)),
                timeout_keep_alive=settings.gateway_keep_alive_s)
    return 0


def _mcp(args: argparse.Namespace) -> int:
    import anyio

    from memoryd.client import MemoryClient
    from memoryd.gateway.mcp_tools import FixedAgent, build_server

    binding = FixedAgent(args.agent)  # validated before anything starts
    with MemoryClient() as client:
        anyio.run(build_server(client, binding).run_stdio_async)
    return 0
