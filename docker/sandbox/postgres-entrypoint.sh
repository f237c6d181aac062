#!/bin/sh
# The official postgres image's first-start contract, in short: an empty PGDATA is initialised with
# POSTGRES_USER / POSTGRES_PASSWORD (password logins over TCP) and POSTGRES_DB; then the server runs in the foreground.
set -eu
user="${POSTGRES_USER:-postgres}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  # UTF8 as in the official image (without a locale initdb picks SQL_ASCII, whose text psycopg returns as bytes)
  initdb --pgdata="$PGDATA" --username="$user" --pwfile="$pwfile" --encoding=UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  # initdb makes only the database "postgres"; the official image makes POSTGRES_DB (default: the user's name)
  if [ "${POSTGRES_DB:-$user}" != postgres ]; then
    pg_ctl --pgdata="$PGDATA" --options="-c listen_addresses='' -c unix_socket_directories=/tmp" --wait start >/dev/null
    createdb --username="$user" "${POSTGRES_DB:-$user}"
    pg_ctl --pgdata="$PGDATA" --mode=fast --wait stop >/dev/null
  fi
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/tmp
