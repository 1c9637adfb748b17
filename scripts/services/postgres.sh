#!/usr/bin/env bash
# A throw-away PostgreSQL cluster for the scale-out tests, all state under
# "${CASTOR_SERVICES_DIR:-/tmp/castor-services}/pg", listening on 127.0.0.1 only.
#
#   scripts/services/postgres.sh start   # install if needed, init, start, print the exports
#   scripts/services/postgres.sh env     # re-print the exports of the running cluster
#   scripts/services/postgres.sh database NAME
#                                        # create database NAME unless it exists; print
#                                        # `export CASTOR_DATABASE_URL=…` naming it (castor's setting)
#   scripts/services/postgres.sh stop    # stop it and remove its state
#   scripts/services/postgres.sh restart [--down SECONDS]
#                                        # fast shutdown (sessions ended, open transactions rolled
#                                        # back), SECONDS down, start on the same data; returns
#                                        # once the cluster answers again (fault drills)
#
# Only `export VAR=value` lines go to stdout (so `eval "$(… start)"` works); progress and
# errors go to stderr. Every command is idempotent. The port defaults to 55432
# (CASTOR_PG_PORT overrides it) so it never collides with a system cluster on 5432.
set -euo pipefail

SERVICES_DIR="${CASTOR_SERVICES_DIR:-/tmp/castor-services}"
STATE_DIR="$SERVICES_DIR/pg"
DATA_DIR="$STATE_DIR/data"
SOCKET_DIR="$STATE_DIR/socket"
LOG_FILE="$STATE_DIR/postgres.log"
PORT="${CASTOR_PG_PORT:-55432}"
SUPERUSER=postgres

# say, die and run_command
source "$(dirname "$0")/common.sh"

print_env() {
  echo "export CASTOR_TEST_DATABASE_URL=postgres://$SUPERUSER@127.0.0.1:$PORT/postgres"
}

# The newest installed server's bin folder, or nothing.
find_bin_dir() {
  local initdb
  initdb="$(ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1 || true)"
  [ -n "$initdb" ] && dirname "$initdb"
}

install_postgres() {
  [ "$(id -u)" -eq 0 ] || die "PostgreSQL is not installed and installing it needs root: run 'apt-get install -y postgresql' as root"
  say "installing the postgresql package"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y --no-install-recommends postgresql >&2; then
    say "install failed; refreshing the package lists and retrying"
    apt-get update >&2
    apt-get install -y --no-install-recommends postgresql >&2
  fi
}

# Runs a server binary as the cluster's owner: initdb and postgres refuse to run as root.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

is_running() {
  [ -f "$DATA_DIR/PG_VERSION" ] && as_owner "$BIN_DIR/pg_ctl" -D "$DATA_DIR" status >/dev/null 2>&1
}

wait_until_answering() {
  local tries=0
  until "$BIN_DIR/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U "$SUPERUSER"; do
    tries=$((tries + 1))
    [ "$tries" -lt 100 ] || die "the cluster does not answer on 127.0.0.1:$PORT; see $LOG_FILE"
    sleep 0.1
  done
}

start() {
  BIN_DIR="$(find_bin_dir || true)"
  if [ -z "$BIN_DIR" ]; then
    install_postgres
    BIN_DIR="$(find_bin_dir || true)"
    [ -n "$BIN_DIR" ] || die "the postgresql package installed no /usr/lib/postgresql/*/bin/initdb"
  fi

  if is_running; then
    wait_until_answering
    print_env
    return
  fi

  if [ ! -f "$DATA_DIR/PG_VERSION" ]; then
    # A half-made folder from an interrupted start is useless: begin again.
    rm -rf "$STATE_DIR"
    mkdir -p "$DATA_DIR" "$SOCKET_DIR"
    [ "$(id -u)" -ne 0 ] || chown -R postgres:postgres "$STATE_DIR"
    as_owner test -w "$DATA_DIR" ||
      die "the postgres user cannot reach $DATA_DIR (a parent folder is private): set CASTOR_SERVICES_DIR to a folder under /tmp"
    say "creating a cluster in $DATA_DIR"
    # trust auth is acceptable only because the cluster listens on loopback and is thrown away.
    as_owner "$BIN_DIR/initdb" -D "$DATA_DIR" -U "$SUPERUSER" -A trust -E UTF8 --locale=C.UTF-8 \
      --no-instructions >"$STATE_DIR/initdb.log" 2>&1 || die "initdb failed; see $STATE_DIR/initdb.log"
    cat >>"$DATA_DIR/postgresql.conf" <<EOF

# castor scale-out test cluster
port = $PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$SOCKET_DIR'
# Every test fixture opens its own pools on its own database.
max_connections = 200
EOF
  fi

  if "$BIN_DIR/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
    die "something else already answers on 127.0.0.1:$PORT: stop it or choose another port with CASTOR_PG_PORT"
  fi

  say "starting PostgreSQL on 127.0.0.1:$PORT"
  as_owner "$BIN_DIR/pg_ctl" -D "$DATA_DIR" -l "$LOG_FILE" -w -t 60 start >&2 || die "pg_ctl start failed; see $LOG_FILE"
  wait_until_answering
  print_env
}

stop() {
  BIN_DIR="$(find_bin_dir || true)"
  if [ -n "$BIN_DIR" ] && is_running; then
    say "stopping PostgreSQL"
    as_owner "$BIN_DIR/pg_ctl" -D "$DATA_DIR" -m fast -w -t 60 stop >&2
  fi
  rm -rf "$STATE_DIR"
}

restart() {
  local down=$1
  BIN_DIR="$(find_bin_dir || true)"
  { [ -n "$BIN_DIR" ] && is_running; } || die "no cluster is running in $STATE_DIR: run scripts/services/postgres.sh start"
  say "restarting PostgreSQL (down for ${down} s)"
  # Not `pg_ctl restart`: a drill needs the outage to last long enough to be seen.
  as_owner "$BIN_DIR/pg_ctl" -D "$DATA_DIR" -m fast -w -t 60 stop >&2 || die "pg_ctl stop failed; see $LOG_FILE"
  sleep "$down"
  as_owner "$BIN_DIR/pg_ctl" -D "$DATA_DIR" -l "$LOG_FILE" -w -t 60 start >&2 || die "pg_ctl start failed; see $LOG_FILE"
  wait_until_answering
}

database_cmd() {
  local name=${1:-}
  [[ "$name" =~ ^[a-z_][a-z0-9_]*$ ]] || die "usage: $0 database NAME (lower-case letters, digits and _)"
  BIN_DIR="$(find_bin_dir || true)"
  { [ -n "$BIN_DIR" ] && is_running; } || die "no cluster is running in $STATE_DIR: run scripts/services/postgres.sh start"
  local psql=("$BIN_DIR/psql" -X -q -h 127.0.0.1 -p "$PORT" -U "$SUPERUSER" -d postgres -v ON_ERROR_STOP=1)
  if [ -z "$("${psql[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = '$name'")" ]; then
    say "creating database $name"
    "${psql[@]}" -c "CREATE DATABASE $name" >&2
  fi
  echo "export CASTOR_DATABASE_URL=postgres://$SUPERUSER@127.0.0.1:$PORT/$name"
}

env_cmd() {
  BIN_DIR="$(find_bin_dir || true)"
  { [ -n "$BIN_DIR" ] && is_running; } || die "no cluster is running in $STATE_DIR: run scripts/services/postgres.sh start"
  print_env
}

if [ "${1:-}" = database ]; then
  database_cmd "${2:-}"
  exit
fi
run_command "$@"
