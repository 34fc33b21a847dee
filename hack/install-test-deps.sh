#!/usr/bin/env bash
# Installs the Debian packages the tests use (real nftables, network namespaces, traffic tools,
# strongSwan, the CNI plugins the lab's NAD dispatch runs) when any is missing, promtool (hack/promtool.sh) and libreswan's addconn
# (hack/libreswan-addconn.sh). Needs root (CI and the lab
# run as root).
set -euo pipefail
packages=(nftables iproute2 wireguard-tools iputils-ping socat iperf3 containernetworking-plugins strongswan-swanctl charon-systemd libstrongswan-standard-plugins libstrongswan-extra-plugins libcharon-extra-plugins)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
"$(dirname "$0")/promtool.sh" >/dev/null
"$(dirname "$0")/libreswan-addconn.sh" >/dev/null
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-test-deps: need root to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-test-deps: installing ${missing[*]}" >&2
DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
