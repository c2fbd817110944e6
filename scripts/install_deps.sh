#!/usr/bin/env bash
# Installs the Debian packages nano-vLLM C++ builds with. Idempotent: installs only what is missing.
#   libboost1.81-dev   Boost.Beast / Asio for the HTTP server (header-only: nothing to carry at run time)
#   nodejs, npm        the OpenAI Node SDK test (tests/openai_sdk); skipped when a node + npm exist already
set -euo pipefail
packages=(cmake ninja-build ccache g++ pkg-config nlohmann-json3-dev libxxhash-dev libcli11-dev libgtest-dev
          libpcre2-dev libutf8proc-dev libboost1.81-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node from elsewhere (e.g. a nodesource build that bundles npm) is fine; Debian's otherwise.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then missing+=(nodejs npm); fi
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
