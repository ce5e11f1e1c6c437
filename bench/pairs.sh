#!/usr/bin/env bash
# bench/pairs.sh: lua build2 on a hushfs mount beside the same build on
# local disk, taken in pairs, one right after the other, N times. On a
# shared machine the local build's own time moves by 20-40 % from minute
# to minute (other jobs, other guests); a ratio of two builds made seconds
# apart moves far less than one of medians taken minutes apart, so the
# median of the pairs' ratios is the figure to quote for "x local disk".
#
#   bench/pairs.sh [--rtt 10ms] [--n 5] [--vers 4.1] [--opts MOUNTOPTS]
#
# hushfs serve on 127.0.0.1, `hushfs proxy --rtt` in front, one mount for
# all pairs (the first build and a clean warm it and the local tree up).
# Prints each pair, its COMPOUNDs (or RPCs), and the median ratio.
# Everything started is stopped by pid at exit.
set -euo pipefail
cd "$(dirname "$0")/.."

rtt=10ms n=5 vers=4.1 opts=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rtt) rtt=$2; shift 2 ;;
    --n) n=$2; shift 2 ;;
    --vers) vers=$2; shift 2 ;;
    --opts) opts=$2; shift 2 ;;
    *) echo "bench/pairs.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$n" in ''|*[!0-9]*) echo "bench/pairs.sh: --n wants a count, not $n" >&2; exit 2 ;; esac

tar=bench/.cache/lua5.4_5.4.4.orig.tar.gz
[ -s "$tar" ] || { echo "bench/pairs.sh: $tar missing: run bench/run lua once first" >&2; exit 1; }
mkdir -p bin
go build -o bin/hushfs ./cmd/hushfs
bin=$PWD/bin/hushfs

work=$(mktemp -d "${TMPDIR:-/var/tmp}/hushfs-pairs-XXXXXX")
pids=()
cleanup() {
  set +e
  mountpoint -q "$work/mnt" && "$bin" umount "$work/mnt" -l >/dev/null 2>&1
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/export" "$work/local" "$work/mnt" "$work/state"
tar -xzf "$tar" -C "$work/export"
tar -xzf "$tar" -C "$work/local"

# wait_line FILE REGEX: the first match of REGEX in FILE, within 20 s.
wait_line() {
  local i
  for i in $(seq 200); do
    if grep -Eo "$2" "$1" 2>/dev/null | head -1 | grep .; then return 0; fi
    sleep 0.1
  done
  echo "bench/pairs.sh: no '$2' in $1 after 20 s:" >&2
  cat "$1" >&2
  exit 1
}

"$bin" serve "$work/export" --listen 127.0.0.1 --nfs-port 0 --mount-port 0 \
  --state-dir "$work/state" --no-root-squash >"$work/serve.log" 2>&1 &
pids+=($!)
nfs=$(wait_line "$work/serve.log" 'nfs 127\.0\.0\.1:[0-9]+' | cut -d: -f2)
mnt=$(grep -Eo 'mount 127\.0\.0\.1:[0-9]+' "$work/serve.log" | cut -d: -f2)
"$bin" proxy --listen 127.0.0.1:0 --target "127.0.0.1:$nfs" --rtt "$rtt" >"$work/proxy.log" 2>&1 &
pids+=($!)
port=$(wait_line "$work/proxy.log" 'listening 127\.0\.0\.1:[0-9]+' | cut -d: -f2)
o="port=$port"
if [ "$vers" = 3 ]; then o="$o,mountport=$mnt"; else o="vers=$vers,$o"; fi
[ -n "$opts" ] && o="$o,$opts"
"$bin" mount "127.0.0.1:$work/export" "$work/mnt" -o "$o" -f >"$work/mount.log" 2>&1 &
pids+=($!)
for i in $(seq 200); do mountpoint -q "$work/mnt" && break; sleep 0.1; done
mountpoint -q "$work/mnt" || { echo "bench/pairs.sh: not mounted:" >&2; cat "$work/mount.log" >&2; exit 1; }

onmnt=$work/mnt/lua-5.4.4 onlocal=$work/local/lua-5.4.4
build() { (cd "$1" && make -s linux >/dev/null 2>&1); }
clean() { (cd "$1" && make -s clean >/dev/null 2>&1); }
for d in "$onmnt" "$onlocal"; do build "$d"; clean "$d"; done

secs() { date +%s.%N; }
echo "lua build2, hushfs mount (vers=$vers, RTT $rtt, $(git rev-parse --short HEAD)) beside local disk, $n pairs:"
ratios=()
for i in $(seq "$n"); do
  sleep 1
  s=$(secs); build "$onlocal"; e=$(secs)
  local_s=$(echo "$e - $s" | bc)
  clean "$onlocal"
  sleep 1
  "$bin" stats "$work/mnt" --reset >/dev/null
  s=$(secs); build "$onmnt"; e=$(secs)
  mount_s=$(echo "$e - $s" | bc)
  calls=$("$bin" stats "$work/mnt" | awk '/total NFS/ {print $3}')
  clean "$onmnt"
  [ -x "$onmnt/src/lua" ] && { echo "bench/pairs.sh: make clean left src/lua" >&2; exit 1; }
  r=$(echo "scale=3; $mount_s / $local_s" | bc)
  ratios+=("$r")
  printf 'pair %d: local %.2f s, mount %.2f s (%s calls): %.2fx local\n' "$i" "$local_s" "$mount_s" "$calls" "$r"
done
med=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}')
printf 'median of %d pairs: %.2fx local (range %s - %s)\n' "$n" "$med" \
  "$(printf '%s\n' "${ratios[@]}" | sort -n | head -1)" "$(printf '%s\n' "${ratios[@]}" | sort -n | tail -1)"
