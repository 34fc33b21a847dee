#!/usr/bin/env bash
# `make lab`: on the running lab cluster (hack/lab/cluster-up.sh), installs the operator with the
# Helm chart users install (charts/bnerd-vpn-operator, values hack/lab/values.yaml), a sample client (namespace
# lab-acme: a backend Deployment behind two Services, on the last node; an IPsec VPNGateway on the node's address
# (host network) with two VPNPeers with different grants; a WireGuard VPNGateway behind a
# LoadBalancer Service with one VPNPeer) and the client's sites as network namespaces configured
# like the client's devices: hq and branch running strongSwan, roam running WireGuard. Then it
# shows the status, requests through the tunnels that succeed and one the peer is not granted that
# fails, and the time to a live tunnel.
set -euo pipefail
source "$(dirname "$0")/common.sh"
t0=${LAB_T0:-$(date +%s.%N)}
elapsed() { echo "$(date +%s.%N) - $t0" | bc | xargs printf '%.1f'; }
NS=$LAB_NS
PSK_HQ=lab-hq-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
PSK_BR=lab-br-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
ROAM_PUB=$(site_wireguard_key roam)   # the WireGuard site's key pair; the private key stays there


log "installing the operator with Helm (charts/bnerd-vpn-operator; the lab's images and settings: hack/lab/values.yaml)"
helm=$("$root/hack/helm.sh")
kubectl create namespace bnerd-vpn-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl label namespace bnerd-vpn-system pod-security.kubernetes.io/enforce=restricted --overwrite >/dev/null
# OpenStack endpoints against the lab's cloud (hack/lab/cloud.sh): its clouds.yaml in a Secret,
# the provider network's ID as lab-cloud printed it (the rest of openstack.* is in values.yaml)
kubectl -n bnerd-vpn-system create secret generic lab-openstack-clouds --from-file=clouds.yaml="$CLOUD_DIR/clouds.yaml" \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null
"$helm" upgrade --install bnerd-vpn-operator "$root/charts/bnerd-vpn-operator" --namespace bnerd-vpn-system \
  --values "$root/hack/lab/values.yaml" --set "openstack.networkID=$(cloud_network provider_network_id)" >/dev/null
kubectl wait --for=condition=Established crd --all --timeout=60s >/dev/null
kubectl -n bnerd-vpn-system rollout status deploy/bnerd-vpn-operator --timeout=120s >&2
log "operator version: $(kubectl -n bnerd-vpn-system exec deploy/bnerd-vpn-operator -c operator -- /operator --version 2>&1 | tail -1)"

# the backend on the last node, the gateways on node 1: the sites' requests cross the nodes
BACKEND_NODE=$(node_name "$LAB_NODES")
log "sample client in namespace $NS (its gateways on $NODE, its backend on $BACKEND_NODE)"
BACKEND_PLACEMENT="nodeSelector: {kubernetes.io/hostname: $BACKEND_NODE}"
[ "$LAB_NODES" = 1 ] || BACKEND_PLACEMENT="$BACKEND_PLACEMENT
      tolerations: [{key: $WORKER_TAINT, operator: Exists}]"
touch "$S/lab-gateway"
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
# the admin allows this tenant host-network gateways (--host-network-namespace-selector)
metadata: {name: $NS, labels: {vpn.bnerd.net/host-network: allowed}}
---
# the tenant: a ServiceAccount with the shipped tenant role in its namespace and nothing else
# (its kubeconfig: $S/pki/tenant.kubeconfig, below)
apiVersion: v1
kind: ServiceAccount
metadata: {name: lab-tenant, namespace: $NS}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: lab-tenant, namespace: $NS}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: bnerd-vpn-tenant-edit}
subjects: [{kind: ServiceAccount, name: lab-tenant, namespace: $NS}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: backend, namespace: $NS}
spec:
  replicas: 1
  selector: {matchLabels: {app: backend}}
  template:
    metadata: {labels: {app: backend}}
    spec:
      $BACKEND_PLACEMENT
      containers:
      - name: http
        image: lab-pause:lab
        imagePullPolicy: Never
        command: ["/pause", "serve", ":8080", ":8081"]
        securityContext: {runAsNonRoot: true, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: $NS}
spec:
  selector: {app: backend}
  ports: [{name: http, port: 8080, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: admin, namespace: $NS}
spec:
  selector: {app: backend}
  ports: [{name: http, port: 8081, targetPort: 8081}]
YAML
kubectl -n $NS rollout status deploy/backend --timeout=60s >&2
# act as the tenant: KUBECONFIG=$S/pki/tenant.kubeconfig kubectl -n $NS ...
server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
"$K/kubectl" config --kubeconfig "$S/pki/tenant.kubeconfig" set-cluster lab --server "$server" --certificate-authority "$S/pki/ca.crt" --embed-certs >/dev/null
"$K/kubectl" config --kubeconfig "$S/pki/tenant.kubeconfig" set-credentials lab-tenant --token "$(kubectl -n $NS create token lab-tenant --duration 24h)" >/dev/null
"$K/kubectl" config --kubeconfig "$S/pki/tenant.kubeconfig" set-context lab-tenant --cluster lab --user lab-tenant --namespace "$NS" >/dev/null
"$K/kubectl" config --kubeconfig "$S/pki/tenant.kubeconfig" use-context lab-tenant >/dev/null
{ lab_ipsec_peer hq 1 "$PSK_HQ" web; lab_ipsec_peer branch 2 "$PSK_BR" "web, admin"; cat <<YAML
---
apiVersion: vpn.bnerd.net/v1alpha1
kind: VPNGateway
metadata: {name: acme-gw, namespace: $NS}
spec:
  protocol: ipsec
  endpoint:
    hostNetwork: {nodeName: $NODE, address: $NODE_IP}
  exposures:
  # Services, which the operator resolves: in the host network to a ready endpoint (kube-proxy
  # cannot translate a ClusterIP in the node's own network namespace), in a pod to the ClusterIP
  - name: web
    target: {service: {name: web}, ports: [8080]}
  - name: admin
    target: {service: {name: admin}, ports: [8081]}
  ipsec:
    ike:
      version: 2
      proposals: [aes256gcm16-prfsha256-ecp256]
      dpd: {delay: 5s, action: restart}
---
# WireGuard, in the pod network, published by a load balancer (the lab plays it: see LB_CLASS);
# the exposure names the backend's Service, which the operator resolves.
apiVersion: vpn.bnerd.net/v1alpha1
kind: VPNGateway
metadata: {name: acme-wg, namespace: $NS}
spec:
  protocol: wireguard
  endpoint:
    loadBalancer: {loadBalancerClass: $LB_CLASS}
  exposures:
  - name: web
    target: {service: {name: web}, ports: [8080]}
  wireguard: {listenPort: 51820}
---
apiVersion: vpn.bnerd.net/v1alpha1
kind: VPNPeer
metadata: {name: roam, namespace: $NS}
spec:
  gatewayRef: acme-wg
  wireguard:
    publicKey: $ROAM_PUB
    subnets: [$(site_lan 4)]
YAML
} | kubectl apply -f - >/dev/null

wait_for "the gateway's service CIDR" 60 sh -c "kubectl -n $NS get vpngw acme-gw -o jsonpath='{.status.serviceCIDR}' | grep -q ."
CIDR=$(kubectl -n $NS get vpngw acme-gw -o jsonpath='{.status.serviceCIDR}')
wait_for "exposure virtual IPs" 60 sh -c "kubectl -n $NS get vpngw acme-gw -o jsonpath='{.status.exposures[?(@.name==\"admin\")].virtualIP}' | grep -q ."
VIP_WEB=$(kubectl -n $NS get vpngw acme-gw -o jsonpath='{.status.exposures[?(@.name=="web")].virtualIP}')
VIP_ADMIN=$(kubectl -n $NS get vpngw acme-gw -o jsonpath='{.status.exposures[?(@.name=="admin")].virtualIP}')
log "service CIDR $CIDR, web $VIP_WEB:8080, admin $VIP_ADMIN:8081"

# the client's devices initiate at once; until the agent has loaded the peers, the gateway's
# startup gate drops their IKE and they retransmit
wait_for "the gateway pod" 90 kubectl -n $NS wait --for=condition=GatewayAvailable vpngw/acme-gw --timeout=1s
log "client sites: hq (granted: web), branch (granted: web, admin)"
"$root/hack/lab/site.sh" hq 1
"$root/hack/lab/site.sh" branch 2

wait_for "the load balancer's address on acme-wg's Service (lab-lb)" 60 sh -c "kubectl -n $NS get svc acme-wg-gateway-lb -o jsonpath='{.status.loadBalancer.ingress[0].ip}' | grep -qx '$LB_IP'"
wait_for "the WireGuard gateway's address and public key" 60 sh -c "kubectl -n $NS get vpngw acme-wg -o jsonpath='{.status.publicAddress} {.status.wireguardPublicKey} {.status.exposures[0].virtualIP}' | grep -q '^[^ ]\+ [^ ]\+ [^ ]\+$'"
WG_CIDR=$(kubectl -n $NS get vpngw acme-wg -o jsonpath='{.status.serviceCIDR}')
WG_KEY=$(kubectl -n $NS get vpngw acme-wg -o jsonpath='{.status.wireguardPublicKey}')
WG_ADDR=$(kubectl -n $NS get vpngw acme-wg -o jsonpath='{.status.publicAddress}')
VIP_WG_WEB=$(kubectl -n $NS get vpngw acme-wg -o jsonpath='{.status.exposures[?(@.name=="web")].virtualIP}')
log "client site: roam (WireGuard to $WG_ADDR:51820, service CIDR $WG_CIDR, web $VIP_WG_WEB:8080)"
"$root/hack/lab/site-wireguard.sh" roam 4

"$root/hack/lab/service-cluster.sh"

curl_from() { ip netns exec "lab-site-$1" curl -sS --max-time "${3:-2}" --interface "$(site_host "$2")" "$4"; }
log "waiting for a live tunnel (a request from hq through it)"
hq_live() { site_ensure hq; curl_from hq 1 2 "http://$VIP_WEB:8080/"; }
wait_for "a request from hq through the tunnel" 120 hq_live
live=$(elapsed)
wait_for "a request from roam through the WireGuard tunnel" 90 curl_from roam 4 2 "http://$VIP_WG_WEB:8080/"
live_wg=$(elapsed)
wait_for "traffic counters in the peers' status" 30 sh -c "kubectl -n $NS get vpnpeer hq -o jsonpath='{.status.tunnel.bytesIn}' | grep -q ." || true
wait_for "gateway Ready" 60 kubectl -n $NS wait --for=condition=Ready vpngw/acme-gw --timeout=1s || true
wait_for "peers Connected" 60 sh -c "[ \$(kubectl -n $NS get vpnpeer -o jsonpath='{range .items[*]}{.status.conditions[?(@.type==\"Connected\")].status}{\"\\n\"}{end}' | grep -c True) = 3 ]" || true

echo
echo "== kubectl get nodes (node 1 is this machine; the others are network namespaces on the node network $NODENET_BRIDGE; faults: hack/lab/node.sh)"
kubectl get nodes -o custom-columns='NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status,ADDRESS:.status.addresses[?(@.type=="InternalIP")].address,PODS:.spec.podCIDR,TAINTS:.spec.taints[*].key'
echo
echo "== kubectl -n $NS get vpngw,vpnpeer"
kubectl -n $NS get vpngw,vpnpeer -o wide
echo
echo "== peers: connected, authorized, bytes (as the gateway agent last wrote them: at once on a state change, else every 15 s at most; live figures are in its metrics)"
kubectl -n $NS get vpnpeer -o custom-columns='PEER:.metadata.name,GATEWAY:.spec.gatewayRef,CONNECTED:.status.conditions[?(@.type=="Connected")].status,AUTHORIZED:.status.conditions[?(@.type=="Authorized")].status,GRANTS:.spec.authorization.exposures,BYTES-IN:.status.tunnel.bytesIn,BYTES-OUT:.status.tunnel.bytesOut'
echo
echo "== hq -> web ($VIP_WEB:8080), granted:"
curl_from hq 1 3 "http://$VIP_WEB:8080/" || echo "FAILED"
echo "== hq -> admin ($VIP_ADMIN:8081), not granted (must fail):"
if curl_from hq 1 3 "http://$VIP_ADMIN:8081/"; then echo "UNEXPECTED: it succeeded"; else echo "denied, as it should be"; fi
echo "== branch -> admin ($VIP_ADMIN:8081), granted:"
curl_from branch 2 3 "http://$VIP_ADMIN:8081/" || echo "FAILED"
echo "== roam -> web over WireGuard ($VIP_WG_WEB:8080, the Service web), granted (single peer):"
curl_from roam 4 3 "http://$VIP_WG_WEB:8080/" || echo "FAILED"
echo
echo "WireGuard tunnel live after ${live_wg}s"
echo "live tunnel after ${live}s (from $( [ -n "${LAB_T0:-}" ] && echo "make lab start" || echo "lab.sh start"))"
echo "== kubectl get clusterlinks (the service cluster $SVC_RANGE behind the node, netns $SVC_NETNS)"
kubectl get clusterlinks -o custom-columns='NAME:.metadata.name,CIDRS:.spec.cidrs,VIA:.spec.via,READY:.status.conditions[?(@.type=="Ready")].status,GATEWAYS:.status.gateways'
echo "KUBECONFIG=$KUBECONFIG; client sites: ip netns exec lab-site-hq|lab-site-branch|lab-site-roam ...; make lab-down removes everything"
