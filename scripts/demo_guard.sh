# Shared checks of the shell demos (sourced): integer settings, models, and output folders written through a
# staging folder (moved into place only on success; committed results replaced only with DEMO_OVERWRITE=1).
MARKER=.grpo_mse_demo

fail() { echo "error: $*" >&2; exit 2; }

# need_int NAME VALUE MIN: VALUE must be an integer >= MIN
need_int() {
  [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] || fail "$1 must be an integer >= $3 (got $(printf '%q' "$2"))"
}

# check_output DIR [SETTING]: DIR must be missing, an empty folder, or a folder with this demos' marker; a folder
# holding files tracked by git (the committed results) only with DEMO_OVERWRITE=1
check_output() {
  local dir=$1 setting=${2:-the output folder}
  if [ -e "$dir" ] && [ ! -d "$dir" ]; then
    fail "$setting $dir is a file, not a folder"
  fi
  local tracked=""
  [ ! -d "$dir" ] || tracked=$( (git ls-files -- "$dir" 2> /dev/null || true) | head -n 1)  # outside a repository: none
  if [ -n "$tracked" ] && [ "${DEMO_OVERWRITE:-0}" != 1 ]; then
    fail "$setting $dir holds the committed results (tracked by git); set DEMO_OVERWRITE=1 to regenerate them there"
  fi
  if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/$MARKER" ] && [ -z "$tracked" ]; then
    fail "$setting $dir exists and was not made by a demo (no $MARKER file); remove it yourself or choose another folder"
  fi
}

# need_model SETTING VALUE: a local model folder (with config.json), or something that can only be a hub id
need_model() {
  local value=$2
  [ -f "$value/config.json" ] && return 0
  if [ -e "$value" ] || [[ "$value" == /* || "$value" == .* || "$value" == "~"* || "$value" != */* ]] \
     || [[ "$value" == */*/* ]] || [ -d "${value%%/*}" ]; then
    fail "$1=$value is not a model folder (no config.json) nor a hub id (org/name)"
  fi
}

# stage_output DIR VAR: check DIR, then make a fresh staging folder beside it and store its path in VAR. The demo
# writes there; publish_output moves it into place only after every step succeeded, so a failed or interrupted run
# leaves DIR exactly as it was (the staging folder is removed on exit).
STAGES=()
stage_output() {
  check_output "$1"
  mkdir -p "$(dirname "$1")"
  local stage
  stage=$(mktemp -d "$(dirname "$1")/.$(basename "$1").partial.XXXXXX") || fail "cannot create a folder beside $1"
  STAGES+=("$stage")
  trap 'rm -rf "${STAGES[@]}"' EXIT
  echo "made by a grpo_mse demo script; the demos may delete this folder" > "$stage/$MARKER"
  printf -v "$2" '%s' "$stage"
}

# publish_output STAGE DIR: replace DIR by the finished STAGE; the staging path that the runs recorded in their
# text outputs (configs, tables, logs) becomes DIR, so every recorded path points at the published files. A
# README.md in DIR (the experiment's log, written by people) is kept when the demo writes none.
publish_output() {
  local old="$2.old.$$"
  if [ -f "$2/README.md" ] && [ ! -e "$1/README.md" ]; then cp "$2/README.md" "$1/README.md"; fi
  { grep -rlIF --null "$1" "$1" 2> /dev/null || true; } \
    | FROM=$1 TO=$2 xargs -0 -r perl -pi -e 's/\Q$ENV{FROM}\E/$ENV{TO}/g'
  if [ -e "$2" ]; then mv "$2" "$old"; fi
  mv "$1" "$2" && rm -rf "$old"
}

# no_arguments SCRIPT HELP_LAST_LINE [ARGS...]: print the header comment (line 2 up to the first line that is not a
# comment; HELP_LAST_LINE is no longer used) for -h/--help
# and exit 0; refuse any other argument (settings are environment variables)
no_arguments() {
  local script=$1 last=$2
  shift 2
  case "${1:-}" in
    -h|--help) awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "$script"; exit 0 ;;
    "") ;;
    *) fail "$script takes no arguments (got '$1'); its settings are environment variables, see --help" ;;
  esac
}
