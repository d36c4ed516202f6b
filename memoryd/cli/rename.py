"""Moving an agent to a new id: ``memoryd rename-agent``, and ``memoryd
rename-adk-agents`` for the agents older memoryd's Google ADK adapter named
(``memoryd.integrations.identity``; ``memoryd.memory.renaming`` does the moving)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from memoryd.cli import database
from memoryd.cli.output import as_json, table

if TYPE_CHECKING:
    from memoryd.integrations.identity import LegacyAgent
    from memoryd.memory.store import MemoryStore

_SHOWN = {"move": "moves", "moved": "moved",
          "ambiguous": "ambiguous: pick its pair with --resolve",
          "mixed": "older and newer adapters both wrote to it: not moved",
          "unmatched": "no (app_name, user_id) makes this name: not moved",
          "too long": "its name now is longer than an agent id may be: not moved",
          "occupied": "the new name holds data already: not moved (merge it with "
                      "export and import)"}


def register(commands: Any) -> None:
    rename = commands.add_parser(
        "rename-agent", help="move everything of one agent to a new agent id that holds "
                             "nothing yet (one transaction); without --yes, only shows "
                             "what would move")
    rename.add_argument("old")
    rename.add_argument("new")
    rename.add_argument("--yes", action="store_true", help="confirm: move it")
    rename.add_argument("--json", action="store_true")
    rename.set_defaults(handler=_rename_agent)
    adk = commands.add_parser(
        "rename-adk-agents", help="move the agents older memoryd's ADK adapter named to "
                                  "their names now; ambiguous ones are listed, never moved "
                                  "unless resolved; without --yes, only lists")
    adk.add_argument("--resolve", nargs=3, action="append", default=[],
                     metavar=("AGENT", "APP_NAME", "USER_ID"),
                     help="move the ambiguous AGENT as the pair APP_NAME, USER_ID")
    adk.add_argument("--yes", action="store_true", help="confirm: move them")
    adk.add_argument("--json", action="store_true")
    adk.set_defaults(handler=_rename_adk_agents)


def _rename_agent(args: argparse.Namespace) -> int:
    """Without ``--yes``, the rows that would move, and a refusal."""
    from memoryd.errors import ValidationError
    from memoryd.memory import renaming

    store = database.store()
    found = (renaming.rename_agent(store, args.old, args.new) if args.yes
             else renaming.preview(store, args.old, args.new))
    if args.json:
        print(as_json(found.as_dict()))
    else:
        would = "" if args.yes else "would be "
        print(table(("table", "rows", ""),
                    [(name, n, f"{would}moved") for name, n in found.moved.items() if n]))
    if not args.yes:
        raise ValidationError("yes", "the rename moves the rows above to the new agent: "
                                     "add --yes to confirm")
    print("renamed: every row above moved to the new agent", file=sys.stderr)
    return 0


def _rename_adk_agents(args: argparse.Namespace) -> int:
    """Each older ADK name and what became (or would become) of it."""
    from memoryd.errors import ValidationError

    store = database.store()
    plans = _resolved(_legacy(store), args.resolve)
    outcomes = [(plan, _settle(store, plan, confirmed=args.yes)) for plan in plans]
    if args.json:
        print(as_json([{"agent_id": plan.agent_id, "status": status,
                        "target": plan.target,
                        "pairs": [{"app_name": app, "user_id": user, "agent_id": now}
                                  for (app, user), now in plan.pairs]}
                       for plan, status in outcomes]))
    else:
        print(table(("agent", "new name", ""), [
            (plan.agent_id, plan.target or _pairs(plan), _SHOWN[status])
            for plan, status in outcomes], max_width=100))
    if not args.yes and any(status == "move" for _, status in outcomes):
        raise ValidationError("yes", "the agents above marked 'moves' move to their new "
                                     "names: add --yes to confirm")
    return 0


def _legacy(store: MemoryStore) -> list[LegacyAgent]:
    from memoryd.integrations import identity
    from memoryd.memory import renaming

    found = renaming.sourced_agents(store, identity.ADK_SOURCE, identity.ADK_SCOPE_KEY,
                                    identity.LEGACY_PATTERN)
    return [plan for agent, scoped, unscoped in found
            if (plan := identity.legacy_adk_agent(agent, scoped=scoped,
                                                  unscoped=unscoped)) is not None]


def _resolved(plans: list[LegacyAgent], picks: list[list[str]]) -> list[LegacyAgent]:
    """The plans with each ``--resolve AGENT APP USER`` applied: an ambiguous agent
    moves as the pair the operator picked, which must be one its name may stand for."""
    from dataclasses import replace

    from memoryd.errors import ValidationError

    chosen = {agent: (app, user) for agent, app, user in picks}
    resolved = []
    for plan in plans:
        pick = chosen.pop(plan.agent_id, None)
        pairs = [entry for entry in plan.pairs if entry[0] == pick]
        if pick is not None and (plan.status != "ambiguous" or not pairs
                                 or pairs[0][1] is None):
            raise ValidationError("resolve", "an agent given is not an ambiguous older "
                                             "ADK name of the pair given with it")
        resolved.append(plan if pick is None
                        else replace(plan, pairs=tuple(pairs), status="move"))
    if chosen:
        raise ValidationError("resolve", f"{len(chosen)} agent(s) named are not older ADK "
                                         "names listed here")
    return resolved


def _settle(store: MemoryStore, plan: LegacyAgent, *, confirmed: bool) -> str:
    """Move a plan's agent (when confirmed and its new name is free); its status."""
    from memoryd.integrations import identity
    from memoryd.memory import renaming

    if plan.status != "move" or plan.target is None:
        return plan.status
    if renaming.holds_data(store, plan.target):
        return "occupied"
    if not confirmed:
        return "move"
    mark = renaming.Mark(source=identity.ADK_SOURCE, key=identity.ADK_SCOPE_KEY,
                         value=list(plan.pairs[0][0]))
    renaming.rename_agent(store, plan.agent_id, plan.target, mark=mark)
    return "moved"


def _pairs(plan: LegacyAgent) -> str:
    return "; ".join(f"{now or '(too long)'} (app {app!r}, user {user!r})"
                     for (app, user), now in plan.pairs) or "-"
