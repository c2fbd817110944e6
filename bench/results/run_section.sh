#!/usr/bin/env bash
# Runs one section of a session's calls.sh: the scripts of its device calls, one section per former file under a
# "# ## <name> {#id}" line. Each calls.sh execs this with its own path, so
#   bash bench/results/<date>/<session>/calls.sh ID [ARGS...]
# runs section ID (no ID lists them) as its own bash script with $0 = that calls.sh: `dirname "$0"` is still the
# folder the section was written in.
set -euo pipefail
file=$1
shift
section() { awk -v id="$1" 'index($0, "# ## ") == 1 { on = index($0, "{#" id "}") > 0; next } on' "$file"; }
ids=$(sed -n 's/^# ## .* {#\(.*\)}$/\1/p' "$file" | tr '\n' ' ')
[ $# -ge 1 ] || { echo "usage: bash $file ID [ARGS...]; IDs: $ids" >&2; exit 2; }
body=$(section "$1")
[ -n "$body" ] || { echo "$file: no section '$1'; IDs: $ids" >&2; exit 2; }
shift
exec bash -c "$body" "$file" "$@"
