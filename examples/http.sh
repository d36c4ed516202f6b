#!/usr/bin/env bash
# The HTTP API with curl: a key for one agent, then store and recall. Run it with memoryd up
# (MEMORYD_URL for a gateway elsewhere): bash examples/http.sh [agent-id]
set -euo pipefail
AGENT=${1:-agent-1}
GW=${MEMORYD_URL:-http://127.0.0.1:8765}

KEY=$(memoryd keys create --agent "$AGENT" --name http-example --json \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
AUTH="Authorization: Bearer $KEY"
# 201 and the new memory's id; 200 and the id of the memory it matched when sent again
curl -s --fail-with-body -H "$AUTH" --json '{"content": "User prefers dark mode"}' \
     "$GW/v1/agents/$AGENT/memories"; echo
curl -s --fail-with-body -H "$AUTH" --json '{"query": "what theme does the user like?", "limit": 5}' \
     "$GW/v1/agents/$AGENT/recall"; echo
