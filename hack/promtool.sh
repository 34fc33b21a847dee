#!/usr/bin/env bash
# Prints the path of promtool (the alert rules' checker and unit-test runner), taken out of
# Debian's prometheus package into bin/tools/ without installing the package (which would bring
# a Prometheus server and its service). Cached; one apt-get download on a fresh machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/bin/tools/promtool"
if [ ! -x "$out" ]; then
  w=$(mktemp -d)
  trap 'rm -rf "$w"' EXIT
  (cd "$w" && apt-get download prometheus >/dev/null 2>&1) || {
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    (cd "$w" && apt-get download prometheus >&2)
  }
  dpkg-deb -x "$w"/prometheus_*.deb "$w/x"
  mkdir -p "$root/bin/tools"
  cp "$w/x/usr/bin/promtool" "$out.tmp" && mv "$out.tmp" "$out"
fi
echo "$out"
