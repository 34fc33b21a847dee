#!/usr/bin/env bash
# site.sh <name> <index>: a client's IPsec site, its device configured from what we hand the
# client — `kubectl vpn peer-config <name> --format strongswan` for its VPNPeer (our address and
# identity, its identity, our service CIDR as its remote network, the proposals, DPD and the
# PSK) — with only what the generator leaves to the client filled in: the device's outside
# address. Network namespace lab-site-<name> (site_netns in common.sh) running charon-systemd
# (kernel-libipsec). SITE_EXTRA_TS: more local networks the device proposes than its VPNPeer
# has (the e2e's hostile site claims one inside another site's LAN).
# Removed by hack/lab/cluster-down.sh.
set -euo pipefail
source "$(dirname "$0")/common.sh"
n=$1 i=$2 d="$S/sites/$1" ns="lab-site-$1"
site_netns "$n" "$i"
mkdir -p "$d/swanctl"
(umask 077
 site_device_config "$n" strongswan |
   sed -e "s|^\( *\)# local_addrs = {{OUTSIDE_ADDRESS}}.*|\1local_addrs = $(site_link_site "$i")|" >"$d/swanctl/swanctl.conf")
if [ -n "${SITE_EXTRA_TS:-}" ] && ! grep -q "local_ts = .*$SITE_EXTRA_TS" "$d/swanctl/swanctl.conf"; then
  sed -i -e "s|^\( *local_ts = .*\)$|\1, $SITE_EXTRA_TS|" "$d/swanctl/swanctl.conf"
fi
if grep -v '^ *#' "$d/swanctl/swanctl.conf" | grep -q '{{'; then log "site $n: placeholders left in the generated configuration"; grep -v '^ *#' "$d/swanctl/swanctl.conf" | grep '{{' >&2; exit 1; fi
# the child to initiate (site_ensure): the first one the generator named
awk '/children *{/ {getline; print $1; exit}' "$d/swanctl/swanctl.conf" >"$d/child"
site_charon "$n" "$ns"
