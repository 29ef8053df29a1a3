#!/usr/bin/env bash
# install-deps.sh: install the Debian packages smallkv builds and tests with (only the
# missing ones; needs root or sudo when something is missing). Optional, through
# SKV_EXTRA_PKGS: chromium (tests/serve_page.sh, the server's page in a headless browser).
set -euo pipefail
pkgs=(build-essential pkg-config libcmocka-dev libzstd-dev libcjson-dev libmicrohttpd-dev libcurl4-openssl-dev python3 python3-pip ${SKV_EXTRA_PKGS:-})
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# python3 + pip may come from elsewhere (pyenv); accept a working `python3 -m pip`
if python3 -m pip --version >/dev/null 2>&1; then
  tmp=(); for p in "${missing[@]}"; do [[ $p == python3 || $p == python3-pip ]] || tmp+=("$p"); done
  missing=("${tmp[@]}")
fi
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}"
SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
