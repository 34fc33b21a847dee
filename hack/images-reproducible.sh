#!/usr/bin/env bash
# Builds the operator and gateway images twice from the same commit (the second time without the
# cache) and fails unless both builds have the same digests: the images are reproducible.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tag=reproducible-check
dir="$root/bin/images/$tag"
digests() { for f in "$dir/operator.tar" "$dir/gateway.tar"; do tar -xOf "$f" ./index.json | sha256sum | cut -c1-64; done; }
rm -rf "$dir"
IMAGE_TAG=$tag VERSION=${VERSION:-check} "$root/hack/lab/build-images.sh" >/dev/null
first=$(digests)
rm -f "$dir"/operator-*.tar "$dir"/gateway-*.tar
IMAGE_TAG=$tag VERSION=${VERSION:-check} "$root/hack/lab/build-images.sh" >/dev/null
second=$(digests)
rm -rf "$dir"
if [ "$first" != "$second" ]; then
  echo "images are not reproducible: index digests $(echo $first) then $(echo $second)" >&2
  exit 1
fi
echo "images reproducible: two builds, same digests ($(echo $first | cut -c1-12)…)"
