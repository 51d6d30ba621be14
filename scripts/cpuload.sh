#!/usr/bin/env bash
# Keeps N cores busy (default: all of them, nproc) with plain busy loops
# until killed, so that the test suite can be run the way the issue asks it
# to pass: while another process keeps every core busy. One shell busy loop
# per core, at normal priority; SIGINT or SIGTERM stops them all.
#
#   bash scripts/cpuload.sh 2 & load=$!
#   make test
#   kill $load
set -euo pipefail
n=${1:-$(nproc)}
case $n in '' | *[!0-9]*) echo "usage: $0 [cores]" >&2; exit 2 ;; esac
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; exit 0' INT TERM
for ((i = 0; i < n; i++)); do
  (trap - INT TERM; while :; do :; done) &
  pids+=($!)
done
echo "cpuload: $n busy loops (pids ${pids[*]}); kill $$ to stop them" >&2
wait
