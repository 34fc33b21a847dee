#!/usr/bin/env bash
# `make e2e-cluster` (issue 6) against the lab cluster hack/lab/cluster-up.sh started: runs the lab
# (operator from config/default, sample client, two strongSwan sites on a host-network IPsec
# gateway, one WireGuard site on a gateway behind a LoadBalancer Service) and asserts, in order:
#   1. no container of either gateway pod is privileged, and only the agent container holds an
#      API token;
#   2. the tunnels come up (lab.sh fails otherwise) and all three peers report Connected;
#   3. the exposure is reachable from the granted peer and not from the other, whose drop
#      counter rises; the WireGuard peer reaches its gateway's exposure of a Service, and its
#      status shows the handshake and the bytes;
#   3b. the backend Deployment replaced: the host-network gateway follows the Service's endpoints;
#   3c. kubectl vpn status and diagnose on the live gateways (peers, drops through the pod proxy,
#      who reaches what); 3d. diagnose names a site's proposal mismatch, and no PSK in its output;
#   4. a peer added live comes up and reaches its grant, other peers' tunnels undisturbed;
#   4b. a hostile, overlapping dark peer (no grant, a subnet inside hq's LAN that its device
#      claims too) reaches nothing, from the overlap or from its own LAN; hq keeps its access;
#   4c. a peer naming a ServiceAccount token Secret as its PSK is refused and the gateway may not
#      read it;
#   4d. a host-network gateway in a namespace the admin did not label gets NotPermitted, no pod;
#   4e. a ConfigMap edited to carry an nft table is refused (metric, event), the node has no such
#      table and the last good configuration stays;
#   5. deleting a gateway pod brings a new one and the tunnel back (time printed), for both;
#   6. restarting the operator re-creates nothing (gateway Deployment generation, pod, ConfigMap);
#   7. the agents' logs show no failure to cut revoked connections (netlink conntrack in a pod);
#   8. no PSK or private key appears in any log, event, ConfigMap, Deployment, Service or status;
#   9. deleting the host-network gateway leaves nothing of it on the node (ruleset, gate,
#      address, tunnel device) and its peers reach nothing;
#  10. `kubectl get vpngw,vpnpeer` is shown (before 9, and at the end).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/hack/lab/common.sh"
NS=$LAB_NS
fails=0
pass() { echo "--- PASS: $*"; }
fail() { echo "--- FAIL: $*"; fails=$((fails + 1)); }
curl_from() { ip netns exec "lab-site-$1" curl -sS --max-time "${3:-2}" --interface "$(site_host "$2")" "$4"; }
counter() { nft list counter ip bnerd_vpn "$1" | awk '/packets/ {for (i = 1; i < NF; i++) if ($i == "packets") print $(i + 1)}'; }
gwpod() { kubectl -n $NS get pod -l "vpn.bnerd.net/gateway=${1:-acme-gw}" --field-selector=status.phase=Running -o jsonpath='{.items[0].metadata.name}'; }

echo "=== RUN lab"
if ! "$root/hack/lab/lab.sh"; then
  fail "lab: no live tunnel"
  kubectl get pods -A -o wide; exit 1
fi
VIP_WEB=$(kubectl -n $NS get vpngw acme-gw -o jsonpath='{.status.exposures[?(@.name=="web")].virtualIP}')
VIP_ADMIN=$(kubectl -n $NS get vpngw acme-gw -o jsonpath='{.status.exposures[?(@.name=="admin")].virtualIP}')
CIDR=$(kubectl -n $NS get vpngw acme-gw -o jsonpath='{.status.serviceCIDR}')
VIP_WG_WEB=$(kubectl -n $NS get vpngw acme-wg -o jsonpath='{.status.exposures[?(@.name=="web")].virtualIP}')

echo "=== RUN 1 unprivileged"
for gw in acme-gw acme-wg; do
  priv=$(kubectl -n $NS get pod "$(gwpod $gw)" -o jsonpath='{range .spec.initContainers[*]}{.name}={.securityContext.privileged} adds {.securityContext.capabilities.add}{"\n"}{end}{range .spec.containers[*]}{.name}={.securityContext.privileged} adds {.securityContext.capabilities.add}{"\n"}{end}')
  echo "$gw: $priv"
  if echo "$priv" | grep -q '=true'; then fail "a container of $gw is privileged"; else pass "no container of $gw is privileged"; fi
  # which containers mount the ServiceAccount token (the pod automounts none)
  tok=$(kubectl -n $NS get pod "$(gwpod $gw)" -o jsonpath='{range .spec.initContainers[*]}{.name}:{range .volumeMounts[*]}{.mountPath} {end}{"\n"}{end}{range .spec.containers[*]}{.name}:{range .volumeMounts[*]}{.mountPath} {end}{"\n"}{end}' |
    grep /var/run/secrets/kubernetes.io/serviceaccount | cut -d: -f1 | tr '\n' ' ')
  if [ "$tok" = "agent " ]; then pass "$gw: only the agent container holds an API token"; else fail "$gw: containers with an API token: '$tok' (want only agent)"; fi
done

echo "=== RUN 2 connected"
if wait_for check 60 sh -c "[ \$(kubectl -n $NS get vpnpeer -o jsonpath='{range .items[*]}{.status.conditions[?(@.type==\"Connected\")].status}{\"\\n\"}{end}' | grep -c True) = 3 ]"; then
  pass "all three peers Connected"; else fail "peers not Connected"; fi

echo "=== RUN 3 authorization"
before=$(counter peer_hq_in)
if curl_from hq 1 3 "http://$VIP_WEB:8080/"; then pass "hq reaches web (granted)"; else fail "hq cannot reach web"; fi
if curl_from hq 1 2 "http://$VIP_ADMIN:8081/"; then fail "hq reached admin (not granted)"; else pass "hq cannot reach admin (not granted)"; fi
after=$(counter peer_hq_in)
if [ "$after" -gt "$before" ]; then pass "hq's drop counter rose $before -> $after"; else fail "hq's drop counter did not rise ($before -> $after)"; fi
if curl_from branch 2 3 "http://$VIP_ADMIN:8081/"; then pass "branch reaches admin (granted)"; else fail "branch cannot reach admin"; fi
if curl_from roam 4 3 "http://$VIP_WG_WEB:8080/"; then pass "roam reaches web over WireGuard (exposure of the Service web)"; else fail "roam cannot reach web over WireGuard"; fi
if wait_for check 30 sh -c "kubectl -n $NS get vpnpeer roam -o jsonpath='{.status.tunnel.lastHandshake} {.status.tunnel.bytesIn}' | grep -q '^[^ ]\+ [1-9]'"; then
  pass "roam's status: $(kubectl -n $NS get vpnpeer roam -o jsonpath='last handshake {.status.tunnel.lastHandshake}, {.status.tunnel.bytesIn} bytes in')"
else fail "roam's status has no handshake or bytes: $(kubectl -n $NS get vpnpeer roam -o jsonpath='{.status.tunnel}')"; fi

echo "=== RUN 3b backend replaced: the host-network gateway follows the Service's endpoints"
old_backend=$(kubectl -n $NS get pod -l app=backend -o jsonpath='{.items[0].status.podIP}')
kubectl -n $NS rollout restart deploy/backend >/dev/null
kubectl -n $NS rollout status deploy/backend --timeout=60s >/dev/null
kubectl -n $NS wait --for=delete pod -l app=backend --field-selector=status.podIP=$old_backend --timeout=60s >/dev/null 2>&1
t=$SECONDS
if wait_for check 60 curl_from hq 1 2 "http://$VIP_WEB:8080/"; then pass "hq reaches web on the new backend $(kubectl -n $NS get pod -l app=backend -o jsonpath='{.items[0].status.podIP}') (was $old_backend) $((SECONDS - t))s after the rollout"
else fail "hq cannot reach web after the backend was replaced"; fi

echo "=== RUN 3c kubectl vpn status and diagnose"
vpn() { "$root/bin/kubectl-vpn" -n $NS "$@"; }
vpn status
connected=$(vpn status -o jsonpath='{range .gateways[*].peers[*]}{.name}={.connected.status} {end}')
if [ "$connected" = "branch=True hq=True roam=True " ]; then pass "kubectl vpn status: the three peers Connected ($connected)"; else fail "kubectl vpn status: $connected"; fi
hq_drops=$(vpn status acme-gw -o jsonpath='{.gateways[0].peers[?(@.name=="hq")].authorizationDrops.in}')
if [ "${hq_drops:-0}" -gt 0 ] 2>/dev/null; then pass "kubectl vpn status: hq's authorization drops ($hq_drops) read from the agent through the API server's pod proxy"
else fail "kubectl vpn status: hq's drops '$hq_drops' ($(vpn status acme-gw -o jsonpath='{.gateways[0].agent.error}'))"; fi
reach=$(vpn status acme-gw -o jsonpath='{.gateways[0].exposures[?(@.name=="admin")].reachableBy[*]}')
if [ "$reach" = "branch" ]; then pass "kubectl vpn status: admin is reachable by branch alone"; else fail "kubectl vpn status: admin reachable by '$reach'"; fi
diag=$(vpn diagnose acme-gw); echo "$diag"
vpn diagnose acme-wg
if echo "$diag" | grep -A1 '^VPNPeer hq$' | grep -Eq 'verdict: (OK Established|WARNING DeniedTraffic)'; then pass "kubectl vpn diagnose: hq's tunnel established"
else fail "kubectl vpn diagnose: hq: $(echo "$diag" | grep -A1 '^VPNPeer hq$' | tail -1)"; fi

echo "=== RUN 3d kubectl vpn diagnose names a proposal mismatch"
PSK_MM=lab-mismatch-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
lab_ipsec_peer mismatch 7 "$PSK_MM" web | kubectl apply -f - >/dev/null
"$root/hack/lab/site.sh" mismatch 7
m=$S/sites/mismatch; conn=$(cat "$m/child")
# the client's device now proposes only what the gateway does not allow (its first SA, if any, ends)
sed -i -e 's|^\( *\)proposals = .*|\1proposals = aes128-sha1-modp1024|' "$m/swanctl/swanctl.conf"
STRONGSWAN_CONF=$m/strongswan.conf swanctl --load-all --file "$m/swanctl/swanctl.conf" >/dev/null
STRONGSWAN_CONF=$m/strongswan.conf swanctl --terminate --ike "$conn" --force >/dev/null 2>&1 || true
mismatch_named() {
  site_ensure mismatch
  vpn diagnose acme-gw --interval 0 --tail 1000 | grep -A1 '^VPNPeer mismatch$' |
    grep -q 'verdict: ERROR NoProposalChosen: IKE: the client proposes aes128-sha1-modp1024; the gateway allows aes256gcm16-prfsha256-ecp256 '
}
if wait_for "diagnose naming the proposal mismatch" 90 mismatch_named; then
  pass "kubectl vpn diagnose: $(vpn diagnose acme-gw --interval 0 --tail 1000 | grep -A2 '^VPNPeer mismatch$' | tail -2 | sed 's/^ *//' | tr '\n' ' ')"
else fail "kubectl vpn diagnose does not name the mismatch: $(vpn diagnose acme-gw --interval 0 --tail 1000 | sed -n '/^VPNPeer mismatch$/,/^$/p')"; fi
hq_psk=$(kubectl -n $NS get secret hq-psk -o jsonpath='{.data.psk}' | base64 -d)
vpn_out=$( { vpn diagnose acme-gw --interval 0 --tail 1000; vpn status -o json; } 2>&1)
if [ -n "$hq_psk" ] && ! echo "$vpn_out" | grep -qF -e "$PSK_MM" -e "$hq_psk"; then pass "no pre-shared key in kubectl vpn's output"; else fail "a pre-shared key in kubectl vpn's output (or hq-psk unreadable)"; fi
# the site stops trying; the peer goes
printf 'connections {\n}\n' >"$m/none.conf"
STRONGSWAN_CONF=$m/strongswan.conf swanctl --load-conns --file "$m/none.conf" >/dev/null 2>&1 || true
STRONGSWAN_CONF=$m/strongswan.conf swanctl --terminate --ike "$conn" --force >/dev/null 2>&1 || true
kubectl -n $NS delete vpnpeer mismatch --wait=true >/dev/null
kubectl -n $NS delete secret mismatch-psk >/dev/null

echo "=== RUN 4 peer added live"
hq_sa_before=$(STRONGSWAN_CONF="$S/sites/hq/strongswan.conf" swanctl --list-sas 2>/dev/null | grep -o '^[^ :]*: #[0-9]*' | head -1)
t=$SECONDS
PSK=lab-new-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
lab_ipsec_peer newsite 3 "$PSK" web | kubectl apply -f - >/dev/null
"$root/hack/lab/site.sh" newsite 3
newsite_live() { site_ensure newsite; curl_from newsite 3 2 "http://$VIP_WEB:8080/"; }
if wait_for check 90 newsite_live; then pass "new peer reaches web after $((SECONDS - t))s"; else fail "new peer has no tunnel"; fi
wait_for check 30 sh -c "kubectl -n $NS get vpnpeer newsite -o jsonpath='{.status.conditions[?(@.type==\"Connected\")].status}' | grep -q True" && pass "new peer Connected" || fail "new peer not Connected"
hq_sa_after=$(STRONGSWAN_CONF="$S/sites/hq/strongswan.conf" swanctl --list-sas 2>/dev/null | grep -o '^[^ :]*: #[0-9]*' | head -1)
if [ -n "$hq_sa_before" ] && [ "$hq_sa_before" = "$hq_sa_after" ]; then pass "hq's IKE SA undisturbed ($hq_sa_after)"; else fail "hq's IKE SA changed ($hq_sa_before -> $hq_sa_after)"; fi

echo "=== RUN 4b overlapping dark peer reaches nothing"
# The intruder: no authorization block, its own LAN plus 203.0.113.16/29 inside hq's LAN
# ($(site_lan 1)), which its device proposes too, with an address there.
overlap=203.0.113.16/29 overlap_host=203.0.113.18
PSK=lab-intruder-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Secret
metadata: {name: intruder-psk, namespace: $NS}
stringData: {psk: "$PSK"}
---
apiVersion: vpn.bnerd.net/v1alpha1
kind: VPNPeer
metadata: {name: intruder, namespace: $NS}
spec:
  gatewayRef: acme-gw
  ipsec:
    peer: {address: $(site_link_site 5), id: intruder.acme.example}
    remoteSubnets: [$(site_lan 5), $overlap]
    esp: {proposals: [aes256gcm16-ecp256]}
    pskSecretRef: {name: intruder-psk, key: psk}
YAML
SITE_EXTRA_TS=$overlap "$root/hack/lab/site.sh" intruder 5
ip -n lab-site-intruder addr add $overlap_host/32 dev lo
wait_for "the intruder's Authorized condition" 30 sh -c "kubectl -n $NS get vpnpeer intruder -o jsonpath='{.status.conditions[?(@.type==\"Authorized\")].reason}' | grep -qx SubnetConflict" &&
  pass "intruder: Authorized=False/SubnetConflict: $(kubectl -n $NS get vpnpeer intruder -o jsonpath='{.status.conditions[?(@.type=="Authorized")].message}')" ||
  fail "intruder's Authorized reason: $(kubectl -n $NS get vpnpeer intruder -o jsonpath='{.status.conditions[?(@.type=="Authorized")].reason}')"
intruder_up() { site_ensure intruder; STRONGSWAN_CONF="$S/sites/intruder/strongswan.conf" swanctl --list-sas 2>/dev/null | grep -q INSTALLED; }
if wait_for "the intruder's tunnel" 60 intruder_up; then
  sas=$(STRONGSWAN_CONF="$S/sites/intruder/strongswan.conf" swanctl --list-sas 2>/dev/null)
  if echo "$sas" | grep -q "$overlap"; then fail "the intruder's CHILD_SA carries $overlap: $(echo "$sas" | grep local)"; else pass "the intruder's tunnel carries only its own LAN: $(echo "$sas" | grep -m1 ' local ' | xargs)"; fi
else fail "the intruder's own subnet got no tunnel"; fi
breach=""
for i in 1 2 3; do
  ip netns exec lab-site-intruder curl -sS --max-time 2 --interface $overlap_host "http://$VIP_WEB:8080/" >/dev/null 2>&1 && breach="$breach tcp-from-overlap"
  ip netns exec lab-site-intruder curl -sS --max-time 2 --interface "$(site_host 5)" "http://$VIP_WEB:8080/" >/dev/null 2>&1 && breach="$breach tcp-from-own-lan"
done
if [ -z "$breach" ]; then pass "the intruder reaches nothing (from the overlap and from its own LAN)"; else fail "the intruder got through:$breach"; fi
if curl_from hq 1 3 "http://$VIP_WEB:8080/" >/dev/null; then pass "hq still reaches web"; else fail "hq lost web to the intruder"; fi
kubectl -n $NS delete vpnpeer intruder --wait=true >/dev/null
kubectl -n $NS delete secret intruder-psk >/dev/null

echo "=== RUN 4c a PSK reference to a ServiceAccount token is refused"
# The namespace's default ServiceAccount gets a token Secret; a peer naming it as its PSK
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Secret
metadata: {name: borrowed-token, namespace: $NS, annotations: {kubernetes.io/service-account.name: default}}
type: kubernetes.io/service-account-token
---
apiVersion: vpn.bnerd.net/v1alpha1
kind: VPNPeer
metadata: {name: borrower, namespace: $NS}
spec:
  gatewayRef: acme-gw
  ipsec:
    peer: {address: 198.51.100.99, id: borrower.acme.example}
    remoteSubnets: [203.0.113.224/28]
    pskSecretRef: {name: borrowed-token, key: token}
  authorization: {exposures: [web]}
YAML
if wait_for "the borrower's CredentialsReady" 30 sh -c "kubectl -n $NS get vpnpeer borrower -o jsonpath='{.status.conditions[?(@.type==\"CredentialsReady\")].reason}' | grep -qx SecretTypeNotAllowed"; then
  pass "borrower: CredentialsReady=False/SecretTypeNotAllowed, Authorized=$(kubectl -n $NS get vpnpeer borrower -o jsonpath='{.status.conditions[?(@.type=="Authorized")].reason}')"
else fail "borrower's CredentialsReady: $(kubectl -n $NS get vpnpeer borrower -o jsonpath='{.status.conditions}')"; fi
wait_for "the gateway's model with the borrower" 30 sh -c "kubectl -n $NS get cm acme-gw-gateway-config -o jsonpath='{.data.model\\.json}' | grep -q '\"name\": \"borrower\"'" ||
  fail "the gateway's configuration never included the borrower"
if kubectl -n $NS get role acme-gw-gateway -o jsonpath='{.rules[*].resourceNames}' | grep -q borrowed-token; then
  fail "the gateway's Role grants the ServiceAccount token"; else pass "the gateway's Role does not grant the ServiceAccount token"; fi
kubectl -n $NS delete vpnpeer borrower --wait=true >/dev/null
kubectl -n $NS delete secret borrowed-token >/dev/null

echo "=== RUN 4d host network only where the admin allows it"
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: lab-tenant-b}
---
apiVersion: vpn.bnerd.net/v1alpha1
kind: VPNGateway
metadata: {name: sneaky, namespace: lab-tenant-b}
spec:
  protocol: ipsec
  endpoint: {hostNetwork: {nodeName: $(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')}}
YAML
if wait_for "the unpermitted gateway's EndpointReady" 30 sh -c "kubectl -n lab-tenant-b get vpngw sneaky -o jsonpath='{.status.conditions[?(@.type==\"EndpointReady\")].reason}' | grep -qx NotPermitted"; then
  pass "a host-network gateway in an unlabelled namespace: EndpointReady=False/NotPermitted: $(kubectl -n lab-tenant-b get vpngw sneaky -o jsonpath='{.status.conditions[?(@.type=="EndpointReady")].message}')"
else fail "sneaky's EndpointReady: $(kubectl -n lab-tenant-b get vpngw sneaky -o jsonpath='{.status.conditions}')"; fi
if [ -z "$(kubectl -n lab-tenant-b get deploy,pods -o name 2>/dev/null)" ]; then pass "and it has no Deployment and no pod"; else fail "lab-tenant-b runs: $(kubectl -n lab-tenant-b get deploy,pods -o name)"; fi
kubectl delete namespace lab-tenant-b --wait=true --timeout=60s >/dev/null

echo "=== RUN 4e a ConfigMap carrying anything but the model is refused"
agent_metric() { curl -sf --max-time 2 "http://$(kubectl -n $NS get pod "$(gwpod)" -o jsonpath='{.status.podIP}'):9090/metrics" | awk -v m="$1" '$1 ~ "^"m"[{]" {print $2}'; }
rej0=$(agent_metric bnerd_vpn_config_rejected_total); rej0=${rej0:-0}
kubectl -n $NS patch cm acme-gw-gateway-config --type merge \
  -p '{"data":{"ruleset.nft":"table ip lab_evil { chain input { type filter hook input priority -500; policy drop; } }"}}' >/dev/null
rejected_more() { [ "$(agent_metric bnerd_vpn_config_rejected_total)" -gt "$rej0" ] 2>/dev/null; }
if wait_for "the agent refusing the edited ConfigMap" 30 rejected_more; then
  pass "the agent refused a ConfigMap carrying an nft table (bnerd_vpn_config_rejected_total $rej0 -> $(agent_metric bnerd_vpn_config_rejected_total))"
else fail "the agent did not report refusing the edited ConfigMap"; fi
if nft list tables | grep -q lab_evil; then fail "the node has the ConfigMap's nft table"; else pass "the node has no such table"; fi
if curl_from hq 1 3 "http://$VIP_WEB:8080/" >/dev/null; then pass "hq still reaches web on the last good configuration"; else fail "hq lost web after the ConfigMap edit"; fi
kubectl -n $NS get events --field-selector reason=ConfigRejected -o jsonpath='{.items[0].message}' | grep -q 'besides model.json' &&
  pass "a ConfigRejected event says why" || fail "no ConfigRejected event"
kubectl -n $NS patch cm acme-gw-gateway-config --type json -p '[{"op":"remove","path":"/data/ruleset.nft"}]' >/dev/null

echo "=== RUN 5 gateway pod deleted"
old=$(gwpod); t=$SECONDS
kubectl -n $NS delete pod "$old" --wait=false >/dev/null
kubectl -n $NS wait --for=delete pod/"$old" --timeout=60s >/dev/null   # the old pod's charon is gone
echo "old pod gone after $((SECONDS - t))s"
if wait_for check 120 curl_from hq 1 2 "http://$VIP_WEB:8080/"; then pass "IPsec tunnel back $((SECONDS - t))s after deleting the gateway pod (new pod $(gwpod))"; else fail "IPsec tunnel not back after deleting the gateway pod"; fi
old=$(gwpod acme-wg); t=$SECONDS
kubectl -n $NS delete pod "$old" --wait=false >/dev/null
kubectl -n $NS wait --for=delete pod/"$old" --timeout=60s >/dev/null
if wait_for check 120 curl_from roam 4 2 "http://$VIP_WG_WEB:8080/"; then pass "WireGuard tunnel back $((SECONDS - t))s after deleting the gateway pod (new pod $(gwpod acme-wg))"; else fail "WireGuard tunnel not back after deleting the gateway pod"; fi

failed=$(kubectl -n $NS get pods --field-selector=status.phase=Failed -o name)
if [ -z "$failed" ]; then pass "no failed pods left behind by the replacements"; else fail "failed pods: $failed"; fi

echo "=== RUN 6 operator restart re-creates nothing"
gen=$(kubectl -n $NS get deploy acme-gw-gateway -o jsonpath='{.metadata.generation}')
pod=$(gwpod)
cm=$(kubectl -n $NS get cm -l vpn.bnerd.net/gateway=acme-gw -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.resourceVersion} {end}')
kubectl -n bnerd-vpn-system rollout restart deploy/bnerd-vpn-operator >/dev/null
kubectl -n bnerd-vpn-system rollout status deploy/bnerd-vpn-operator --timeout=120s >/dev/null
# the new leader has reconciled every gateway and peer once (its initial sync) and has nothing
# queued: read from its metrics (plain HTTP on the pod's port 8080). Two replicas: the leader is
# the pod the Lease names (its holder identity starts with the pod's name).
leader_ip() {
  local holder; holder=$(kubectl -n bnerd-vpn-system get lease bnerd-vpn-operator.vpn.bnerd.net -o jsonpath='{.spec.holderIdentity}' 2>/dev/null | cut -d_ -f1)
  [ -n "$holder" ] && kubectl -n bnerd-vpn-system get pod "$holder" -o jsonpath='{.status.podIP}' 2>/dev/null
}
synced() {
  opip=$(leader_ip) || return 1
  local m; m=$(curl -sf --max-time 2 "http://$opip:8080/metrics") || return 1
  local gws peers
  gws=$(echo "$m" | awk '/^controller_runtime_reconcile_total\{controller="vpngateway",result="success"\}/ {print $2}')
  peers=$(echo "$m" | awk '/^controller_runtime_reconcile_total\{controller="vpnpeer",result="success"\}/ {print $2}')
  [ "${gws:-0}" -ge 2 ] && [ "${peers:-0}" -ge 4 ] &&
    echo "$m" | grep -Eq '^workqueue_depth\{controller="vpngateway",name="vpngateway"(,priority="-?[0-9]+")?\} 0$'
}
wait_for "the new operator's initial sync" 90 synced || fail "the new operator ($opip) did not report its initial sync"
ready=$(curl -sf --max-time 2 "http://$opip:8080/metrics" | grep '^bnerd_vpn_gateway_ready{' | grep "namespace=\"$NS\"")
if [ "$(echo "$ready" | grep -c 'reason="Ready"} 1$')" = 2 ]; then pass "the operator exports both gateways Ready for alerting"; else fail "bnerd_vpn_gateway_ready: $ready"; fi
gen2=$(kubectl -n $NS get deploy acme-gw-gateway -o jsonpath='{.metadata.generation}')
pod2=$(gwpod)
cm2=$(kubectl -n $NS get cm -l vpn.bnerd.net/gateway=acme-gw -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.resourceVersion} {end}')
if [ "$gen" = "$gen2" ] && [ "$pod" = "$pod2" ] && [ "$cm" = "$cm2" ]; then pass "nothing re-created (Deployment generation $gen, pod $pod, ConfigMaps $cm)"
else fail "operator restart changed things: generation $gen->$gen2 pod $pod->$pod2 configmaps '$cm'->'$cm2'"; fi

echo "=== RUN 7 agent logs"
for gw in acme-gw acme-wg; do
  logs=$(kubectl -n $NS logs "$(gwpod $gw)" -c agent 2>&1)
  # the conntrack cut runs after every ruleset apply: netlink conntrack must work in the pod
  if echo "$logs" | grep -q "could not be cut"; then fail "$gw's agent cannot cut revoked connections: $(echo "$logs" | grep -m1 "could not be cut")"
  elif ! echo "$logs" | grep -q '"configuration applied"'; then fail "$gw's agent log shows no applied configuration: $(echo "$logs" | tail -2)"
  else pass "$gw's agent applied its configuration ($(echo "$logs" | grep -c '"configuration applied"') times) and its conntrack cuts worked"; fi
done

echo "=== RUN 8 no secret outside its Secret"
# every PSK and the WireGuard gateway's private key, as the Secrets hold them
secrets=$(for sec in hq-psk branch-psk newsite-psk acme-wg-wireguard-key; do
  kubectl -n $NS get secret "$sec" -o go-template='{{range .data}}{{.}}{{"\n"}}{{end}}' | while read -r v; do echo "$v" | base64 -d; echo; done
done | grep -v '^$')
n=$(echo "$secrets" | wc -l)
haystack=$S/haystack
: >"$haystack"
for ns in $NS bnerd-vpn-system; do
  for pod in $(kubectl -n $ns get pods -o name); do kubectl -n $ns logs "$pod" --all-containers >>"$haystack" 2>&1; done
done
for kind in events configmaps vpngateways vpnpeers deployments services; do kubectl get $kind -A -o yaml >>"$haystack"; done
leaks=$(echo "$secrets" | grep -F -f - "$haystack" | head -3)
if [ "$n" -ge 4 ] && [ -z "$leaks" ]; then pass "none of $n secret values in $(wc -l <"$haystack") lines of logs, events, ConfigMaps, Deployments, Services and statuses"
else fail "secret values: $n; found in: $(echo "$leaks" | cut -c1-80)"; fi

echo "=== RUN 9 host-network gateway deleted: the node is left clean"
kubectl -n $NS get vpngw,vpnpeer -o wide   # the status, before the gateway goes
t=$SECONDS
kubectl -n $NS delete vpngw acme-gw --wait=true --timeout=60s >/dev/null
kubectl -n $NS wait --for=delete pod -l vpn.bnerd.net/gateway=acme-gw --timeout=60s >/dev/null 2>&1
left=""
nft list tables | grep -qx "table ip bnerd_vpn" && left="$left ruleset"
nft list tables | grep -q bnerd_vpn_gate && left="$left gate"
[ -n "$(ip -4 addr show dev lo label lo:bnerd-vpn)" ] && left="$left lo-address"
ip link show ipsec0 >/dev/null 2>&1 && left="$left ipsec0"
if [ -z "$left" ]; then pass "gateway deleted in $((SECONDS - t))s; nothing of it left on the node"; else fail "left on the node after the gateway was deleted:$left"; fi
if curl_from hq 1 2 "http://$VIP_WEB:8080/"; then fail "hq still reaches web through the deleted gateway"; else pass "hq no longer reaches web"; fi

echo "=== 10 status"
kubectl -n $NS get vpngw,vpnpeer -o wide
kubectl -n $NS get vpnpeer -o custom-columns='PEER:.metadata.name,CONNECTED:.status.conditions[?(@.type=="Connected")].status,AUTHORIZED:.status.conditions[?(@.type=="Authorized")].status,BYTES-IN:.status.tunnel.bytesIn,BYTES-OUT:.status.tunnel.bytesOut'

if [ $fails -gt 0 ]; then echo "FAIL ($fails)"; exit 1; fi
echo "PASS"
