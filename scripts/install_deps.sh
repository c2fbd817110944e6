#!/usr/bin/env bash
# Installs the Debian packages nano-vLLM C++ builds with. Idempotent: installs only what is missing.
#   scripts/install_deps.sh [--fuzz] [--node]
#   --fuzz: also clang and its libFuzzer runtime (scripts/fuzz_*.sh, CI)
#   --node: also node + npm for the OpenAI Node SDK test (tests/openai_sdk, CI), unless both exist already
# libboost1.81-dev: Boost.Beast / Asio for the HTTP server (header-only: nothing to carry at run time).
# python3-*, pybind11-dev: the Python package (pip install ., offline) and its tests (pytest).
set -euo pipefail
packages=(cmake ninja-build ccache g++ pkg-config nlohmann-json3-dev libxxhash-dev libcli11-dev libgtest-dev
          libpcre2-dev libutf8proc-dev libboost1.81-dev
          python3-dev python3-venv python3-pip python3-setuptools python3-wheel pybind11-dev python3-pytest)
for a in "$@"; do
  case "$a" in
    --fuzz) packages+=(clang libclang-rt-dev) ;;
    # Node from elsewhere (e.g. a nodesource build that bundles npm) is fine; Debian's otherwise.
    --node) { command -v node && command -v npm; } >/dev/null 2>&1 || packages+=(nodejs npm) ;;
    *) echo "usage: $0 [--fuzz] [--node]" >&2; exit 1 ;;
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
