#!/usr/bin/env bash
# Fails when the committed generated files (deepcopy, CRDs, RBAC, the CRD reference
# docs/reference/crds.md, the chart's copies of config/ files) differ from what `make generate` produces from the current sources.
# The files are regenerated in place.
set -euo pipefail
cd "$(dirname "$0")/.."
generated() { find api -name 'zz_generated*.go'; find config/crd/bases -name '*.yaml'; echo config/rbac/role.yaml; echo docs/reference/crds.md; find charts/bnerd-vpn-operator/crds charts/bnerd-vpn-operator/files -type f; }
hashes() { generated | sort | while read -r f; do if [ -f "$f" ]; then sha256sum "$f"; else echo "missing  $f"; fi; done; }
before=$(hashes)
make --no-print-directory generate >/dev/null
# the CRD reference, also when `make generate` does not run it (idempotent when it does)
hack/gen-crd-docs.sh
after=$(hashes)
if [ "$before" != "$after" ]; then
  diff <(echo "$before") <(echo "$after") || true
  echo "generated files were stale (now regenerated): review and commit them" >&2
  exit 1
fi
