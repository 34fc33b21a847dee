#!/usr/bin/env bash
# deb-binary.sh <package> <path in the package> <output>: takes one binary out of a Debian
# package into bin/tools/ without installing the package (promtool without a Prometheus server,
# libreswan's addconn without a libreswan that would remove charon). Cached; one apt-get
# download on a fresh machine. Prints the output's path.
set -euo pipefail
pkg=$1 inside=$2 out=$3
if [ ! -x "$out" ]; then
  w=$(mktemp -d)
  trap 'rm -rf "$w"' EXIT
  (cd "$w" && apt-get download "$pkg" >/dev/null 2>&1) || {
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    (cd "$w" && apt-get download "$pkg" >&2)
  }
  dpkg-deb -x "$w"/"${pkg}"_*.deb "$w/x"
  mkdir -p "$(dirname "$out")"
  cp "$w/x/$inside" "$out.tmp" && mv "$out.tmp" "$out"
fi
echo "$out"
