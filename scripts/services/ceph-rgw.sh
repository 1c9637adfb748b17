#!/usr/bin/env bash
# A throw-away single-node Ceph cluster serving S3 through RADOS Gateway, for the scale-out
# tests: one monitor, one memstore OSD (objects live in the OSD's memory), radosgw on
# 127.0.0.1, no cephx (auth none) — acceptable only because everything binds to loopback and
# is thrown away. All state under "${CASTOR_SERVICES_DIR:-/tmp/castor-services}/ceph".
#
#   scripts/services/ceph-rgw.sh start   # install if needed, start, create the S3 user and bucket, print the exports
#   scripts/services/ceph-rgw.sh env     # re-print the exports of the running gateway
#   scripts/services/ceph-rgw.sh stop    # stop the daemons and remove their state
#   scripts/services/ceph-rgw.sh restart [--down SECONDS]
#                                        # stop radosgw alone, SECONDS down, start it again on the
#                                        # same port; the monitor and the OSD (and so every stored
#                                        # object) stay up; returns once S3 answers (fault drills)
#
# Only `export VAR=value` lines go to stdout (so `eval "$(… start)"` works); progress and errors
# go to stderr. Every command is idempotent. Ports: CASTOR_RGW_PORT (default 7480) for S3,
# CASTOR_CEPH_MON_PORT (default 6789) for the monitor; the OSD takes ports from Ceph's
# 6800-7300 range. A start takes 2-4 s once the packages are installed (installing: ~1 min);
# a stop ~5 s.
set -euo pipefail

SERVICES_DIR="${CASTOR_SERVICES_DIR:-/tmp/castor-services}"
STATE_DIR="$SERVICES_DIR/ceph"
CONF="$STATE_DIR/ceph.conf"
RUN_DIR="$STATE_DIR/run"
ENV_FILE="$STATE_DIR/s3.env"
RGW_PORT="${CASTOR_RGW_PORT:-7480}"
MON_PORT="${CASTOR_CEPH_MON_PORT:-6789}"
ENDPOINT="http://127.0.0.1:$RGW_PORT"
BUCKET=castor-test
# RGW accepts any region name in a SigV4 scope for its default zonegroup; clients must agree on one.
REGION=us-east-1
EMPTY_BODY_SHA256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
PACKAGES=(radosgw ceph-mon ceph-osd)
# The daemons each write a pid file named after themselves into the run dir (`pid file` below).
DAEMON_COMMS=(radosgw ceph-osd ceph-mon)

# say, die and run_command
source "$(dirname "$0")/common.sh"

# die, showing the end of the log named by $1 first: in CI that output is all there is.
die_showing() {
  local log=$1
  shift
  if [ -f "$log" ]; then
    say "last lines of $log:"
    tail -n 25 "$log" | sed 's/^/    /' >&2
  fi
  die "$*"
}

print_env() {
  [ -f "$ENV_FILE" ] || die "$ENV_FILE is missing: run scripts/services/ceph-rgw.sh stop, then start"
  cat "$ENV_FILE"
}

install_ceph() {
  [ "$(id -u)" -eq 0 ] || die "Ceph is not installed and installing it needs root: run 'apt-get install -y --no-install-recommends ${PACKAGES[*]}' as root"
  say "installing ${PACKAGES[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y --no-install-recommends "${PACKAGES[@]}" >&2; then
    say "install failed; refreshing the package lists and retrying"
    apt-get update >&2
    apt-get install -y --no-install-recommends "${PACKAGES[@]}" >&2
  fi
}

# Prints the pid in `file` when that process is alive AND is one of our daemons: a stale pid
# file whose number was reused by an unrelated process must never get that process killed.
live_daemon_pid() {
  local file=$1 pid comm
  [ -f "$file" ] || return 1
  pid="$(cat "$file" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  still_running "$pid" || return 1
  comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
  for expected in "${DAEMON_COMMS[@]}"; do
    if [ "$comm" = "$expected" ]; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# True while `pid` runs. A zombie (exited, not yet reaped: daemons are re-parented to PID 1,
# which in a container may reap late) has finished and counts as gone.
still_running() {
  local state
  state="$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1 || true)"
  [ -n "$state" ] && [ "$state" != Z ]
}

rgw_answers() {
  curl -s -o /dev/null --max-time 2 "$ENDPOINT/"
}

is_running() {
  [ -f "$ENV_FILE" ] || return 1
  local file count=0
  for file in "$RUN_DIR"/*.pid; do
    live_daemon_pid "$file" >/dev/null || return 1
    count=$((count + 1))
  done
  [ "$count" -eq 3 ] && rgw_answers
}

# Stops the daemons of the pid files given (default: all, gateway first, monitor last, so no
# daemon spends its shutdown waiting for a dead monitor): SIGTERM, then SIGKILL after 10 s.
kill_daemons() {
  [ -d "$RUN_DIR" ] || return 0
  local pids=() file pid tries
  [ "$#" -gt 0 ] || set -- "$RUN_DIR"/client.rgw.*.pid "$RUN_DIR"/osd.*.pid "$RUN_DIR"/mon.*.pid
  for file in "$@"; do
    if pid="$(live_daemon_pid "$file")"; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  for pid in "${pids[@]}"; do
    tries=0
    while still_running "$pid"; do
      tries=$((tries + 1))
      if [ "$tries" -ge 100 ]; then
        say "pid $pid ignored SIGTERM for 10 s; killing it"
        kill -KILL "$pid" 2>/dev/null || true
        break
      fi
      sleep 0.1
    done
  done
}

port_in_use() {
  ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}

write_conf() {
  local fsid=$1
  cat >"$CONF" <<CONF
[global]
fsid = $fsid
mon host = v1:127.0.0.1:$MON_PORT
mon initial members = a
public addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon max pg per osd = 1000
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
# The monitor batches map changes for up to a second by default; radosgw creates its six pools
# one map change at a time on first start, so this cuts ~10 s from every start.
paxos propose interval = 0.05
paxos min wait = 0.01
run dir = $RUN_DIR
admin socket = $RUN_DIR/\$name.asok
log file = $STATE_DIR/log/\$name.log
pid file = $RUN_DIR/\$name.pid
keyring = $STATE_DIR/keyring
mon data = $STATE_DIR/mon/\$cluster-\$id
osd data = $STATE_DIR/osd/\$cluster-\$id
# Objects live in the OSD's memory; this caps it. Tests delete what they write.
osd objectstore = memstore
memstore device bytes = 4294967296
ms bind ipv6 = false
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT
rgw data = $STATE_DIR/rgw
# radosgw frees a deleted object's data only in garbage collection, by default two hours after
# the delete and once an hour; in memory that fills the OSD across repeated test runs (seen:
# "osd.0 is full" after a dozen multi-node runs, and every request then hangs). Collect at once.
rgw gc obj min wait = 0
rgw gc processor period = 10
CONF
}

# Starts radosgw (it daemonizes) and waits until it answers. On the first start it creates its
# pools, which needs the OSD up: allow a minute.
start_gateway() {
  local tries=0
  say "starting radosgw on $ENDPOINT"
  radosgw -c "$CONF" -n client.rgw.a >>"$STATE_DIR/log/startup.log" 2>&1 ||
    die_showing "$STATE_DIR/log/client.rgw.a.log" "radosgw did not start (its start-up output: $STATE_DIR/log/startup.log)"
  until rgw_answers; do
    tries=$((tries + 1))
    [ "$tries" -lt 240 ] || die_showing "$STATE_DIR/log/client.rgw.a.log" "radosgw does not answer on $ENDPOINT after 60 s"
    sleep 0.25
  done
}

# $1 random bytes as upper-case hex. (Not `tr </dev/urandom | head`: under pipefail the SIGPIPE
# that stops tr would fail the script.)
random_hex() {
  head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F
}

start() {
  local missing=0 bin
  for bin in radosgw ceph-mon ceph-osd radosgw-admin ceph-authtool monmaptool; do
    command -v "$bin" >/dev/null || missing=1
  done
  [ "$missing" -eq 0 ] || install_ceph

  if is_running; then
    print_env
    return
  fi
  if [ -d "$STATE_DIR" ]; then
    say "removing the state of an instance that is not (fully) running"
    kill_daemons
    rm -rf "$STATE_DIR"
  fi
  for port in "$RGW_PORT" "$MON_PORT"; do
    if port_in_use "$port"; then
      die "something else already listens on 127.0.0.1:$port: stop it, or choose other ports with CASTOR_RGW_PORT / CASTOR_CEPH_MON_PORT"
    fi
  done

  say "creating a single-node cluster in $STATE_DIR"
  mkdir -p "$RUN_DIR" "$STATE_DIR"/{log,mon,osd,rgw}
  local fsid osd_uuid osd_id access_key secret_key
  fsid="$(cat /proc/sys/kernel/random/uuid)"
  write_conf "$fsid"
  ceph-authtool --create-keyring "$STATE_DIR/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$STATE_DIR/keyring" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
  monmaptool --create --add a "v1:127.0.0.1:$MON_PORT" --fsid "$fsid" "$STATE_DIR/monmap" >/dev/null
  # The daemons' own start-up chatter (benign "Falling back to public interface" and the like)
  # goes to a log, so a healthy start prints only this script's progress lines.
  local startup_log="$STATE_DIR/log/startup.log"
  ceph-mon -c "$CONF" --mkfs -i a --monmap "$STATE_DIR/monmap" --keyring "$STATE_DIR/keyring" >>"$startup_log" 2>&1 \
    || die_showing "$startup_log" "ceph-mon --mkfs failed"
  say "starting the monitor on 127.0.0.1:$MON_PORT"
  ceph-mon -c "$CONF" -i a >>"$startup_log" 2>&1 || die_showing "$startup_log" "ceph-mon did not start" # daemonizes

  osd_uuid="$(cat /proc/sys/kernel/random/uuid)"
  osd_id="$(timeout 60 ceph -c "$CONF" osd new "$osd_uuid")" || die_showing "$STATE_DIR/log/mon.a.log" "the monitor did not answer 'osd new'"
  mkdir -p "$STATE_DIR/osd/ceph-$osd_id"
  ceph-osd -c "$CONF" -i "$osd_id" --mkfs --osd-uuid "$osd_uuid" >>"$startup_log" 2>&1 \
    || die_showing "$startup_log" "ceph-osd --mkfs failed"
  say "starting the OSD"
  ceph-osd -c "$CONF" -i "$osd_id" >>"$startup_log" 2>&1 || die_showing "$STATE_DIR/log/osd.$osd_id.log" "ceph-osd did not start (its start-up output: $startup_log)"
  start_gateway

  access_key="CASTOR$(random_hex 7)"
  secret_key="$(random_hex 20)"
  timeout 60 radosgw-admin -c "$CONF" user create --uid=castor --display-name=castor \
    --access-key="$access_key" --secret-key="$secret_key" >/dev/null \
    || die "radosgw-admin user create failed; see $STATE_DIR/log"
  # A SigV4-signed CreateBucket with curl keeps this script free of any SDK. RGW refuses (403)
  # a signature without x-amz-content-sha256, which this curl does not add: send the SHA-256 of
  # the empty body.
  curl -sS --fail-with-body -o /dev/null -X PUT --max-time 30 \
    --user "$access_key:$secret_key" --aws-sigv4 "aws:amz:$REGION:s3" \
    -H "x-amz-content-sha256: $EMPTY_BODY_SHA256" "$ENDPOINT/$BUCKET" >&2 \
    || die "creating bucket $BUCKET failed; see $STATE_DIR/log/client.rgw.a.log"

  cat >"$ENV_FILE" <<EOF
export CASTOR_TEST_S3_ENDPOINT=$ENDPOINT
export CASTOR_TEST_S3_REGION=$REGION
export CASTOR_TEST_S3_ACCESS_KEY_ID=$access_key
export CASTOR_TEST_S3_SECRET_ACCESS_KEY=$secret_key
export CASTOR_TEST_S3_BUCKET=$BUCKET
EOF
  say "ready: bucket $BUCKET on $ENDPOINT"
  print_env
}

stop() {
  if [ -d "$STATE_DIR" ]; then
    say "stopping the Ceph daemons"
    kill_daemons
  fi
  rm -rf "$STATE_DIR"
}

restart() {
  local down=$1 tries=0
  is_running || die "no gateway is running from $STATE_DIR: run scripts/services/ceph-rgw.sh start"
  say "restarting radosgw (down for ${down} s)"
  kill_daemons "$RUN_DIR"/client.rgw.*.pid
  # The new gateway binds the same port: wait until the old one has let go of it.
  while port_in_use "$RGW_PORT"; do
    tries=$((tries + 1))
    [ "$tries" -lt 100 ] || die "port $RGW_PORT is still in use 10 s after radosgw stopped"
    sleep 0.1
  done
  sleep "$down"
  start_gateway
}

env_cmd() {
  is_running || die "no gateway is running from $STATE_DIR: run scripts/services/ceph-rgw.sh start"
  print_env
}

run_command "$@"
