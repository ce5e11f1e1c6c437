#!/usr/bin/env bash
# The main job: export a directory with `hushfs serve`, put `hushfs proxy
# --rtt 10ms` in front of it (a WAN-like link), mount it with `hushfs mount`,
# build a small C project and list a big directory through the mount, print
# `hushfs stats`, and unmount. libnfs-utils check the server independently.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(pwd)/${HUSHFS:-bin/hushfs}
rtt=${RTT:-10ms}
work=$(mktemp -d /tmp/hushfs-demo.XXXXXX)
pids=()
mnt="$work/mnt"
cleanup() {
  if grep -q " $mnt fuse.hushfs " /proc/mounts 2>/dev/null; then "$bin" umount -l "$mnt" || true; fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

wait_line() { # FILE PREFIX: wait for a process's ready line
  for _ in $(seq 100); do grep -q "^$2" "$1" && break; sleep 0.1; done
  grep "^$2" "$1" || { echo "demo: no '$2' line in $1" >&2; cat "${1%.out}.err" >&2; exit 1; }
}

mkdir -p "$work/export" "$work/state" "$mnt"
# --no-root-squash: the demo runs as root and works in a root-owned export. No --allow:
# every client here (the proxy, libnfs) connects from 127.0.0.1, which is served by default.
"$bin" serve "$work/export" --listen 127.0.0.1 --nfs-port 0 --mount-port 0 \
  --state-dir "$work/state" --no-root-squash > "$work/serve.out" 2> "$work/serve.err" &
pids+=($!)
line=$(wait_line "$work/serve.out" "hushfs serve:")
echo "$line"
nfsaddr=$(sed -E 's/.* nfs ([^ ]*) .*/\1/' <<<"$line")
mountport=$(sed -E 's/.* mount [^ ]*:([0-9]+).*/\1/' <<<"$line")
"$bin" proxy --listen 127.0.0.1:0 --target "$nfsaddr" --rtt "$rtt" > "$work/proxy.out" 2> "$work/proxy.err" &
pids+=($!)
pline=$(wait_line "$work/proxy.out" "hushfs proxy:")
echo "$pline"
proxyport=$(sed -E 's/.* listening [^ ]*:([0-9]+).*/\1/' <<<"$pline")

echo "== libnfs-utils against hushfs serve (no proxy)"
url="nfs://127.0.0.1$work/export/?version=3&nfsport=${nfsaddr##*:}&mountport=$mountport"
head -c 3000000 /dev/urandom > "$work/random.bin"
nfs-cp "$work/random.bin" "nfs://127.0.0.1$work/export/random.bin?version=3&nfsport=${nfsaddr##*:}&mountport=$mountport"
cmp "$work/random.bin" "$work/export/random.bin" && echo "nfs-cp: 3 MB written byte-exact"
nfs-ls "$url" | head -3

echo "== hushfs mount through a $rtt RTT link"
"$bin" mount "127.0.0.1:$work/export" "$mnt" -o "port=$proxyport,mountport=$mountport"
grep " $mnt " /proc/mounts

echo "== build a small C project on the mount"
src="$mnt/project"
mkdir -p "$src/include" "$src/src"
for i in $(seq 1 20); do
  printf '#ifndef M%d_H\n#define M%d_H\nint f%d(int);\n#endif\n' "$i" "$i" "$i" > "$src/include/m$i.h"
  printf '#include <stdio.h>\n#include "m%d.h"\nint f%d(int x) { return x + %d; }\n' "$i" "$i" "$i" > "$src/src/m$i.c"
done
{
  printf '#include <stdio.h>\n'
  for i in $(seq 1 20); do printf '#include "m%d.h"\n' "$i"; done
  printf 'int main(void) { int s = 0;\n'
  for i in $(seq 1 20); do printf ' s = f%d(s);\n' "$i"; done
  printf ' printf("%%d\\n", s); return 0; }\n'
} > "$src/src/main.c"
cat > "$src/Makefile" <<'EOF'
OBJS := $(patsubst %.c,%.o,$(wildcard src/*.c))
demo: $(OBJS)
	$(CC) -o $@ $(OBJS)
%.o: %.c
	$(CC) -O1 -Iinclude -I/nonexistent/a -I/nonexistent/b -c -o $@ $<
clean:
	rm -f demo src/*.o
EOF
"$bin" stats "$mnt" --reset > /dev/null
start=$(date +%s.%N)
make -s -C "$src" demo
end=$(date +%s.%N)
echo "build: $(echo "$end - $start" | bc) s; ./demo prints $("$src/demo") (want 210)"
"$bin" stats "$mnt" --reset
start=$(date +%s.%N)
make -s -C "$src" demo
echo "no-op rebuild: $(echo "$(date +%s.%N) - $start" | bc) s"
"$bin" stats "$mnt" --reset

echo "== ls -l of 2,000 entries (created on the server side)"
mkdir "$work/export/bigdir"
(cd "$work/export/bigdir" && seq 1 2000 | xargs touch)
start=$(date +%s.%N)
ls -l "$mnt/bigdir" > /dev/null
echo "ls -l: $(ls "$mnt/bigdir" | wc -l) names in $(echo "$(date +%s.%N) - $start" | bc) s"
"$bin" stats "$mnt"

"$bin" umount "$mnt"
echo "== proxy's independent count of every NFS call since start"
kill -INT "${pids[1]}"; wait "${pids[1]}" 2>/dev/null || true
grep -v '^hushfs proxy:' "$work/proxy.out"
echo "demo: done"
