#!/usr/bin/env bash
# Installs the Debian packages nano-vLLM C++ builds with. Idempotent: installs only what is missing.
#   scripts/install_deps.sh [--fuzz]   --fuzz: also clang and its libFuzzer runtime (scripts/fuzz_*.sh, CI)
set -euo pipefail
packages=(cmake ninja-build ccache g++ pkg-config nlohmann-json3-dev libxxhash-dev libcli11-dev libgtest-dev
          libpcre2-dev libutf8proc-dev)
for a in "$@"; do
  case "$a" in
    --fuzz) packages+=(clang libclang-rt-dev) ;;
    *) echo "usage: $0 [--fuzz]" >&2; exit 1 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
