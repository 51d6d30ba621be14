#!/usr/bin/env bash
# Installs the programs the test suite runs for real (redis-server, promtool,
# prometheus, amtool, chromium, docker-compose) when any is missing: with
# apt-get when root on Debian, otherwise it prints the one command to run and
# fails. Go tools (templ, staticcheck) come from go.mod's tool directives.
set -euo pipefail
declare -A pkg=(
  [redis-server]=redis-server
  [promtool]=prometheus
  [prometheus]=prometheus
  [amtool]=prometheus-alertmanager
  [chromium]=chromium
  [docker-compose]=docker-compose
)
need=()
for cmd in redis-server promtool prometheus amtool chromium docker-compose; do
  command -v "$cmd" >/dev/null 2>&1 && continue
  p=${pkg[$cmd]}
  [[ " ${need[*]-} " == *" $p "* ]] || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0
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
