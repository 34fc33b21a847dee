#!/usr/bin/env bash
# Fails when the committed generated files (deepcopy, CRDs, RBAC) differ from what
# `make generate` produces from the current sources. The files are regenerated in place.
set -euo pipefail
cd "$(dirname "$0")/.."
generated() { find api -name 'zz_generated*.go'; find config/crd/bases -name '*.yaml'; echo config/rbac/role.yaml; }
before=$(generated | sort | xargs sha256sum)
make --no-print-directory generate >/dev/null
after=$(generated | sort | xargs sha256sum)
if [ "$before" != "$after" ]; then
  diff <(echo "$before") <(echo "$after") || true
  echo "generated files were stale (now regenerated): review and commit them" >&2
  exit 1
fi
