#!/usr/bin/env bash
# Runs every fuzz target in the module for a bounded number of executions
# (FUZZTIME, default 200000x: a count, see the Makefile)
# on top of its checked-in seed corpus. `go test -fuzz` takes one target at a
# time, so the targets are listed first.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-200000x}
n=0
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "fuzz: $pkg $target ($fuzztime)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/hushfs-fuzz.$$ 2>&1 || {
      cat /tmp/hushfs-fuzz.$$; rm -f /tmp/hushfs-fuzz.$$; exit 1; }
    n=$((n+1))
  done
done
rm -f /tmp/hushfs-fuzz.$$
echo "fuzz: $n targets ran for $fuzztime each without a failure"
