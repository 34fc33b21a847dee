#!/usr/bin/env bash
# Prints the path of crd-ref-docs, the generator of the CRD reference (docs/reference/crds.md,
# hack/gen-crd-docs.sh), built once from the Go module proxy into bin/tools/ at the pinned
# version (as the Makefile does for controller-gen).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=v0.3.0
bin="$root/bin/tools/crd-ref-docs-$version"
if [ ! -x "$bin" ]; then
  mkdir -p "$root/bin/tools"
  tmp=$(mktemp -d "$root/bin/tools/.crd-ref-docs.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "crd-ref-docs.sh: building github.com/elastic/crd-ref-docs@$version" >&2
  (cd "$tmp" && GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath "github.com/elastic/crd-ref-docs@$version") >&2
  mv "$tmp/crd-ref-docs" "$bin"
fi
echo "$bin"
