#!/usr/bin/env bash
# Prints the path of libreswan's addconn (`ipsec addconn --checkconfig`: libreswan's own parser of
# ipsec.conf), taken out of Debian's libreswan package into bin/tools/ without installing the
# package: it conflicts with strongSwan's charon, which the tests run. Its shared libraries are
# installed as ordinary packages (none of them conflicts).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/bin/tools/libreswan/addconn"
libs=(libnss3 libnspr4 libnss3-tools libevent-core-2.1-7 libevent-pthreads-2.1-7 libldns3 libunbound8
  libcap-ng0 libaudit1 libcurl3-nss libldap-2.5-0 libpam0g libselinux1 libsystemd0 libcrypt1)
missing=()
for p in "${libs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
exec "$root/hack/deb-binary.sh" libreswan usr/libexec/ipsec/addconn "$out"
