#!/usr/bin/env bash
# install-test-deps.sh [--check] [group...]: the one table of every external program the
# repository runs (its Go tests, the scripts make runs, the lab, the VM guest), and the
# installer of the Debian packages that provide them.
#
# Each row: program (a name looked up on PATH, or an absolute path), the Debian package that
# provides it, its groups (comma-separated), and for a bin/ row the script that makes it.
#   tests  go test ./... and make test's other stages (the netns harness, charontest, envtest)
#   lab    hack/lab (make lab, make e2e-cluster; hack/lab/cluster-up.sh installs this group)
#   vm     the VM tests: qemu, the kit hack/vm/kit.sh builds (it installs this group) and the
#          tools the guest runs (the host's root, read-only)
#   base   what a fresh machine (Debian with Go and gcc) already has: listed, never installed
# Absolute paths name what has no program name: the CNI plugins (run by libcni), charon's
# plugins. The bin/ rows are extracted from Debian packages into bin/tools by their scripts
# (hack/promtool.sh, hack/libreswan.sh) without installing those packages; helm,
# controller-gen, crd-ref-docs, kube-router and the kube binaries are built from Go into bin/
# and are not rows. In hack/vm/init (the initramfs) mount, insmod, uname, dd, poweroff and
# switch_root are busybox-static's applets; their rows name the host's packages.
#
# hack/tools_test.go fails when the Go code or a script names a program that is not a row
# (add the row here), and with BNERD_REQUIRE_TOOLS=1 (make test) when a row outside bin/ is not
# on the machine (a wrong package name).
#
# With no group: every group but base (make test-deps). Installs the missing packages (needs
# root then; CI and the lab run as root) and runs the bin/ rows' scripts; prints nothing when
# everything is there. --check installs nothing: it prints the missing packages (and the
# scripts of missing bin/ rows) on one line and exits 1 when something is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
check=false
if [ "${1:-}" = --check ]; then check=true; shift; fi

declare -A want=() known=() seen=()
for g in "$@"; do want[$g]=1; done
pkgs=() scripts=() absent=()
while IFS= read -r line; do
  line=${line%%#*}
  read -r prog pkg groups script <<<"$line" || true
  [ -n "${prog:-}" ] || continue
  selected=false
  groups=${groups:-}
  for g in ${groups//,/ }; do
    known[$g]=1
    if [ "$g" != base ] && { [ $# = 0 ] || [ -n "${want[$g]:-}" ]; }; then selected=true; fi
  done
  $selected || continue
  if [ -n "${script:-}" ]; then
    if $check; then
      [ -x "$root/$prog" ] || absent+=("$script")
    elif [ -z "${seen[$script]:-}" ]; then
      seen[$script]=1; scripts+=("$script")
    fi
  elif [ -z "${seen[$pkg]:-}" ]; then
    seen[$pkg]=1; pkgs+=("$pkg")
  fi
done <<'TOOLS'
# program                                                 package                         groups        made by
nft                                                       nftables                        tests,lab,vm
wg                                                        wireguard-tools                 tests,lab,vm
ping                                                      iputils-ping                    tests,lab,vm
socat                                                     socat                           tests,lab,vm
iperf3                                                    iperf3                          tests,vm
charon-systemd                                            charon-systemd                  tests,lab,vm
swanctl                                                   strongswan-swanctl              tests,lab,vm
/usr/lib/ipsec/plugins/libstrongswan-openssl.so           libstrongswan-standard-plugins  tests,lab,vm  # and gcm
/usr/lib/ipsec/plugins/libstrongswan-curve25519.so        libstrongswan-extra-plugins     tests,lab,vm
/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so   libcharon-extra-plugins         tests,lab     # userspace ESP
/usr/lib/cni/macvlan                                      containernetworking-plugins     tests,lab     # internal/lab/labcloud, lab-cloud's NADs
/usr/lib/cni/static                                       containernetworking-plugins     tests,lab
/usr/lib/cni/host-device                                  containernetworking-plugins     tests
/usr/lib/cni/vlan                                         containernetworking-plugins     tests,lab     # a trunk subport's NAD
/usr/lib/cni/tuning                                       containernetworking-plugins     tests,lab     # its MAC
/usr/lib/cni/loopback                                     containernetworking-plugins     tests
/usr/lib/cni/bridge                                       containernetworking-plugins     lab           # the lab cluster's pod network
/usr/lib/cni/host-local                                   containernetworking-plugins     lab
/usr/lib/cni/portmap                                      containernetworking-plugins     lab
etcd                                                      etcd-server                     tests,lab     # envtest's (hack/test-binaries.sh links it into bin/k8s)
bin/tools/promtool                                        prometheus                      tests         hack/promtool.sh
bin/tools/libreswan/addconn                               libreswan                       tests,vm      hack/libreswan.sh
bin/tools/libreswan/pluto                                 libreswan                       vm            hack/libreswan.sh
bin/tools/libreswan/whack                                 libreswan                       vm            hack/libreswan.sh
certutil                                                  libnss3-tools                   vm            # pluto's NSS database
containerd                                                containerd                      lab
ctr                                                       containerd                      lab
runc                                                      runc                            lab           # containerd's runtime
iptables                                                  iptables                        lab           # kubelet, kube-router, cluster-down.sh
ipset                                                     ipset                           lab           # kube-router
conntrack                                                 conntrack                       tests,lab     # kube-proxy; the e2e NAT site's remapping
modprobe                                                  kmod                            lab,vm
depmod                                                    kmod                            vm
insmod                                                    kmod                            vm
qemu-system-x86_64                                        qemu-system-x86                 vm
/bin/busybox                                              busybox-static                  vm            # the initramfs (switch_root applet)
ip                                                        iproute2                        base
nstat                                                     iproute2                        base
bash                                                      bash                            base
sh                                                        dash                            base
awk                                                       mawk                            base
sed                                                       sed                             base
grep                                                      grep                            base
find                                                      findutils                       base
xargs                                                     findutils                       base
cmp                                                       diffutils                       base
diff                                                      diffutils                       base
tar                                                       tar                             base
gzip                                                      gzip                            base
xz                                                        xz-utils                        base
basename                                                  coreutils                       base
cat                                                       coreutils                       base
chmod                                                     coreutils                       base
cp                                                        coreutils                       base
cut                                                       coreutils                       base
date                                                      coreutils                       base
dd                                                        coreutils                       base
dirname                                                   coreutils                       base
du                                                        coreutils                       base
env                                                       coreutils                       base
head                                                      coreutils                       base
id                                                        coreutils                       base
install                                                   coreutils                       base
ln                                                        coreutils                       base
ls                                                        coreutils                       base
mkdir                                                     coreutils                       base
nice                                                      coreutils                       base
mktemp                                                    coreutils                       base
mv                                                        coreutils                       base
od                                                        coreutils                       base
printf                                                    coreutils                       base
readlink                                                  coreutils                       base
rm                                                        coreutils                       base
rmdir                                                     coreutils                       base
seq                                                       coreutils                       base
sha256sum                                                 coreutils                       base
sleep                                                     coreutils                       base
sort                                                      coreutils                       base
stat                                                      coreutils                       base
sync                                                      coreutils                       base
tail                                                      coreutils                       base
tee                                                       coreutils                       base
timeout                                                   coreutils                       base
touch                                                     coreutils                       base
tr                                                        coreutils                       base
true                                                      coreutils                       base
uname                                                     coreutils                       base
wc                                                        coreutils                       base
flock                                                     util-linux                      base
nsenter                                                   util-linux                      base
setsid                                                    util-linux                      base
switch_root                                               util-linux                      base
unshare                                                   util-linux                      base
mount                                                     mount                           base
umount                                                    mount                           base
kill                                                      procps                          base
pgrep                                                     procps                          base
sysctl                                                    procps                          base
poweroff                                                  systemd-sysv                    base
ldd                                                       libc-bin                        base
apt-get                                                   apt                             base
apt-cache                                                 apt                             base
dpkg                                                      dpkg                            base
dpkg-deb                                                  dpkg                            base
dpkg-query                                                dpkg                            base
openssl                                                   openssl                         base
bc                                                        bc                              base
curl                                                      curl                            base
jq                                                        jq                              base
git                                                       git                             base
make                                                      make                            base
go                                                        -                               base          # the Go toolchain (not a Debian package)
gofmt                                                     -                               base
TOOLS
for g in "${!want[@]}"; do
  [ -n "${known[$g]:-}" ] || { echo "install-test-deps: no group $g (groups: ${!known[*]})" >&2; exit 2; }
done

declare -A installed=()
if [ ${#pkgs[@]} -gt 0 ]; then
  while read -r p status; do
    [ "$status" = installed ] && installed[$p]=1
  done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${pkgs[@]}" 2>/dev/null || true)
fi
missing=()
for p in "${pkgs[@]}"; do [ -n "${installed[$p]:-}" ] || missing+=("$p"); done

if $check; then
  out=("${missing[@]}" "${absent[@]}")
  [ ${#out[@]} -eq 0 ] && exit 0
  echo "${out[*]}"
  exit 1
fi
for s in "${scripts[@]}"; do "$root/$s" >/dev/null; done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-test-deps: need root to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-test-deps: installing ${missing[*]}" >&2
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >&2
