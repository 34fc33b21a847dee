#!/usr/bin/env bash
# Copies the generated and shared install files into the Helm chart (make generate), so the chart
# and config/ (kustomize) come from one source: the CRDs, the operator's ClusterRole, the
# Prometheus Operator objects and the Grafana dashboard. hack/verify-generated.sh fails when the
# chart's copies are stale; a test renders the chart and compares it with config/default.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
chart="$root/charts/bnerd-vpn-operator"
mkdir -p "$chart/crds" "$chart/files"
rm -f "$chart"/crds/*.yaml
# (the tenant roles too: config/rbac/tenant_roles.yaml)
# the CRDs config/crd installs (a group without a reconciler is not served yet)
for f in $(sed -n 's/^ *- *\(bases\/.*\.yaml\) *$/\1/p' "$root/config/crd/kustomization.yaml"); do
  cp "$root/config/crd/$f" "$chart/crds/"
done
cp "$root/config/rbac/role.yaml" "$chart/files/role.yaml"
cp "$root/config/prometheus/podmonitors.yaml" "$chart/files/podmonitors.yaml"
cp "$root/config/prometheus/alerts.yaml" "$chart/files/alerts.yaml"
if [ -f "$root/config/grafana/bnerd-vpn-dashboard.json" ]; then
  cp "$root/config/grafana/bnerd-vpn-dashboard.json" "$chart/files/dashboard.json"
fi
cp "$root/config/rbac/tenant_roles.yaml" "$chart/files/tenant-roles.yaml"
