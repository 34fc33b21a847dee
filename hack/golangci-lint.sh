#!/usr/bin/env bash
# Prints the path of golangci-lint, built once from the Go module proxy into bin/tools/ (kept
# between runs like helm) in the configuration the tests are built in (static, -trimpath), so
# the standard library and the x/ modules it shares with them are compiled once. make lint
# runs it with .golangci.yml.
set -euo pipefail
VERSION=v2.15.0
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/bin/tools/golangci-lint-$VERSION"
mkdir -p "$root/bin/tools"
exec 9>"$root/bin/tools/.golangci-lint.lock"
flock 9
if [ ! -x "$dir/golangci-lint" ]; then
  echo "golangci-lint.sh: building golangci-lint $VERSION from the Go module proxy (once)" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$VERSION" >&2
  mkdir -p "$dir"
  mv "$tmp/golangci-lint" "$dir/golangci-lint"
fi
echo "$dir/golangci-lint"
