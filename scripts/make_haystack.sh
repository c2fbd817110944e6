#!/usr/bin/env bash
# Regenerates assets/haystack/kjv.txt, the haystack text of `nanovllm eval` (see its README.md):
# the King James Version from Debian's bible-kjv-text package, one verse per line, verse references
# dropped (the needles are numbers: the haystack should have none).
#
#   sudo apt-get install bible-kjv     # the `bible` reader + bible-kjv-text (4.38 in Debian 12)
#   scripts/make_haystack.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/assets/haystack/kjv.txt"
command -v bible >/dev/null || { echo "error: no 'bible' (apt-get install bible-kjv)" >&2; exit 1; }
# -f turns pretty-printing off: "Ge1:1 In the beginning ..." one verse per line.
bible -f Gen1:1-Rev22:21 </dev/null | sed -E 's/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ //' >"$out"
if grep -q '[0-9]' "$out"; then echo "error: digits left in $out" >&2; exit 1; fi
echo "wrote $out: $(wc -l <"$out") verses, $(wc -c <"$out") bytes, sha256 $(sha256sum "$out" | cut -c1-16)"
