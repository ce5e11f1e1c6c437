#!/usr/bin/env bash
# The main job for now: export a temporary directory with `hushfs serve` and
# use it through a real NFS client (libnfs-utils), checking every byte.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${HUSHFS:-bin/hushfs}
work=$(mktemp -d /tmp/hushfs-demo.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

mkdir -p "$work/export/src/sub" "$work/state" "$work/out"
printf 'hello from hushfs\n' > "$work/export/src/hello.txt"
head -c 3000000 /dev/urandom > "$work/export/src/sub/random.bin"
ln -s hello.txt "$work/export/src/link"

"$bin" serve "$work/export" --listen 127.0.0.1 --nfs-port 0 --mount-port 0 \
  --state-dir "$work/state" > "$work/serve.out" 2> "$work/serve.err" &
pid=$!
for _ in $(seq 100); do grep -q '^hushfs serve:' "$work/serve.out" && break; sleep 0.1; done
line=$(grep '^hushfs serve:' "$work/serve.out") || { cat "$work/serve.err"; exit 1; }
echo "$line"
nfsport=$(sed -E 's/.* nfs [^ ]*:([0-9]+).*/\1/' <<<"$line")
mountport=$(sed -E 's/.* mount [^ ]*:([0-9]+).*/\1/' <<<"$line")
url() { echo "nfs://127.0.0.1$work/export$1?version=3&nfsport=$nfsport&mountport=$mountport"; }

echo "== nfs-ls -R"
nfs-ls -R "$(url /)"
echo "== nfs-cat src/hello.txt"
nfs-cat "$(url /src/hello.txt)"
echo "== nfs-cp out and back in"
nfs-cp "$(url /src/sub/random.bin)" "$work/out/random.bin"
nfs-cp "$work/out/random.bin" "$(url /src/copy.bin)"
cmp "$work/export/src/sub/random.bin" "$work/out/random.bin"
cmp "$work/export/src/sub/random.bin" "$work/export/src/copy.bin"
echo "demo: 3 MB copied out and back in through hushfs serve, byte-exact"
