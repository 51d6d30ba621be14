#!/usr/bin/env bash
# Installs the programs the test suite runs for real (redis-server, promtool,
# prometheus, amtool, chromium, docker-compose, node and npm, and for the
# Python client's tests Debian's own /usr/bin/python3 with python3-redis,
# python3-pytest, and pip and setuptools to install it) when any is missing:
# with apt-get when root on Debian, otherwise it prints the one command to
# run and fails. Then the dashboard's accessibility checkers
# (axe-core, html-validate) from tools/a11y/package-lock.json, the other
# libraries' lock clients (node-redisson, node-redlock) from
# tools/foreign/package-lock.json and the Node package's dependencies from
# clients/node/package-lock.json, with npm ci.
# Go tools (templ, staticcheck) come from go.mod's tool directives.
set -euo pipefail
declare -A pkg=(
  [redis-server]=redis-server
  [promtool]=prometheus
  [prometheus]=prometheus
  [amtool]=prometheus-alertmanager
  [chromium]=chromium
  [docker-compose]=docker-compose
  [node]=nodejs
  [npm]=npm
)
need=()
for cmd in redis-server promtool prometheus amtool chromium docker-compose node npm; do
  command -v "$cmd" >/dev/null 2>&1 && continue
  p=${pkg[$cmd]}
  [[ " ${need[*]-} " == *" $p "* ]] || need+=("$p")
done
# clients/python is tested with Debian's python3 and its packages only (no
# PyPI in CI); a python3 earlier on PATH (pyenv) does not count.
if ! { /usr/bin/python3 -c 'import redis, pytest, setuptools' && /usr/bin/python3 -m pip --version; } >/dev/null 2>&1; then
  need+=(python3 python3-redis python3-pytest python3-pip python3-setuptools)
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
npm_ci() {
  # Each folder is reinstalled only when its lock file changed since the
  # last install: tools/a11y (axe-core, html-validate) for the dashboard's
  # tests, tools/foreign (node-redisson, node-redlock, ioredis) for the
  # collector's tests of other libraries' locks, clients/node (the Node
  # package's ioredis and node-redlock, TypeScript for its types) for its
  # own tests.
  for d in tools/a11y tools/foreign clients/node; do
    if [ ! -f "$root/$d/node_modules/.package-lock.json" ] || [ "$root/$d/package-lock.json" -nt "$root/$d/node_modules/.package-lock.json" ]; then
      echo "deps: npm ci in $d"
      npm ci --prefix "$root/$d" --no-audit --no-fund --loglevel=error
    fi
  done
}
if [ ${#need[@]} -eq 0 ]; then
  npm_ci
  exit 0
fi
echo "deps: installing ${need[*]}"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo apt-get update -qq
  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
else
  echo "deps: missing ${need[*]}; install them first: sudo apt-get install ${need[*]}" >&2
  exit 1
fi
npm_ci
