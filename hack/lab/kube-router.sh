#!/usr/bin/env bash
# Prints the path of kube-router, the lab's NetworkPolicy enforcer (cluster-up.sh runs only its
# firewall: iptables + ipset beside the lab's bridge CNI). Built once from the Go module proxy into
# bin/tools/kube-router-<version>/ (bin/ is kept between CI runs) and reused afterwards; a cold
# build takes ~80 s on 2 cores. v2.1.0 is the only version the module proxy serves; advisories
# exist for it: a lab-only enforcer, nothing the project ships.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
v=v2.1.0
dir="$root/bin/tools/kube-router-$v"
if [ ! -x "$dir/kube-router" ]; then
  echo "kube-router.sh: building kube-router $v from the Go module proxy (~80 s cold)" >&2
  # into a temporary GOBIN, then renamed: a build cut short leaves no binary that looks cached
  tmp="$dir.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$root" && GOBIN="$tmp" GOFLAGS=-buildvcs=false CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$v" \
    "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$v") >&2
  mkdir -p "$dir"
  mv "$tmp/kube-router" "$dir/kube-router"
fi
echo "$dir/kube-router"
