#!/usr/bin/env bash
# site-wireguard.sh <name> <index>: a client's WireGuard site, its device configured from what we
# hand the client — `kubectl vpn peer-config <name> --format wg-quick` for its VPNPeer (our public
# key and endpoint, our service CIDR as the allowed IPs, the MTU) — with only what the generator
# leaves to the client filled in: its own private key. Network namespace lab-site-<name> with an
# uplink to the node (198.51.100.<4*index+2>/30), its LAN host (203.0.113.<16*index+1>) and a
# userspace WireGuard device (wireguard-go, configured with `wg setconf` from the wg-quick file
# less its wg-quick-only lines). The site's private key is $LAB_STATE/sites/<name>/private.key
# (site_wireguard_key creates it before the VPNPeer is applied). Removed by cluster-down.sh.
set -euo pipefail
source "$(dirname "$0")/common.sh"
n=$1 i=$2 d="$S/sites/$1"
dev=$(site_wireguard_dev "$n")
[ -f "$d/private.key" ] || { log "site $n: no private key (site_wireguard_key $n)"; exit 1; }
(umask 077
 site_device_config "$n" wg-quick | sed -e "s|{{YOUR_WIREGUARD_PRIVATE_KEY}}|$(cat "$d/private.key")|" >"$d/wg-quick.conf"
 # wg(8) takes the [Interface]/[Peer] keys; Address, MTU, DNS, Table and the hooks are wg-quick's
 grep -Ev '^(Address|MTU|DNS|Table|PreUp|PostUp|PreDown|PostDown|SaveConfig) *=' "$d/wg-quick.conf" >"$d/wg.conf")
if grep -v '^ *#' "$d/wg.conf" | grep -q '{{'; then log "site $n: placeholders left in the generated configuration"; grep -v '^ *#' "$d/wg.conf" | grep '{{' >&2; exit 1; fi
CIDR=$(awk -F' *= *' '$1 == "AllowedIPs" {print $2; exit}' "$d/wg.conf")
MTU=$(awk -F' *= *' '$1 == "MTU" {print $2; exit}' "$d/wg-quick.conf")
site_netns "$n" "$i"
# wireguard-go's UAPI socket (/var/run/wireguard/<dev>.sock) is shared by every namespace: the
# device name is unique to the lab. -f: stay in the foreground, so the pid is the daemon's.
ip netns exec "lab-site-$n" setsid "$root/bin/lab/wireguard-go" -f "$dev" >"$S/logs/site-$n.log" 2>&1 </dev/null &
echo "site-$n $!" >>"$S/pids"
wait_for "wireguard-go of site $n" 20 test -S "/var/run/wireguard/$dev.sock"
ip netns exec "lab-site-$n" wg setconf "$dev" "$d/wg.conf"
ip -n "lab-site-$n" link set "$dev" mtu "${MTU:-1420}" up
# traffic to our service CIDR leaves through the tunnel with the LAN host as its source
ip -n "lab-site-$n" route replace "$CIDR" dev "$dev" src "$(site_host "$i")"
