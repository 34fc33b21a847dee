#!/usr/bin/env bash
# Prints the directory bin/tools/libreswan/ holding libreswan's addconn (`ipsec addconn
# --checkconfig`: libreswan's own parser of ipsec.conf, which the device configuration tests
# run), pluto (the IKE daemon the VM tests run as a client site) and whack (its control
# program), taken out of Debian's libreswan package without installing it: the package
# conflicts with strongSwan's charon, which the tests run. Their shared libraries, and
# certutil for pluto's NSS database, are installed as ordinary packages (none conflicts).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/bin/tools/libreswan"
libs=(libnss3 libnspr4 libnss3-tools libevent-core-2.1-7 libevent-pthreads-2.1-7 libldns3 libunbound8
  libcap-ng0 libaudit1 libcurl3-nss libldap-2.5-0 libpam0g libselinux1 libsystemd0 libcrypt1)
missing=()
for p in "${libs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
"$root/hack/deb-binary.sh" libreswan \
  usr/libexec/ipsec/addconn "$out/addconn" \
  usr/libexec/ipsec/pluto "$out/pluto" \
  usr/libexec/ipsec/whack "$out/whack" >/dev/null
echo "$out"
