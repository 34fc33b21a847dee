#!/usr/bin/env bash
# deb-binary.sh <package> <path in the package> <output> [<path> <output>]...: takes binaries out
# of a Debian package into bin/tools/ without installing the package (promtool without a
# Prometheus server, libreswan's programs without a libreswan that would remove charon). Cached
# (nothing is downloaded when every output is there); one apt-get download on a fresh machine.
# Prints the first output's path.
set -euo pipefail
pkg=$1
shift
pairs=("$@")
[ $(( ${#pairs[@]} % 2 )) -eq 0 ] && [ ${#pairs[@]} -gt 0 ] || { echo "usage: deb-binary.sh <package> (<path in the package> <output>)..." >&2; exit 2; }
missing=false
for ((i = 1; i < ${#pairs[@]}; i += 2)); do [ -x "${pairs[i]}" ] || missing=true; done
if $missing; then
  # one extraction at a time (make test's stages may ask at once)
  mkdir -p "$(dirname "${pairs[1]}")"
  exec 9>"$(dirname "${pairs[1]}")/.deb-binary-$pkg.lock"
  flock 9
  missing=false
  for ((i = 1; i < ${#pairs[@]}; i += 2)); do [ -x "${pairs[i]}" ] || missing=true; done
fi
if $missing; then
  w=$(mktemp -d)
  trap 'rm -rf "$w"' EXIT
  (cd "$w" && apt-get download "$pkg" >/dev/null 2>&1) || {
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    (cd "$w" && apt-get download "$pkg" >&2)
  }
  dpkg-deb -x "$w"/"${pkg}"_*.deb "$w/x"
  for ((i = 0; i < ${#pairs[@]}; i += 2)); do
    out=${pairs[i+1]}
    mkdir -p "$(dirname "$out")"
    cp "$w/x/${pairs[i]}" "$out.tmp" && mv "$out.tmp" "$out"
  done
fi
echo "${pairs[1]}"
