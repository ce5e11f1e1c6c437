#!/usr/bin/env bash
# Installs what hushfs's tests and benchmarks need on Debian bookworm.
# Idempotent: packages already present are not fetched again.
set -euo pipefail
pkgs=(nfs-ganesha nfs-ganesha-vfs libnfs-utils fuse3 tshark rpcbind iproute2 util-linux)
# The conformance suites (make conformance) are built from source: pjdfstest
# with autotools, cthon04 against libtirpc. pjdfstest names its files with
# openssl; cthon04's general group compiles, runs tbl and nroff, and times
# them with /usr/bin/time.
pkgs+=(gcc make libc6-dev autoconf automake libtool libtirpc-dev openssl groff-base time)
# pynfs (the NFSv4.1 server tests) generates its XDR code with ply.
pkgs+=(python3 python3-ply)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The host must not run rpcbind or ganesha: tests start their own inside private
# network namespaces. Debian's packages start them on install; stop them if they did.
for svc in nfs-ganesha rpcbind.socket rpcbind; do
  if command -v systemctl >/dev/null && systemctl is-active --quiet "$svc" 2>/dev/null; then
    systemctl stop "$svc" || true
  fi
done
cd "$(dirname "$0")/.."
go mod download
