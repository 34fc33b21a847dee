#!/usr/bin/env bash
# site.sh <name> <index> <id> <psk> <service-cidr>: a client's site as its device would be
# configured from our parameter sheet: network namespace lab-site-<name> (site_netns in common.sh)
# running charon-systemd (kernel-libipsec) with our address as the peer, our service CIDR as its
# remote network and its PSK. SITE_EXTRA_TS: more local networks the device proposes (the
# e2e's hostile site claims one inside another site's LAN).
# Removed by hack/lab/cluster-down.sh.
set -euo pipefail
source "$(dirname "$0")/common.sh"
n=$1 i=$2 id=$3 psk=$4 CIDR=$5 d="$S/sites/$1" ns="lab-site-$1"
for sub in x509 x509ca x509ocsp x509aa x509ac x509crl pubkey private rsa ecdsa bliss pkcs8 pkcs12; do mkdir -p "$d/swanctl/$sub"; done
site_netns "$n" "$i"
# the image's strongswan.conf, with its own socket and quick IKE retransmits (a restarted gateway
# is found again within seconds, not minutes)
sed -e "s#/run/strongswan/charon.vici#$d/charon.vici#" \
    -e "s#^  install_routes = yes#  install_routes = yes\n  retransmit_timeout = 1\n  retransmit_base = 1.2\n  retransmit_tries = 3#" \
    "$root/hack/lab/image/strongswan.conf" >"$d/strongswan.conf"
cat >"$d/swanctl/swanctl.conf" <<CONF
connections {
  acme {
    version = 2
    local_addrs = $(site_link_site "$i")
    remote_addrs = $NODE_IP
    proposals = aes256gcm16-prfsha256-ecp256
    dpd_delay = 5s
    mobike = no
    local { auth = psk
            id = $id }
    remote { auth = psk
             id = $NODE_IP }
    children {
      net {
        local_ts = $(site_lan "$i")${SITE_EXTRA_TS:+, $SITE_EXTRA_TS}
        remote_ts = $CIDR
        esp_proposals = aes256gcm16-ecp256
        start_action = start
        dpd_action = restart
      }
    }
  }
}
secrets {
  ike-acme {
    id-1 = $id
    id-2 = $NODE_IP
    secret = "$psk"
  }
}
CONF
STRONGSWAN_CONF="$d/strongswan.conf" setsid ip netns exec "$ns" /usr/sbin/charon-systemd >"$S/logs/site-$n.log" 2>&1 </dev/null &
echo "site-$n $!" >>"$S/pids"
wait_for "charon of site $n" 20 test -S "$d/charon.vici"
STRONGSWAN_CONF="$d/strongswan.conf" swanctl --load-all --file "$d/swanctl/swanctl.conf" >/dev/null
