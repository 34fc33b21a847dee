#!/usr/bin/env bash
# kit.sh [--check]: builds (once) the kit the VM tests boot (internal/testing/vmtest) and prints its
# directory, bin/vm/kit-<kernel package>_<version>-<hash of this script and init>/:
#   vmlinux       Debian's stock kernel (generic linux-image-amd64, NOT installed on the host:
#                 apt-get download + dpkg-deb -x), uncompressed so qemu boots its PVH entry
#   kroot/lib/modules/<release>/   the modules the dataplane needs (net/, crypto/, lib/,
#                 arch/x86/crypto, veth, tun, wireguard, virtio, 9p, overlay) with depmod's indexes
#   initrd.gz     busybox-static + virtio/9p/overlay modules + hack/vm/init
# A warm run does nothing but look the kernel version up. Installs the vm group of
# hack/install-test-deps.sh's table when missing (qemu-system-x86, busybox-static, kmod and the
# tools the guest runs, which uses the host's root read-only; needs root then). See
# docs/development.md ("The kernel dataplane in a VM") for what the VM runs.
# --check: print the kit's directory if it is built and the vm group is installed, else say why
# on stderr and exit 1 (builds and installs nothing; the tests use it to skip).
# VM_KERNEL_PACKAGE=linux-image-6.1.0-57-amd64 pins the kernel package (default: what
# linux-image-amd64 depends on now).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/hack/vm"
base="$root/bin/vm"
check=false
[ "${1:-}" = --check ] && check=true
log() { echo "vm-kit: $*" >&2; }

pkg=${VM_KERNEL_PACKAGE:-$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')}
if [ -z "$pkg" ]; then
  # no apt lists: fall back to the newest kit already built
  latest=$(ls -d "$base"/kit-*/ 2>/dev/null | sort -V | tail -1)
  if [ -n "$latest" ] && [ -f "$latest/ok" ]; then echo "${latest%/}"; exit 0; fi
  $check && { log "cannot resolve linux-image-amd64 (apt-get update) and no kit is built"; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
fi
ver=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2; exit}')
[ -n "$ver" ] && [ "$ver" != "(none)" ] || { log "no candidate version for $pkg"; exit 1; }
hash=$(cat "$here/kit.sh" "$here/init" | sha256sum | cut -c1-10)
kit="$base/kit-${pkg}_${ver}-$hash"

# the vm group's packages not installed (--check installs nothing; exit 1: some are missing)
rc=0
missing=$("$root/hack/install-test-deps.sh" --check vm) || rc=$?
[ $rc -le 1 ] || { log "hack/install-test-deps.sh --check vm failed (rc $rc)"; exit 1; }

if $check; then
  [ -z "$missing" ] || { log "not installed: $missing (hack/vm/kit.sh installs them)"; exit 1; }
  [ -f "$kit/ok" ] || { log "kit not built: $kit (run hack/vm/kit.sh)"; exit 1; }
  echo "$kit"; exit 0
fi

[ -z "$missing" ] || "$root/hack/install-test-deps.sh" vm

if [ -f "$kit/ok" ]; then echo "$kit"; exit 0; fi

mkdir -p "$base"
exec 9>"$base/.kit.lock"
flock 9
if [ -f "$kit/ok" ]; then echo "$kit"; exit 0; fi
start=$(date +%s.%N)
w=$(mktemp -d "$base/.build-XXXXXX")
trap 'rm -rf "$w"' EXIT

deb="$base/debs/${pkg}_${ver}_amd64.deb"
if [ ! -f "$deb" ]; then
  log "downloading $pkg $ver (~70 MB, once)"
  mkdir -p "$base/debs"
  (cd "$w" && apt-get download "$pkg=$ver" >/dev/null 2>&1) || {
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
    (cd "$w" && apt-get download "$pkg=$ver" >&2)
  }
  mv "$w"/"${pkg}"_*.deb "$deb.tmp" && mv "$deb.tmp" "$deb"
  # keep only the current package
  find "$base/debs" -name '*.deb' ! -path "$deb" -delete
fi

log "extracting $pkg $ver"
x="$w/x"
dpkg-deb -x "$deb" "$x"
rel=$(ls "$x/lib/modules" 2>/dev/null || ls "$x/usr/lib/modules")
mroot="$x/lib/modules/$rel"; [ -d "$mroot" ] || mroot="$x/usr/lib/modules/$rel"
out="$w/kit"
dst="$out/kroot/lib/modules/$rel"
mkdir -p "$dst/kernel"
# The modules the dataplane needs and whatever it autoloads (nft expressions, xfrm and crypto
# algorithms, tunnels), plus the boot path (virtio, 9p, overlay).
for d in net crypto lib arch/x86/crypto drivers/virtio drivers/net/wireguard fs/9p fs/overlayfs fs/netfs fs/fscache; do
  [ -d "$mroot/kernel/$d" ] || continue
  mkdir -p "$dst/kernel/$(dirname "$d")"
  cp -a "$mroot/kernel/$d" "$dst/kernel/$d"
done
for f in drivers/net/veth.ko drivers/net/tun.ko drivers/net/dummy.ko drivers/net/macvlan.ko drivers/net/ipvlan/ipvlan.ko; do
  [ -f "$mroot/kernel/$f" ] && install -D -m644 "$mroot/kernel/$f" "$dst/kernel/$f"
done
cp "$mroot"/modules.order "$mroot"/modules.builtin* "$dst/" 2>/dev/null || true
depmod -b "$out/kroot" "$rel"
wanted=(esp4 xfrm_user xfrm4_tunnel xfrm_interface wireguard veth tun nf_tables nft_xfrm nft_ct nft_chain_nat
  gcm ghash_generic aesni_intel seqiv drbg jitterentropy_rng virtio_pci 9pnet_virtio 9p overlay)
modprobe -d "$out/kroot" -S "$rel" --show-depends -a "${wanted[@]}" >/dev/null

# The kernel, uncompressed (PVH entry: ~2.7 s less per boot under TCG than the bzImage).
vmlinuz="$x/boot/vmlinuz-$rel"
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -1 | cut -d: -f1)
tail -c +$((off + 1)) "$vmlinuz" | xz -dc --single-stream > "$out/vmlinux" 2>/dev/null || true
if ! head -c4 "$out/vmlinux" | grep -q ELF; then
  log "no xz payload in $vmlinuz; using the bzImage"
  cp "$vmlinuz" "$out/vmlinux"
fi

# initramfs: busybox, the boot modules in dependency order, init.
ird="$w/ird"
mkdir -p "$ird/bin" "$ird/mod"
cp /bin/busybox "$ird/bin/busybox"
install -m755 "$here/init" "$ird/init"
modprobe -d "$out/kroot" -S "$rel" --show-depends -a virtio_pci 9pnet_virtio 9p overlay |
  awk '$1 == "insmod" {print $2}' | awk '!seen[$0]++' | while read -r ko; do
    cp "$ko" "$ird/mod/"
    basename "$ko" >> "$ird/mod/order"
  done
(cd "$ird" && find . | /bin/busybox cpio -o -H newc 2>/dev/null | gzip -1 > "$out/initrd.gz")
echo "$rel" > "$out/kernel.release"
echo "$pkg $ver" > "$out/kernel.package"
touch "$out/ok"
mv "$out" "$kit"
# older kits (other kernel versions or scripts), unless a VM runs (it may be using one; the
# lock is internal/testing/vmtest's LockFile): then the next build removes them
mkdir -p /run/lock
(
  flock -n 8 || exit 0
  for old in "$base"/kit-*; do [ "$old" = "$kit" ] || rm -rf "$old"; done
) 8>/run/lock/bnerd-vmtest.lock
log "kit built in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s: $kit ($(du -sh "$kit" | cut -f1))"
echo "$kit"
