#!/usr/bin/env bash
# Run docker/compose.yaml through podman-compose on the project's machines and diagnose through it, then take it
# down with its volumes. What it checks: the gateway answers /healthz on 127.0.0.1:$FEDCD_PORT, the README's first
# diagnosis answers 200, the state is in PostgreSQL (fedcd's tables exist there) and Redis holds fedcd's keys.
#   docker/sandbox/compose-check.sh [PODMAN_COMPOSE]     (default: podman-compose on PATH)
# Needs `make image` first, and the stand-ins for the official postgres and redis images (no registry here):
#   podman build --network host -f docker/sandbox/postgres.Dockerfile -t localhost/fedcd-sandbox-postgres:15 docker/sandbox
#   podman build --network host -f docker/sandbox/redis.Dockerfile -t localhost/fedcd-sandbox-redis:7 docker/sandbox
set -euo pipefail
cd "$(dirname "$0")/../.."
compose="${1:-podman-compose}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/docker/sandbox/containers.conf}"
export FEDCD_IMAGE="${FEDCD_IMAGE:-localhost/fedcd:latest}"
export POSTGRES_IMAGE="${POSTGRES_IMAGE:-localhost/fedcd-sandbox-postgres:15}"
export REDIS_IMAGE="${REDIS_IMAGE:-localhost/fedcd-sandbox-redis:7}"
# not the host's own services' ports (PostgreSQL and Redis are not published at all)
export FEDCD_PORT="${FEDCD_PORT:-18080}"
POSTGRES_PASSWORD="$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')"
export POSTGRES_PASSWORD
run() { $compose -f docker/compose.yaml "$@"; }
trap 'run down -v -t 30 >/dev/null 2>&1 || true' EXIT
start=$SECONDS
run up -d >/dev/null
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$FEDCD_PORT/healthz" >/dev/null && break
  sleep 2
done
curl -sf "http://127.0.0.1:$FEDCD_PORT/healthz" >/dev/null || { run logs gateway | tail -40; exit 1; }
echo "compose-check: healthy after $((SECONDS - start)) s"
key="$(run exec -T gateway cat /var/lib/fedcd/dev-api-key)"
body="$(python3 -c 'import json, sys; sys.path.insert(0, "docker"); import smoke; print(json.dumps(smoke.readme_first_diagnosis()))')"
status="$(curl -s -o /tmp/fedcd-compose-diagnosis.json -w '%{http_code}' "http://127.0.0.1:$FEDCD_PORT/v1/diagnose" \
  -H "Authorization: Bearer $key" -H 'content-type: application/json' -d "$body")"
[ "$status" = 200 ] || { echo "compose-check: diagnosis answered $status: $(cat /tmp/fedcd-compose-diagnosis.json)" >&2; exit 1; }
echo "compose-check: diagnosis 200: $(python3 -c 'import json; print(json.load(open("/tmp/fedcd-compose-diagnosis.json"))["mastery"])')"
tables="$(run exec -T postgres psql -U fedcd -d fedcd -Atc "select count(*) from information_schema.tables where table_schema = 'public'")"
[ "$tables" -gt 0 ] || { echo "compose-check: no fedcd tables in PostgreSQL" >&2; exit 1; }
keys="$(run exec -T redis redis-cli --scan --pattern 'fedcd:*' | wc -l)"
[ "$keys" -gt 0 ] || { echo "compose-check: no fedcd keys in Redis" >&2; exit 1; }
echo "compose-check: PostgreSQL holds $tables fedcd tables, Redis $keys fedcd keys"
run stop -t 30 gateway >/dev/null
echo "compose-check: passed in $((SECONDS - start)) s"
