# Sourced by the service scripts beside it: messages prefixed with the script's name, and the
# start|stop|restart|env dispatch onto the script's own `start`, `stop`, `restart` and `env_cmd`
# functions. `restart [--down SECONDS]` restarts the daemon only, keeping its data, and stays
# down SECONDS (default 0) in between, so a fault drill can be sure to catch the outage.

say() { echo "$(basename "$0"): $*" >&2; }
die() { say "$*"; exit 1; }

run_command() {
  case "${1:-}" in
    start) start ;;
    stop) stop ;;
    env) env_cmd ;;
    restart)
      shift
      local down
      down="$(down_seconds "$@")" || exit 2
      restart "$down" ;;
    *) die "usage: $0 start|stop|env|restart [--down SECONDS]" ;;
  esac
}

# The SECONDS of `restart --down SECONDS` (0 without it), checked.
down_seconds() {
  case "$#:${1:-}" in
    0:) echo 0 ;;
    2:--down)
      [[ "$2" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--down takes a number of seconds, got '$2'"
      echo "$2" ;;
    *) die "usage: $0 restart [--down SECONDS]" ;;
  esac
}
