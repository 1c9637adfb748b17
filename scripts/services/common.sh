# Sourced by the service scripts beside it: messages prefixed with the script's name, and the
# start|stop|env dispatch onto the script's own `start`, `stop` and `env_cmd` functions.

say() { echo "$(basename "$0"): $*" >&2; }
die() { say "$*"; exit 1; }

run_command() {
  case "${1:-}" in
    start) start ;;
    stop) stop ;;
    env) env_cmd ;;
    *) die "usage: $0 start|stop|env" ;;
  esac
}
