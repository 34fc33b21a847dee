#!/usr/bin/env bash
# Writes docs/reference/crds.md, the CRD reference, from the Go types in api/ (both groups) with
# crd-ref-docs (hack/crd-ref-docs.sh) and its config and templates in hack/crd-ref-docs/.
# `make generate` runs it; hack/verify-generated.sh fails when the committed file is stale.
# Deterministic: the generator sorts groups, types and markers; fields keep source order;
# trailing blanks and runs of empty lines are removed here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tool=$(hack/crd-ref-docs.sh)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$tool" --source-path=./api --config=hack/crd-ref-docs/config.yaml \
  --templates-dir=hack/crd-ref-docs/templates --renderer=markdown \
  --output-path="$tmp/crds.md" --log-level=ERROR
mkdir -p docs/reference
sed -e 's/[[:space:]]*$//' "$tmp/crds.md" | cat -s | sed -e '${/^$/d}' >"$tmp/tidy.md"
if ! cmp -s "$tmp/tidy.md" docs/reference/crds.md; then
  mv "$tmp/tidy.md" docs/reference/crds.md
fi
