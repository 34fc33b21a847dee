#!/usr/bin/env bash
# Prints the path of helm, built once from the Go module proxy into bin/tools/ (kept between CI
# runs like the Kubernetes binaries). The chart's tests and the lab's install use it.
set -euo pipefail
HELM_VERSION=v3.22.0
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/bin/tools/helm-$HELM_VERSION"
# One build at a time: the tests that need helm run in parallel, and each waits for the first
# one's build instead of compiling helm again.
mkdir -p "$root/bin/tools"
exec 9>"$root/bin/tools/.helm.lock"
flock 9
if [ ! -x "$dir/helm" ]; then
  echo "helm.sh: building helm $HELM_VERSION from the Go module proxy (once)" >&2
  tmp=$(mktemp -d)
  GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
  mkdir -p "$dir"
  mv "$tmp/helm" "$dir/helm"
  rm -rf "$tmp"
fi
echo "$dir/helm"
