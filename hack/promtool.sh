#!/usr/bin/env bash
# Prints the path of promtool (the alert rules' checker and unit-test runner), taken out of
# Debian's prometheus package into bin/tools/ without installing the package (which would bring
# a Prometheus server and its service).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
exec "$root/hack/deb-binary.sh" prometheus usr/bin/promtool "$root/bin/tools/promtool"
