"""Checks of the deployment files: docker-compose.yml, Procfile, Dockerfile, .dockerignore
and .env.example.

Nothing here starts containers; the files are parsed and their content checked, so a
broken dependency order, an exposed port or a committed secret fails in CI.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
PROCFILE = ROOT / "Procfile"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
ENV_EXAMPLE = ROOT / ".env.example"

# Placeholder secrets must carry this marker, so that nobody mistakes them for real ones.
DEV_MARKER = "dev-only"
MEMORYD_SUBCOMMANDS = {"migrate", "worker", "beat", "gateway"}
EXPECTED_SERVICES = {
    "postgres",
    "redis",
    "migrate",
    "worker-memory",
    "worker-maintenance",
    "beat",
    "gateway",
    "flower",
}
LONG_RUNNING = ("worker-memory", "worker-maintenance", "beat", "gateway")
PROCFILE_PROCESSES = {"memory", "maintenance", "beat", "gateway", "flower"}
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|BASIC_AUTH|PASSWD", re.IGNORECASE)
# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}
INTERPOLATION = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")
URL_PASSWORD = re.compile(r"://[^/:@\s]*:(?P<password>[^@\s]+)@")


# --- helpers ---------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict), "docker-compose.yml is not a mapping"
    return data


def _services() -> dict[str, dict[str, Any]]:
    services = _compose().get("services")
    assert isinstance(services, dict), "docker-compose.yml has no services mapping"
    return services


def _argv(command: str | list[str] | None) -> list[str]:
    """A compose command (string or list) or a Procfile command as an argument list."""
    if command is None:
        return []
    if isinstance(command, str):
        return shlex.split(command)
    assert all(isinstance(part, str) for part in command), command
    return list(command)


def _environment(service: dict[str, Any]) -> dict[str, str | None]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        listed: dict[str, str | None] = {}
        for item in env:
            key, sep, value = str(item).partition("=")
            listed[key] = value if sep else None
        return listed
    assert isinstance(env, dict), env
    return {str(key): None if value is None else str(value) for key, value in env.items()}


def _option(argv: list[str], name: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` in argv."""
    for index, arg in enumerate(argv):
        if arg == name and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _healthcheck_argv(service: dict[str, Any]) -> list[str]:
    test = service["healthcheck"]["test"]
    if isinstance(test, str):
        return shlex.split(test)
    if test[0] == "CMD-SHELL":
        return shlex.split(test[1])
    assert test[0] == "CMD", f"unexpected healthcheck form {test!r}"
    return list(test[1:])


def _procfile() -> dict[str, str]:
    processes: dict[str, str] = {}
    for number, raw in enumerate(PROCFILE.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9_-]+):\s*(\S.*)", line)
        assert match, f"Procfile line {number} is not 'name: command': {raw!r}"
        name, command = match.groups()
        assert name not in processes, f"Procfile defines {name!r} twice"
        processes[name] = command
    return processes


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    instructions = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    return instructions


def _dockerfile_cmd() -> list[str]:
    cmds = [rest for keyword, rest in _dockerfile_instructions() if keyword == "CMD"]
    assert cmds, "Dockerfile has no CMD"
    rest = cmds[-1]
    if rest.startswith("["):
        argv = json.loads(rest)
        assert isinstance(argv, list)
        return [str(arg) for arg in argv]
    return shlex.split(rest)


def _all_commands() -> list[tuple[str, list[str]]]:
    """Every command line in compose (command, entrypoint), the Procfile and the Dockerfile."""
    found = []
    for name, service in _services().items():
        for key in ("entrypoint", "command"):
            if service.get(key) is not None:
                found.append((f"compose {name}.{key}", _argv(service[key])))
    for name, command in _procfile().items():
        found.append((f"Procfile {name}", _argv(command)))
    found.append(("Dockerfile CMD", _dockerfile_cmd()))
    return found


def secret_problems(name: str, value: str | None) -> list[str]:
    """Why ``name=value`` would put a real secret in a committed file ([] if it does not).

    Allowed: no value (passed through from the environment), ``${VAR}`` / ``${VAR:?msg}``
    (required from the environment), and defaults or literals carrying DEV_MARKER.
    A password inside a URL must itself be one of those.
    """
    if value is None:
        return []
    problems = []
    for match in INTERPOLATION.finditer(value):
        op, arg = match.group("op"), match.group("arg")
        if (
            op
            and "-" in op
            and SECRET_NAME.search(match.group("name"))
            and arg
            and DEV_MARKER not in arg
        ):
            problems.append(f"{name}: default of ${{{match.group('name')}}} lacks {DEV_MARKER!r}")
    literal = INTERPOLATION.sub("", value)
    if SECRET_NAME.search(name) and literal.strip() and DEV_MARKER not in literal:
        problems.append(f"{name}: literal secret {value!r}")
    for match in URL_PASSWORD.finditer(value):
        password = match.group("password")
        if not INTERPOLATION.fullmatch(password) and DEV_MARKER not in password:
            problems.append(f"{name}: literal password in URL {value!r}")
    return problems


def _required(value: str) -> str | None:
    """The variable ``value`` is, when it is exactly one required from the environment
    (``${NAME:?message}``); None otherwise."""
    match = INTERPOLATION.fullmatch(value)
    return match.group("name") if match and match.group("op") in (":?", "?") else None


def credential_problems(where: str, url: str | None, *, user: bool = False,
                        placeholders: bool = False) -> list[str]:
    """Why a client would reach a service at ``url`` without credentials the operator
    set ([] if it would not): the password (and with ``user``, the user name) must be
    required from the environment, or with ``placeholders`` a DEV_MARKER value."""
    if not url:
        return [f"{where}: no URL"]
    # Interpolations may hold any character: stand-ins first, then parse.
    found = [m.group(0) for m in INTERPOLATION.finditer(url)]
    bare = INTERPOLATION.sub(lambda m: f"var{found.index(m.group(0))}", url)
    parts = urlsplit(bare)
    checked = {"password": parts.password, **({"user": parts.username} if user else {})}
    problems = []
    for what, raw in checked.items():
        value = re.sub(r"var(\d+)", lambda m: found[int(m.group(1))], raw or "")
        if not value:
            problems.append(f"{where}: no {what} in {url!r}")
        elif not _required(value) and not (placeholders and DEV_MARKER in value):
            problems.append(f"{where}: {what} {value!r} is not required from the environment")
    return problems


# --- the helpers themselves can fail -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("POSTGRES_PASSWORD", "hunter2"),
        ("POSTGRES_PASSWORD", "${POSTGRES_PASSWORD:-hunter2}"),
        ("FLOWER_BASIC_AUTH", "admin:admin"),
        ("MEMORYD_DATABASE_URL", "postgresql://memoryd:hunter2@postgres:5432/memoryd"),
        ("MEMORYD_ANTHROPIC_API_KEY", "sk-ant-api03-abc"),
        ("MEMORYD_BROKER_URL", "redis://:hunter2@redis:6379/0"),
    ],
)
def test_secret_check_flags_literal_secrets(name: str, value: str) -> None:
    assert secret_problems(name, value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("POSTGRES_PASSWORD", "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"),
        ("POSTGRES_PASSWORD", "${POSTGRES_PASSWORD:-memoryd-dev-only}"),
        ("FLOWER_BASIC_AUTH", "admin:change-me-dev-only"),
        ("MEMORYD_DATABASE_URL", "postgresql://memoryd:${POSTGRES_PASSWORD}@postgres:5432/m"),
        ("MEMORYD_ANTHROPIC_API_KEY", None),
        ("MEMORYD_BROKER_URL", "redis://redis:6379/0"),
    ],
)
def test_secret_check_accepts_placeholders(name: str, value: str | None) -> None:
    assert secret_problems(name, value) == []


@pytest.mark.parametrize(
    ("url", "user"),
    [
        ("redis://redis:6379/0", False),
        ("redis://:@redis:6379/0", False),
        ("redis://:hunter2@redis:6379/0", False),
        ("redis://:${REDIS_PASSWORD:-}@redis:6379/0", False),
        ("amqp://guest:guest@rabbitmq:5672//", True),
        ("amqp://memoryd:${RABBITMQ_PASSWORD:?set it}@rabbitmq:5672//", True),
        ("amqp://${RABBITMQ_USER:?set it}@rabbitmq:5672//", True),
    ],
)
def test_credential_check_flags_urls_without_required_credentials(url: str, user: bool) -> None:
    assert credential_problems("url", url, user=user)


@pytest.mark.parametrize(
    ("url", "user", "placeholders"),
    [
        ("redis://:${REDIS_PASSWORD:?set REDIS_PASSWORD}@redis:6379/0", False, False),
        ("amqp://${RABBITMQ_USER:?set it}:${RABBITMQ_PASSWORD:?set it}@rabbitmq:5672//",
         True, False),
        ("redis://:change-me-dev-only@127.0.0.1:6379/0", False, True),
    ],
)
def test_credential_check_accepts_required_credentials(
        url: str, user: bool, placeholders: bool) -> None:
    assert credential_problems("url", url, user=user, placeholders=placeholders) == []


def test_procfile_parser_rejects_garbage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "Procfile"
    bad.write_text("memory memoryd worker\n")
    monkeypatch.setattr(f"{__name__}.PROCFILE", bad)
    with pytest.raises(AssertionError, match="not 'name: command'"):
        _procfile()


# --- docker-compose.yml ----------------------------------------------------------------------


def test_compose_has_no_version_key_and_all_services() -> None:
    compose = _compose()
    assert "version" not in compose, "the compose spec has no version: key"
    missing = EXPECTED_SERVICES - set(_services())
    assert not missing, f"services missing from docker-compose.yml: {sorted(missing)}"


def test_postgres_is_pgvector_with_healthcheck_and_volume() -> None:
    compose = _compose()
    postgres = _services()["postgres"]
    assert postgres["image"].startswith("pgvector/pgvector:"), postgres["image"]
    env = _environment(postgres)
    assert env["POSTGRES_USER"] == "memoryd"
    assert env["POSTGRES_DB"] == "memoryd"
    assert "pg_isready" in _healthcheck_argv(postgres)
    volume_names = {v.split(":", 1)[0] for v in postgres["volumes"]}
    assert volume_names & set(compose.get("volumes") or {}), "postgres data is not a named volume"
    assert "ports" not in postgres, "postgres should not be published on the host"


def test_redis_is_durable_with_healthcheck() -> None:
    redis = _services()["redis"]
    assert redis["image"].startswith("redis:7"), redis["image"]
    check = _healthcheck_argv(redis)
    assert "redis-cli" in check and "ping" in check, check
    assert "PONG" in check, "a NOAUTH answer must not count as healthy"
    argv = _argv(redis.get("command"))
    assert _option(argv, "--appendonly") == "yes", f"redis needs --appendonly yes: {argv}"
    assert redis.get("volumes"), "redis has no volume for its append-only file"


def test_migrate_is_one_shot_after_postgres() -> None:
    migrate = _services()["migrate"]
    assert migrate.get("build") == "."
    assert _argv(migrate["command"]) == ["memoryd", "migrate"]
    # Quoted in YAML: an unquoted no would load as False.
    assert migrate.get("restart") == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert _environment(migrate).get("MEMORYD_DATABASE_URL")


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_long_running_services_wait_for_dependencies(name: str) -> None:
    service = _services()[name]
    assert service.get("build") == "."
    assert service.get("restart") == "unless-stopped"
    conditions = {dep: spec["condition"] for dep, spec in service["depends_on"].items()}
    assert conditions.get("postgres") == "service_healthy", conditions
    assert conditions.get("redis") == "service_healthy", conditions
    assert conditions.get("migrate") == "service_completed_successfully", conditions
    env = _environment(service)
    assert env.get("MEMORYD_DATABASE_URL", "").startswith("postgresql://")
    assert "@postgres:" in env["MEMORYD_DATABASE_URL"]
    assert "@redis:6379/0" in env["MEMORYD_BROKER_URL"]
    assert "@redis:6379/1" in env["MEMORYD_RESULT_BACKEND"]


def test_memoryd_services_share_one_environment() -> None:
    """The x-memoryd-env anchor: every memoryd service sees the same MEMORYD_* settings."""
    anchor = _compose().get("x-memoryd-env")
    assert isinstance(anchor, dict) and anchor, "x-memoryd-env is missing"
    for name in ("migrate", *LONG_RUNNING, "flower"):
        env = _environment(_services()[name])
        memoryd_env = {k: v for k, v in env.items() if k.startswith("MEMORYD_")}
        assert memoryd_env == {str(k): v for k, v in anchor.items()}, name


def test_workers_consume_different_queues() -> None:
    services = _services()
    memory = _argv(services["worker-memory"]["command"])
    maintenance = _argv(services["worker-maintenance"]["command"])
    assert memory[:2] == ["memoryd", "worker"], memory
    assert maintenance[:2] == ["memoryd", "worker"], maintenance
    assert _option(memory, "--queues") == "memory"
    assert _option(maintenance, "--queues") == "maintenance"
    # The memory worker's consumers: one per core of the container (no prefork pool).
    assert "--concurrency" not in memory
    assert _option(maintenance, "--concurrency") == "1"


def test_worker_healthchecks_escape_hostname() -> None:
    """If a worker has a healthcheck, it pings its own node, with $$ so the container expands it."""
    for name in ("worker-memory", "worker-maintenance"):
        service = _services()[name]
        if "healthcheck" not in service:
            continue
        raw = json.dumps(service["healthcheck"]["test"])
        assert "inspect" in raw and "ping" in raw, raw
        assert "$$HOSTNAME" in raw, f"{name}: use $$HOSTNAME, compose would expand $HOSTNAME"


def test_commands_do_not_rely_on_host_side_variables() -> None:
    """A single $ in a command or healthcheck would be substituted by compose on the host."""
    for name, service in _services().items():
        texts = [json.dumps(service.get(key)) for key in ("command", "entrypoint")]
        if "healthcheck" in service:
            texts.append(json.dumps(service["healthcheck"]["test"]))
        for text in texts:
            stray = re.findall(r"(?<!\$)\$(?![${])", text.replace("$$", ""))
            assert not stray, f"{name}: unescaped $ in {text}"


def test_exactly_one_beat() -> None:
    beats = [
        name
        for name, service in _services().items()
        if _argv(service.get("command"))[:2] == ["memoryd", "beat"]
    ]
    assert beats == ["beat"], beats
    replicas = (_services()["beat"].get("deploy") or {}).get("replicas", 1)
    assert replicas == 1
    assert "advisory lock" in COMPOSE_FILE.read_text(), "explain why beat is not scaled"


def test_flower_has_basic_auth_from_env_and_binds_loopback() -> None:
    flower = _services()["flower"]
    argv = _argv(flower["command"])
    assert argv[:3] == ["python", "-m", "memoryd.cli.flower_monitor"], argv
    assert _option(argv, "--port") == "5555"
    auth = _environment(flower).get("FLOWER_BASIC_AUTH")
    assert auth, "flower has no FLOWER_BASIC_AUTH"
    match = INTERPOLATION.fullmatch(auth)
    assert match and match.group("name") == "FLOWER_BASIC_AUTH", auth
    assert match.group("op") in (":?", "?") or DEV_MARKER in (match.group("arg") or ""), auth
    assert flower["depends_on"]["redis"]["condition"] == "service_healthy"
    assert flower.get("ports"), "flower is not published at all"
    for port in flower["ports"]:
        assert str(port).startswith("127.0.0.1:"), f"flower must bind 127.0.0.1 only: {port}"


def test_published_ports_bind_loopback_only() -> None:
    for name, service in _services().items():
        for port in service.get("ports") or []:
            if isinstance(port, dict):
                assert port.get("host_ip") == "127.0.0.1", f"{name}: {port}"
            else:
                assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} publicly"


def test_compose_has_no_literal_secrets() -> None:
    problems = []
    for key, value in (_compose().get("x-memoryd-env") or {}).items():
        problems += secret_problems(str(key), None if value is None else str(value))
    for name, service in _services().items():
        for key, value in _environment(service).items():
            problems += [f"{name}: {p}" for p in secret_problems(key, value)]
    assert not problems, problems
    text = COMPOSE_FILE.read_text()
    assert "sk-ant-" not in text
    # The secrets really are wired to the environment, not dropped.
    assert "${POSTGRES_PASSWORD" in _environment(_services()["postgres"])["POSTGRES_PASSWORD"]


def test_no_service_runs_or_is_reached_without_credentials() -> None:
    """PostgreSQL and Redis require passwords the operator sets, and every memoryd
    service's URLs carry them."""
    services = _services()
    problems = []
    for name in ("migrate", *LONG_RUNNING, "flower"):
        env = _environment(services[name])
        for key in ("MEMORYD_DATABASE_URL", "MEMORYD_BROKER_URL", "MEMORYD_RESULT_BACKEND"):
            problems += credential_problems(f"{name}.{key}", env.get(key))
    assert not problems, problems
    assert _required(_environment(services["postgres"])["POSTGRES_PASSWORD"] or "")
    redis = services["redis"]
    requirepass = _option(_argv(redis["command"]), "--requirepass")
    assert requirepass and _required(requirepass) == "REDIS_PASSWORD", redis["command"]
    assert _required(_environment(redis).get("REDISCLI_AUTH") or "") == "REDIS_PASSWORD"
    broker = _environment(services["worker-memory"])["MEMORYD_BROKER_URL"] or ""
    assert requirepass in broker, "the broker URL carries the password Redis requires"


def test_services_do_not_run_as_root_explicitly() -> None:
    for name, service in _services().items():
        assert str(service.get("user", "")).split(":")[0] not in ("root", "0"), name
        assert not service.get("privileged"), name


# --- every memoryd invocation is a real subcommand -------------------------------------------


def test_memoryd_subcommands_exist() -> None:
    seen = set()
    for where, argv in _all_commands():
        if argv and argv[0] == "memoryd":
            assert len(argv) > 1, f"{where}: bare memoryd"
            assert argv[1] in MEMORYD_SUBCOMMANDS, f"{where}: unknown subcommand {argv[1]!r}"
            seen.add(argv[1])
        if argv and argv[0] == "celery":
            assert _option(argv, "-A") == "memoryd.worker", f"{where}: {argv}"
    assert seen == MEMORYD_SUBCOMMANDS, f"subcommands used: {sorted(seen)}"


# --- Procfile -----------------------------------------------------------------------------------


def test_procfile_processes() -> None:
    processes = _procfile()
    assert set(processes) == PROCFILE_PROCESSES, sorted(processes)
    memory = _argv(processes["memory"])
    maintenance = _argv(processes["maintenance"])
    assert memory[:2] == ["memoryd", "worker"] and _option(memory, "--queues") == "memory"
    assert _option(memory, "--concurrency") is None  # one consumer per core
    assert maintenance[:2] == ["memoryd", "worker"]
    assert _option(maintenance, "--queues") == "maintenance"
    assert _option(maintenance, "--concurrency") == "1"
    assert _argv(processes["beat"]) == ["memoryd", "beat"]
    flower = _argv(processes["flower"])
    assert flower[:3] == ["python", "-m", "memoryd.cli.flower_monitor"], flower
    assert _option(flower, "--address") == "127.0.0.1", "flower on one node: loopback only"
    assert not any("basic" in arg.lower() for arg in flower), "auth comes from the environment"


# --- Dockerfile and .dockerignore -----------------------------------------------------------------


def test_dockerfile_base_install_and_non_root_user() -> None:
    instructions = _dockerfile_instructions()
    keywords = [keyword for keyword, _ in instructions]
    froms = [rest for keyword, rest in instructions if keyword == "FROM"]
    assert froms and froms[-1].split()[0] == "python:3.11-slim", froms
    runs = " ".join(rest for keyword, rest in instructions if keyword == "RUN")
    assert re.search(r"pip install --no-cache-dir '\.\[server\]'", runs), runs
    users = [
        (index, rest) for index, (keyword, rest) in enumerate(instructions) if keyword == "USER"
    ]
    assert users, "Dockerfile has no USER line: the image would run as root"
    last_index, last_user = users[-1]
    assert last_user.split(":")[0] not in ("root", "0"), last_user
    assert last_index < keywords.index("CMD"), "USER must come before CMD"
    # Nothing after the last USER switches back (no RUN as root at the end).
    assert "USER" not in keywords[last_index + 1 :]


def test_dockerfile_default_command() -> None:
    argv = _dockerfile_cmd()
    assert argv[:2] == ["memoryd", "worker"], argv
    assert _option(argv, "--queues") == "memory", argv


def test_dockerignore_excludes_local_state_but_not_sources() -> None:
    patterns = {
        line.strip().rstrip("/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for required in (".venv", ".git", "bench/out", ".env"):
        assert required in patterns, f".dockerignore lacks {required}"
    assert {"**/__pycache__", "__pycache__"} & patterns
    for needed in ("memoryd", "pyproject.toml", "README.md", "*", "*.toml", "*.md"):
        assert needed not in patterns, f".dockerignore drops {needed}, which the build needs"


# --- .env.example ---------------------------------------------------------------------------


def _env_example() -> dict[str, str]:
    values = {}
    for raw in ENV_EXAMPLE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f".env.example line is not KEY=value: {raw!r}"
        values[key.strip()] = value.strip()
    return values


def test_env_example_lists_variables_with_placeholders() -> None:
    values = _env_example()
    text = ENV_EXAMPLE.read_text()
    for required in (
        "POSTGRES_PASSWORD",
        "REDIS_PASSWORD",
        "FLOWER_BASIC_AUTH",
        "MEMORYD_DATABASE_URL",
        "MEMORYD_BROKER_URL",
        "MEMORYD_RESULT_BACKEND",
        "MEMORYD_TIMEZONE",
    ):
        assert required in values, f".env.example lacks {required}"
    assert "MEMORYD_ANTHROPIC_API_KEY" in text, ".env.example does not mention the API key"
    assert ":" in values["FLOWER_BASIC_AUTH"], "FLOWER_BASIC_AUTH is user:password"
    problems = [p for key, value in values.items() for p in secret_problems(key, value)]
    assert not problems, problems
    for key in ("POSTGRES_PASSWORD", "REDIS_PASSWORD", "FLOWER_BASIC_AUTH"):
        assert DEV_MARKER in values[key], f"{key} placeholder must say {DEV_MARKER}"
    problems = [p for key in ("MEMORYD_DATABASE_URL", "MEMORYD_BROKER_URL",
                              "MEMORYD_RESULT_BACKEND")
                for p in credential_problems(key, values[key], placeholders=True)]
    assert not problems, problems
    # Every variable compose interpolates is documented.
    interpolated = {m.group("name") for m in INTERPOLATION.finditer(COMPOSE_FILE.read_text())}
    undocumented = {name for name in interpolated if name not in text}
    assert not undocumented, f"not in .env.example: {sorted(undocumented)}"


def test_worker_healthchecks_ping_the_node_names_memoryd_worker_uses() -> None:
    # `memoryd worker --queues memory` runs memory-1, memory-2, ... (one per core) and
    # `--queues maintenance` one node named maintenance (memoryd/cli/nodes.py).
    from memoryd.cli.nodes import plan_nodes

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for service in ("worker-memory", "worker-maintenance"):
        argv = _argv(compose["services"][service]["command"])
        queues = argv[argv.index("--queues") + 1].split(",")
        concurrency = (int(argv[argv.index("--concurrency") + 1])
                       if "--concurrency" in argv else None)
        first = plan_nodes(queues, concurrency=concurrency, processes=2)[0].name
        test = " ".join(compose["services"][service]["healthcheck"]["test"])
        assert f"-d {first}@$$HOSTNAME" in test.replace("$$$$", "$$"), service


def test_worker_nodes_use_every_core_for_the_memory_queue_unless_told() -> None:
    from memoryd.cli.nodes import plan_nodes

    four = plan_nodes(["memory"], concurrency=None, processes=4)
    assert [(n.name, n.pool) for n in four] == [(f"memory-{i}", "solo") for i in range(1, 5)]
    assert [n.name for n in plan_nodes(["memory"], concurrency=None, processes=1)] == ["memory"]
    both = plan_nodes(["memory", "maintenance"], concurrency=None, processes=2)
    assert [(n.name, n.queues, n.pool) for n in both] == [
        ("memory-1", ("memory",), "solo"), ("memory-2", ("memory",), "solo"),
        ("maintenance", ("maintenance",), "prefork")]
    named = plan_nodes(["memory", "maintenance"], concurrency=None, processes=1, name="a")
    assert [n.name for n in named] == ["a", "a-maintenance"]
    # An explicit --concurrency: one prefork node for all its queues, as named before.
    [prefork] = plan_nodes(["memory", "maintenance"], concurrency=3, processes=None)
    assert (prefork.name, prefork.pool, prefork.concurrency) == ("memory-maintenance",
                                                                 "prefork", 3)


def test_the_gateway_listens_in_its_container_and_is_published_on_loopback() -> None:
    gateway = _services()["gateway"]
    argv = _argv(gateway["command"])
    assert argv[:2] == ["memoryd", "gateway"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0"  # reachable from the port mapping
    assert "--no-migrate" in argv  # the migrate service does that, once
    assert gateway["ports"] == ["127.0.0.1:${GATEWAY_HOST_PORT:-8765}:8765"]
    check = " ".join(_healthcheck_argv(gateway))
    assert "http://127.0.0.1:8765/healthz" in check
    assert "EXPOSE 8765" in DOCKERFILE.read_text()



# --- docker-compose.rabbitmq.yml: RabbitMQ as the broker ---------------------------------

RABBITMQ_OVERRIDE = ROOT / "docker-compose.rabbitmq.yml"
BROKER_USERS = ("worker-memory", "worker-maintenance", "beat", "gateway", "flower")


def _override() -> dict[str, Any]:
    loaded = yaml.safe_load(RABBITMQ_OVERRIDE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_rabbitmq_override_points_every_broker_user_at_rabbitmq() -> None:
    services = _override()["services"]
    base = _services()
    for name in BROKER_USERS:
        assert name in base, f"{name} overridden but not in docker-compose.yml"
        url = services[name]["environment"]["MEMORYD_BROKER_URL"]
        assert url.startswith("amqp://${RABBITMQ_USER:?"), url
        assert credential_problems(name, url, user=True) == []
        assert url.endswith("@rabbitmq:5672//"), url
        assert services[name]["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
    # The result backend stays on Redis: the override does not touch it.
    assert all("MEMORYD_RESULT_BACKEND" not in services[n]["environment"]
               for n in BROKER_USERS)


def test_rabbitmq_needs_a_user_and_password_keeps_its_data_and_listens_on_loopback_only(
        ) -> None:
    rabbit = _override()["services"]["rabbitmq"]
    # An operator's user replaces "guest": both are required from the environment.
    assert _required(rabbit["environment"]["RABBITMQ_DEFAULT_USER"]) == "RABBITMQ_USER"
    assert _required(rabbit["environment"]["RABBITMQ_DEFAULT_PASS"]) == "RABBITMQ_PASSWORD"
    assert any(v.endswith(":/var/lib/rabbitmq") for v in rabbit["volumes"])
    assert "rabbitmq-diagnostics" in _healthcheck_argv(rabbit)
    assert all(str(port).startswith("127.0.0.1:") for port in rabbit["ports"])
    assert "rabbitmq-data" in _override()["volumes"]
