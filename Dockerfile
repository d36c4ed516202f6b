# memoryd server image: workers, beat, migrations, the gateway and Flower all run from it;
# docker-compose.yml picks the command per service.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The home and the data directory in it are the memoryd user's alone (0700).
RUN groupadd --system --gid 10001 memoryd \
    && useradd --system --uid 10001 --gid memoryd --create-home --home-dir /home/memoryd \
       --shell /usr/sbin/nologin memoryd \
    && install -d -m 0700 -o memoryd -g memoryd /home/memoryd/data \
    && chmod 0700 /home/memoryd

# Build from a scratch directory and delete it, so that at run time `memoryd` is
# imported from site-packages only.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY memoryd ./memoryd
RUN pip install --no-cache-dir '.[server]' \
    && cd / && rm -rf /src

USER memoryd
WORKDIR /home/memoryd
ENV MEMORYD_DATA_DIR=/home/memoryd/data

# The gateway's port (HTTP API and MCP), when the container runs `memoryd gateway`.
EXPOSE 8765

CMD ["memoryd", "worker", "--queues", "memory"]
