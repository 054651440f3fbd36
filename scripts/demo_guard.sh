# Shared checks of the shell demos (sourced): integer settings and a folder the demo may empty.
MARKER=.grpo_mse_demo

fail() { echo "error: $*" >&2; exit 2; }

# need_int NAME VALUE MIN: VALUE must be an integer >= MIN
need_int() {
  [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] || fail "$1 must be an integer >= $3 (got '$2')"
}

# check_output DIR: DIR must be missing, an empty folder, or a folder with this demos' marker
check_output() {
  local dir=$1
  if [ -e "$dir" ] && [ ! -d "$dir" ]; then
    fail "$dir is a file, not a folder"
  fi
  if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/$MARKER" ]; then
    fail "$dir exists and was not made by a demo (no $MARKER file); remove it yourself or choose another folder"
  fi
}

# fresh_output DIR: empty DIR (after check_output) and mark it as the demo's
fresh_output() {
  check_output "$1"
  rm -rf "$1" && mkdir -p "$1" && echo "made by a grpo_mse demo script; the demos may delete this folder" > "$1/$MARKER"
}

# no_arguments SCRIPT HELP_LAST_LINE [ARGS...]: print the header comment (lines 2..HELP_LAST_LINE) for -h/--help
# and exit 0; refuse any other argument (settings are environment variables)
no_arguments() {
  local script=$1 last=$2
  shift 2
  case "${1:-}" in
    -h|--help) sed -n "2,${last}p" "$script" | sed 's/^# \{0,1\}//'; exit 0 ;;
    "") ;;
    *) fail "$script takes no arguments (got '$1'); its settings are environment variables, see --help" ;;
  esac
}
