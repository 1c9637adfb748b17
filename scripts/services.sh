#!/usr/bin/env bash
# Starts or stops the services castor's scale-out mode runs on — PostgreSQL (metadata) and
# Ceph RGW (S3-compatible blobs) — on 127.0.0.1, installing their Debian packages on a fresh
# machine. Needs root (apt-get, daemons).
#
#   scripts/services.sh start     # install if needed, start, print `export CASTOR_TEST_…` lines (the test suite's settings)
#   scripts/services.sh env       # print the exports of the running services again
#   scripts/services.sh settings  # print `export CASTOR_DATABASE_URL=… CASTOR_S3_…=…` lines: castor's own
#                                 # settings on the running services (database `castor`, created if missing;
#                                 # key prefix `castor/` in the services' bucket)
#   scripts/services.sh stop      # stop both and remove their state
#   scripts/services.sh restart postgres|ceph-rgw [--down SECONDS]
#                                 # restart one daemon on its data (fault drills; see the service's script)
#
# Use: eval "$(scripts/services.sh start)" for the tests; eval "$(scripts/services.sh settings)"
# for a castor of your own (README.md, "Scaling out"). State lives under $CASTOR_SERVICES_DIR
# (default /tmp/castor-services); the ports are CASTOR_PG_PORT (55432), CASTOR_RGW_PORT (7480)
# and CASTOR_CEPH_MON_PORT (6789). Progress goes to stderr; stdout carries only the exports.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CASTOR_SERVICES_DIR=${CASTOR_SERVICES_DIR:-/tmp/castor-services}
services=(postgres ceph-rgw)

case "${1:-}" in
  start)
    for service in "${services[@]}"; do
      # A start can trip over leftovers of an earlier run (a daemon that outlived its state);
      # Ceph's OSD has also failed twice in a row once, for a reason its log did not keep. A
      # clean stop, a pause and up to two more starts settle what is transient.
      attempt=1
      until bash "$here/services/$service.sh" start; do
        if [ "$attempt" -ge 3 ]; then
          echo "services: $service did not start in $attempt attempts" >&2
          exit 1
        fi
        echo "services: $service did not start (attempt $attempt); stopping it and trying again in 5 s" >&2
        bash "$here/services/$service.sh" stop >&2 || true
        sleep 5
        attempt=$((attempt + 1))
      done
    done ;;
  env)
    for service in "${services[@]}"; do bash "$here/services/$service.sh" env; done ;;
  settings)
    bash "$here/services/postgres.sh" database castor
    # The gateway's S3 user and bucket under castor's own names, in a prefix of castor's own.
    s3_env="$(bash "$here/services/ceph-rgw.sh" env)"
    printf '%s\n' "$s3_env" | sed -n 's/^export CASTOR_TEST_S3_/export CASTOR_S3_/p'
    echo "export CASTOR_S3_PREFIX=castor/" ;;
  stop)
    status=0
    for service in "${services[@]}"; do bash "$here/services/$service.sh" stop || status=$?; done
    exit $status ;;
  restart)
    service="${2:-}"
    case "$service" in
      postgres | ceph-rgw) exec bash "$here/services/$service.sh" restart "${@:3}" ;;
      *)
        echo "usage: $0 restart postgres|ceph-rgw [--down SECONDS]" >&2
        exit 2 ;;
    esac ;;
  *)
    echo "usage: $0 start|env|settings|stop|restart" >&2
    exit 2 ;;
esac
