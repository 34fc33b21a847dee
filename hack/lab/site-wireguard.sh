#!/usr/bin/env bash
# site-wireguard.sh <name> <index> <gateway-endpoint> <gateway-public-key> <service-cidr>:
# a client's WireGuard site as its device would be configured from our parameter sheet: network
# namespace lab-site-<name> with an uplink to the node (198.51.100.<4*index+2>/30), its LAN host
# (203.0.113.<16*index+1>) and a userspace WireGuard device (wireguard-go, configured with `wg`)
# whose only peer is the gateway: its public key, its public endpoint, our service CIDR as the
# allowed IPs. The site's private key is $LAB_STATE/sites/<name>/private.key (site_wireguard_key
# creates it before the VPNPeer is applied). Removed by hack/lab/cluster-down.sh.
set -euo pipefail
source "$(dirname "$0")/common.sh"
n=$1 i=$2 endpoint=$3 gwkey=$4 CIDR=$5 d="$S/sites/$1"
dev=$(site_wireguard_dev "$n")
[ -f "$d/private.key" ] || { log "site $n: no private key (site_wireguard_key $n)"; exit 1; }
site_netns "$n" "$i"
# wireguard-go's UAPI socket (/var/run/wireguard/<dev>.sock) is shared by every namespace: the
# device name is unique to the lab. -f: stay in the foreground, so the pid is the daemon's.
ip netns exec "lab-site-$n" setsid "$root/bin/lab/wireguard-go" -f "$dev" >"$S/logs/site-$n.log" 2>&1 </dev/null &
echo "site-$n $!" >>"$S/pids"
wait_for "wireguard-go of site $n" 20 test -S "/var/run/wireguard/$dev.sock"
ip netns exec "lab-site-$n" wg set "$dev" private-key "$d/private.key" \
  peer "$gwkey" endpoint "$endpoint" allowed-ips "$CIDR" persistent-keepalive 25
ip -n "lab-site-$n" link set "$dev" up
# traffic to our service CIDR leaves through the tunnel with the LAN host as its source
ip -n "lab-site-$n" route replace "$CIDR" dev "$dev" src "$(site_host "$i")"
