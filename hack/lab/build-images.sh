#!/usr/bin/env bash
# Builds the lab's container images as single-layer OCI image archives, without a registry or a
# container builder: a layer tar, a config JSON, a manifest, index.json and oci-layout, written
# with tar and sha256sum.
#   bnerd-vpn-operator:lab  /operator (static Go)
#   bnerd-vpn-gateway:lab   /gateway-agent (static Go) + strongSwan (charon-systemd, swanctl, the
#                           plugins incl. kernel-libipsec) + nft, with their ldd closure and
#                           libgcc_s.so.1, copied from the host's Debian packages
#   lab-pause:lab           a tiny static Go program that sleeps (the sandbox image)
# IMAGE_TAG (make images: the version) tags the operator and gateway images instead of "lab" and
# puts the archives into bin/images/<tag>/; VERSION is what the binaries report.
# Outputs bin/images/<name>-<hash>.tar (hash over the inputs) and bin/images/<name>.tar -> that;
# an unchanged input rebuilds nothing. Prints one line per image: "<ref> <archive>".
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out="$root/bin/images"
mkdir -p "$out"
log() { echo "build-images: $*" >&2; }

"$root/hack/install-test-deps.sh" lab   # strongSwan and nft, copied from the host into the gateway image

# pack <name> <ref> <rootfs> <config-json-fragment>: writes $out/<name>.tar (an OCI archive).
pack() {
  local name=$1 ref=$2 rootfs=$3 cfg=$4 w
  w=$(mktemp -d)
  mkdir -p "$w/oci/blobs/sha256"
  tar -C "$rootfs" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$w/layer.tar" .
  local ld ls
  ld=$(sha256sum "$w/layer.tar" | cut -d' ' -f1); ls=$(stat -c %s "$w/layer.tar")
  mv "$w/layer.tar" "$w/oci/blobs/sha256/$ld"
  printf '{"architecture":"amd64","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"hack/lab/build-images.sh"}]}' "$cfg" "$ld" >"$w/config.json"
  local cd cs
  cd=$(sha256sum "$w/config.json" | cut -d' ' -f1); cs=$(stat -c %s "$w/config.json")
  mv "$w/config.json" "$w/oci/blobs/sha256/$cd"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' "$cd" "$cs" "$ld" "$ls" >"$w/manifest.json"
  local md ms
  md=$(sha256sum "$w/manifest.json" | cut -d' ' -f1); ms=$(stat -c %s "$w/manifest.json")
  mv "$w/manifest.json" "$w/oci/blobs/sha256/$md"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"docker.io/library/%s","org.opencontainers.image.ref.name":"%s"}}]}' "$md" "$ms" "$ref" "${ref##*:}" >"$w/oci/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$w/oci/oci-layout"
  tar -C "$w/oci" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$out/$name.tar.tmp" .
  mv "$out/$name.tar.tmp" "$out/$name.tar"
  rm -rf "$w"
}

# hash_of <files/dirs...>: a content hash over the inputs (paths and bytes).
hash_of() { (cd "$root" && for p in "$@"; do find "$p" -type f -print0 2>/dev/null | sort -z | xargs -0 sha256sum; done; go version) | sha256sum | cut -c1-16; }

# image <name> <ref> <hash> <builder-function>: runs the builder only when the hash changed.
image() {
  local name=$1 ref=$2 h=$3 fn=$4
  local archive="$out/$name-$h.tar"
  if [ ! -f "$archive" ]; then
    log "building $ref ($h)"
    local rootfs; rootfs=$(mktemp -d)
    # set -e again: bash drops it in command substitutions, and a failed build would otherwise
    # be packed (an image without its program) and cached under the inputs' hash
    local cfg; cfg=$(set -e; "$fn" "$rootfs")
    pack "$name-$h" "$ref" "$rootfs" "$cfg"
    rm -rf "$rootfs"
    # keep only the newest archive of this image
    find "$out" -maxdepth 1 -name "$name-*.tar" ! -name "$name-$h.tar" -delete
  fi
  ln -sf "$name-$h.tar" "$out/$name.tar"
  echo "$ref $out/$name.tar"
}

# The tag of the operator and gateway images (make images: the version), and the version the
# binaries report (internal/version).
IMAGE_TAG=${IMAGE_TAG:-lab}
# images of another tag than the lab's go to a folder of their own (bin/images/<tag>/)
if [ "$IMAGE_TAG" != lab ]; then out="$out/$IMAGE_TAG"; mkdir -p "$out"; fi
VERSION=${VERSION:-$(cd "$root" && git describe --tags --always --dirty 2>/dev/null || echo dev)}

gobuild() { # gobuild <dir> <pkg> <out>
  (cd "$1" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -buildvcs=false \
    -ldflags="-s -w -X github.com/bnerd/bnerd-vpn-operator/internal/version.Version=$VERSION" -o "$3" "$2")
}

build_pause() {
  local r=$1
  gobuild "$root/hack/tools/kube" ./cmd/pause "$r/pause" >&2
  echo '{"Entrypoint":["/pause"],"User":"65535:65535"}'
}

build_operator() {
  local r=$1
  gobuild "$root" ./cmd/operator "$r/operator" >&2
  mkdir -p "$r/tmp" && chmod 1777 "$r/tmp"
  echo '{"Entrypoint":["/operator"],"User":"65532:65532","WorkingDir":"/"}'
}

# copy_closure <rootfs> <files...>: the files and their shared libraries (ldd), at their
# merged-/usr paths, plus libgcc_s.so.1 (glibc dlopens it for pthread_cancel; ldd does not list it).
copy_closure() {
  local r=$1; shift
  local libs
  libs=$( (for f in "$@"; do ldd "$f" 2>/dev/null | awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}'; done
           ls /lib/x86_64-linux-gnu/libgcc_s.so.1) | sort -u)
  local l dst
  for l in $libs; do
    dst=$(echo "$l" | sed -E 's#^/(lib|lib64)/#/usr/\1/#')
    mkdir -p "$r$(dirname "$dst")"
    cp -L "$l" "$r$dst"
  done
}

build_gateway() {
  local r=$1
  gobuild "$root" ./cmd/gateway-agent "$r/gateway-agent" >&2
  mkdir -p "$r/usr/sbin" "$r/usr/lib" "$r/usr/lib64" "$r/etc" "$r/run" "$r/tmp" "$r/var"
  ln -s usr/lib "$r/lib"; ln -s usr/lib64 "$r/lib64"; ln -s usr/sbin "$r/sbin"; ln -s usr/bin "$r/bin"
  ln -s ../run "$r/var/run"
  chmod 1777 "$r/tmp"
  cp -L /usr/sbin/charon-systemd /usr/sbin/swanctl /usr/sbin/nft "$r/usr/sbin/"
  mkdir -p "$r/usr/lib/ipsec"
  cp -a /usr/lib/ipsec/. "$r/usr/lib/ipsec/"
  copy_closure "$r" /usr/sbin/charon-systemd /usr/sbin/swanctl /usr/sbin/nft /usr/lib/ipsec/*.so.0 /usr/lib/ipsec/plugins/*.so
  cp "$root/hack/lab/image/strongswan.conf" "$r/etc/strongswan.conf"
  # kernel ESP (nodes with esp4/xfrm): the same without kernel-libipsec, so kernel-netlink
  # installs real XFRM states and policies; the operator selects it (STRONGSWAN_CONF) unless
  # the install runs a userspace dataplane
  sed '/^ *load = /s/ kernel-libipsec / /' "$root/hack/lab/image/strongswan.conf" >"$r/etc/strongswan-kernel.conf"
  if grep -q '^ *load = .* kernel-libipsec ' "$r/etc/strongswan-kernel.conf" || ! grep -q '^ *load = .* kernel-netlink ' "$r/etc/strongswan-kernel.conf"; then
    echo "build-images: strongswan-kernel.conf still loads kernel-libipsec or lacks kernel-netlink" >&2; exit 1
  fi
  printf 'root:x:0:0:root:/:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
  echo '{"Entrypoint":["/usr/sbin/charon-systemd"],"Env":["PATH=/usr/sbin:/usr/bin"],"WorkingDir":"/"}'
}

# inputs, relative to $root (host files absolute)
src_hash() { hash_of go.mod go.sum cmd internal api hack/lab/build-images.sh "$@"; }

image lab-pause "lab-pause:lab" "$(hash_of hack/tools/kube/cmd/pause hack/lab/build-images.sh)" build_pause
# the tag and the version are inputs too (an image's name and what its binaries report)
tagged() { echo "$1-$(echo "$IMAGE_TAG $VERSION" | sha256sum | cut -c1-8)"; }
image operator "bnerd-vpn-operator:$IMAGE_TAG" "$(tagged "$(src_hash)")" build_operator
image gateway "bnerd-vpn-gateway:$IMAGE_TAG" "$(tagged "$(src_hash hack/lab/image /usr/sbin/charon-systemd /usr/sbin/nft /usr/lib/ipsec)")" build_gateway
