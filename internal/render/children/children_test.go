package children

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/golden"
)

func mustRender(t *testing.T, gw *model.Gateway, opts Options) *Children {
	t.Helper()
	c, err := Render(gw, ownerOf(gw), opts)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return c
}

// toYAML is every child, in the fixed order of Objects, separated by "---".
func toYAML(t *testing.T, c *Children) []byte {
	t.Helper()
	var buf bytes.Buffer
	for i, obj := range c.Objects() {
		if i > 0 {
			buf.WriteString("---\n")
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatalf("marshal %T: %v", obj, err)
		}
		buf.Write(b)
	}
	return buf.Bytes()
}

func TestGolden(t *testing.T) {
	for _, tc := range renderCases() {
		t.Run(tc.name, func(t *testing.T) {
			golden.Assert(t, tc.name, toYAML(t, mustRender(t, tc.gw(), tc.opts)))
		})
	}
}

func TestDeterministic(t *testing.T) {
	for _, tc := range renderCases() {
		t.Run(tc.name, func(t *testing.T) {
			first := toYAML(t, mustRender(t, tc.gw(), tc.opts))
			for range 5 {
				if again := toYAML(t, mustRender(t, tc.gw(), tc.opts)); !bytes.Equal(first, again) {
					t.Fatalf("rendering twice differs:\n%s", golden.Diff(string(first), string(again)))
				}
			}
		})
	}
}

// The Role must not depend on the order peers come in.
func TestRoleIndependentOfPeerOrder(t *testing.T) {
	gw := ipsecHostNetworkTwoPeers()
	a := mustRender(t, gw, Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage})
	slices.Reverse(gw.Peers)
	b := mustRender(t, gw, Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage})
	ya, _ := yaml.Marshal(a.Role)
	yb, _ := yaml.Marshal(b.Role)
	if !bytes.Equal(ya, yb) {
		t.Fatalf("Role depends on peer order:\n%s", golden.Diff(string(ya), string(yb)))
	}
}

// objectMeta reads the metadata every apply configuration has, by round-tripping through JSON.
func objectMeta(t *testing.T, obj runtime.ApplyConfiguration) (kind string, meta metav1.ObjectMeta) {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var o struct {
		Kind     string            `json:"kind"`
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	return o.Kind, o.Metadata
}

func TestMetadataOwnerReferencesAndLabels(t *testing.T) {
	for _, tc := range renderCases() {
		t.Run(tc.name, func(t *testing.T) {
			gw := tc.gw()
			owner := ownerOf(gw)
			c := mustRender(t, gw, tc.opts)
			wantKinds := []string{"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "NetworkPolicy"}
			for range gw.ReverseExposures {
				wantKinds = append(wantKinds, "Service")
			}
			if gw.Standby {
				wantKinds = append(wantKinds, "PodDisruptionBudget", "Lease")
			}
			objs := c.Objects()
			if len(objs) != len(wantKinds) {
				t.Fatalf("got %d children, want %d", len(objs), len(wantKinds))
			}
			for i, obj := range objs {
				if reflect.ValueOf(obj).IsNil() {
					t.Fatalf("child %d (%s) is nil", i, wantKinds[i])
				}
				kind, meta := objectMeta(t, obj)
				if kind != wantKinds[i] {
					t.Errorf("child %d: kind %q, want %q", i, kind, wantKinds[i])
				}
				wantName := gw.Name + "-gateway"
				switch kind {
				case "ConfigMap":
					wantName = gw.Name + "-gateway-config"
				case "Service":
					wantName = gw.Name + "-" + gw.ReverseExposures[i-6].Name
				case "Lease":
					wantName = gw.Name + "-gateway-active"
				}
				if meta.Name != wantName || meta.Namespace != gw.Namespace {
					t.Errorf("%s: named %s/%s, want %s/%s", kind, meta.Namespace, meta.Name, gw.Namespace, wantName)
				}
				if len(meta.OwnerReferences) != 1 || !reflect.DeepEqual(meta.OwnerReferences[0], owner) {
					t.Errorf("%s: owner references %+v, want exactly %+v", kind, meta.OwnerReferences, owner)
				}
				wantLabels := map[string]string{
					"app.kubernetes.io/name":       "vpn-gateway",
					"app.kubernetes.io/instance":   gw.Name,
					"app.kubernetes.io/managed-by": "bnerd-vpn-operator",
					"vpn.bnerd.net/gateway":        gw.Name,
				}
				if kind == "Service" {
					wantLabels["vpn.bnerd.net/reverse-exposure"] = gw.ReverseExposures[i-6].Name
				}
				if !reflect.DeepEqual(meta.Labels, wantLabels) {
					t.Errorf("%s: labels %v, want %v", kind, meta.Labels, wantLabels)
				}
			}
		})
	}
}

// allContainers returns init containers then containers.
func allContainers(c *Children) []corev1ac.ContainerApplyConfiguration {
	spec := c.Deployment.Spec.Template.Spec
	return append(slices.Clone(spec.InitContainers), spec.Containers...)
}

func capSet(caps []corev1.Capability) []string {
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		out = append(out, string(c))
	}
	slices.Sort(out)
	return out
}

func TestContainersUnprivilegedWithListedCapabilitiesOnly(t *testing.T) {
	ipsecCaps := map[string][]string{
		"agent-init": {"NET_ADMIN"},
		"charon":     {"NET_ADMIN", "NET_BIND_SERVICE", "NET_RAW"},
		"agent":      {"NET_ADMIN"},
	}
	wgCaps := map[string][]string{
		"agent-init": {"NET_ADMIN"},
		"agent":      {"NET_ADMIN"},
		"wireguard":  {"NET_ADMIN"},
	}
	kernelOpts := renderCases()[1].opts
	kernelOpts.UserspaceDataplane = false
	lowPortWG := func() *model.Gateway {
		gw := wireguardPSK()
		gw.WireGuard.ListenPort = 443
		return gw
	}
	cases := []struct {
		name string
		gw   func() *model.Gateway
		opts Options
		want map[string][]string
	}{
		{"ipsec", ipsecSingleSNAT, renderCases()[0].opts, ipsecCaps},
		{"wireguard", wireguardPSK, renderCases()[1].opts, wgCaps},
		{"ipsec-hostnetwork", ipsecHostNetworkTwoPeers, renderCases()[2].opts, ipsecCaps},
		// the active pod's agent announces the VIP with gratuitous ARP (a raw socket)
		{"ipsec-hostnetwork-standby", func() *model.Gateway {
			gw := ipsecHostNetworkTwoPeers()
			gw.Standby = true
			gw.Endpoint.NodeName, gw.Endpoint.NodeNames = "", []string{"node-a", "node-b"}
			gw.Endpoint.HostAddress = netip.MustParseAddr("192.0.2.14")
			return gw
		}, renderCases()[2].opts, map[string][]string{
			"agent-init": {"NET_ADMIN"},
			"charon":     {"NET_ADMIN", "NET_BIND_SERVICE", "NET_RAW"},
			"agent":      {"NET_ADMIN", "NET_RAW"},
		}},
		{"ipsec-userspace", ipsecNoPeers, renderCases()[3].opts, ipsecCaps},
		{"wireguard-port-below-1024", lowPortWG, renderCases()[1].opts, map[string][]string{
			"agent-init": {"NET_ADMIN"},
			"agent":      {"NET_ADMIN"},
			"wireguard":  {"NET_ADMIN", "NET_BIND_SERVICE"}, // it binds the port
		}},
		{"wireguard-kernel", wireguardPSK, kernelOpts, map[string][]string{
			"agent-init": {"NET_ADMIN"},
			"agent":      {"NET_ADMIN"},
		}},
		{"wireguard-kernel-port-below-1024", lowPortWG, kernelOpts, map[string][]string{
			"agent-init": {"NET_ADMIN"},
			"agent":      {"NET_ADMIN", "NET_BIND_SERVICE"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gw := tc.gw()
			c := mustRender(t, gw, tc.opts)
			pod := c.Deployment.Spec.Template.Spec
			seen := map[string]bool{}
			for _, ctr := range allContainers(c) {
				name := *ctr.Name
				seen[name] = true
				want, ok := tc.want[name]
				if !ok {
					t.Errorf("unexpected container %q", name)
					continue
				}
				sc := ctr.SecurityContext
				if sc == nil {
					t.Errorf("%s: no securityContext", name)
					continue
				}
				if sc.Privileged == nil || *sc.Privileged {
					t.Errorf("%s: privileged must be explicitly false", name)
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Errorf("%s: allowPrivilegeEscalation must be false", name)
				}
				if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("%s: readOnlyRootFilesystem must be true", name)
				}
				if sc.SeccompProfile == nil || sc.SeccompProfile.Type == nil || *sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("%s: seccompProfile must be RuntimeDefault", name)
				}
				if sc.Capabilities == nil {
					t.Errorf("%s: no capabilities", name)
					continue
				}
				if got := capSet(sc.Capabilities.Drop); !slices.Equal(got, []string{"ALL"}) {
					t.Errorf("%s: drop %v, want [ALL]", name, got)
				}
				if got := capSet(sc.Capabilities.Add); !slices.Equal(got, want) {
					t.Errorf("%s: add %v, want exactly %v", name, got, want)
				}
				if sc.RunAsUser != nil || sc.ProcMount != nil || sc.SELinuxOptions != nil {
					t.Errorf("%s: unexpected securityContext settings", name)
				}
				// each container's resources: the admin's (Options.Pod.Resources), else the defaults
				wantRes := DefaultResources()
				if tc.opts.Pod.Resources != nil {
					wantRes = *tc.opts.Pod.Resources
				}
				r := ctr.Resources
				if r == nil || r.Requests == nil || r.Limits == nil ||
					r.Requests.Cpu().String() != wantRes.Requests.Cpu().String() || r.Requests.Memory().String() != wantRes.Requests.Memory().String() ||
					r.Limits.Memory().String() != wantRes.Limits.Memory().String() {
					t.Errorf("%s: resources %v %v, want %v %v", name, *r.Requests, *r.Limits, wantRes.Requests, wantRes.Limits)
				}
			}
			for name := range tc.want {
				if !seen[name] {
					t.Errorf("container %q missing", name)
				}
			}

			// The pod itself gets no host namespaces beyond the host network of hostNetwork gateways.
			if (pod.HostPID != nil && *pod.HostPID) || (pod.HostIPC != nil && *pod.HostIPC) {
				t.Error("pod shares host PID or IPC namespace")
			}
			wantHostNet := gw.Endpoint.Kind == model.EndpointHostNetwork
			if got := pod.HostNetwork != nil && *pod.HostNetwork; got != wantHostNet {
				t.Errorf("hostNetwork = %v, want %v", got, wantHostNet)
			}

			// The only host path is /dev/net/tun, as a character device, only with a userspace
			// dataplane, and mounted only into the container that runs the dataplane.
			var tunVolume string
			for _, v := range pod.Volumes {
				if v.HostPath == nil {
					continue
				}
				if *v.HostPath.Path != "/dev/net/tun" || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathCharDev {
					t.Errorf("unexpected hostPath volume %s", *v.HostPath.Path)
				}
				tunVolume = *v.Name
			}
			if (tunVolume != "") != tc.opts.UserspaceDataplane {
				t.Errorf("tun volume present = %v, userspace dataplane = %v", tunVolume != "", tc.opts.UserspaceDataplane)
			}
			wantTunIn := "charon"
			if gw.Protocol == model.ProtocolWireGuard {
				wantTunIn = "wireguard"
			}
			for _, ctr := range allContainers(c) {
				for _, m := range ctr.VolumeMounts {
					if tunVolume != "" && *m.Name == tunVolume {
						if *ctr.Name != wantTunIn || *m.MountPath != "/dev/net/tun" {
							t.Errorf("tun mounted in %s at %s, want only in %s", *ctr.Name, *m.MountPath, wantTunIn)
						}
					}
				}
			}
		})
	}
}

func TestRoleIsLeastPrivilege(t *testing.T) {
	for _, tc := range renderCases() {
		t.Run(tc.name, func(t *testing.T) {
			gw := tc.gw()
			c := mustRender(t, gw, tc.opts)

			type rule struct {
				group, resource string
				verbs, names    []string
			}
			var want []rule
			want = append(want, rule{"", "configmaps", []string{"get", "list", "watch"}, []string{gw.Name + "-gateway-config"}})
			if len(tc.wantSecrets) > 0 {
				want = append(want, rule{"", "secrets", []string{"get", "list", "watch"}, tc.wantSecrets})
			}
			want = append(want, rule{"vpn.bnerd.net", "vpngateways", []string{"get", "list", "watch"}, []string{gw.Name}})
			if len(tc.wantPeers) > 0 {
				want = append(want,
					rule{"vpn.bnerd.net", "vpnpeers", []string{"get", "list", "watch"}, tc.wantPeers},
					rule{"vpn.bnerd.net", "vpnpeers/status", []string{"patch", "update"}, tc.wantPeers})
			}
			if gw.Standby {
				want = append(want, rule{"coordination.k8s.io", "leases", []string{"get", "list", "watch", "update", "patch"}, []string{gw.Name + "-gateway-active"}})
			}
			want = append(want, rule{"", "events", []string{"create", "patch"}, nil})

			var got []rule
			for i, r := range c.Role.Rules {
				if len(r.APIGroups) != 1 || len(r.Resources) != 1 {
					t.Fatalf("rule %d: want exactly one API group and one resource, got %v %v", i, r.APIGroups, r.Resources)
				}
				if len(r.NonResourceURLs) != 0 {
					t.Errorf("rule %d grants non-resource URLs %v", i, r.NonResourceURLs)
				}
				for _, s := range slices.Concat(r.APIGroups, r.Resources, r.Verbs, r.ResourceNames) {
					if strings.Contains(s, "*") {
						t.Errorf("rule %d contains a wildcard: %q", i, s)
					}
				}
				if r.Resources[0] == "secrets" && len(r.ResourceNames) == 0 {
					t.Errorf("rule %d grants secrets without resourceNames", i)
				}
				if r.Resources[0] != "events" && len(r.ResourceNames) == 0 {
					t.Errorf("rule %d (%s) has no resourceNames", i, r.Resources[0])
				}
				got = append(got, rule{r.APIGroups[0], r.Resources[0], r.Verbs, r.ResourceNames})
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("role rules\n got: %+v\nwant: %+v", got, want)
			}
			for _, r := range got {
				if r.resource == "secrets" && !slices.IsSorted(r.names) {
					t.Errorf("secret names not sorted: %v", r.names)
				}
			}

			rb := c.RoleBinding
			if *rb.RoleRef.Kind != "Role" || *rb.RoleRef.Name != gw.Name+"-gateway" || *rb.RoleRef.APIGroup != "rbac.authorization.k8s.io" {
				t.Errorf("roleRef %+v", rb.RoleRef)
			}
			if len(rb.Subjects) != 1 || *rb.Subjects[0].Kind != "ServiceAccount" ||
				*rb.Subjects[0].Name != gw.Name+"-gateway" || *rb.Subjects[0].Namespace != gw.Namespace {
				t.Errorf("subjects %+v", rb.Subjects)
			}
			if sa := c.ServiceAccount; sa.AutomountServiceAccountToken == nil || !*sa.AutomountServiceAccountToken {
				t.Error("service account must automount its token")
			}
			if got := *c.Deployment.Spec.Template.Spec.ServiceAccountName; got != gw.Name+"-gateway" {
				t.Errorf("pod service account %q", got)
			}
		})
	}
}

// secretRefFields are the model's fields that hold a model.SecretKeyRef.
var secretRefFields = map[string]bool{"psk": true, "presharedKey": true, "privateKey": true}

func TestConfigMapHoldsNoSecretValues(t *testing.T) {
	const marker = "NEVER-RENDERED-s3cr3t-v4lue"
	for _, tc := range renderCases() {
		t.Run(tc.name, func(t *testing.T) {
			// Give every secret reference unique name and key strings, so that any occurrence
			// of them in the ConfigMap can be attributed (in the fixtures a key may legitimately
			// equal, say, a peer name).
			gw := tc.gw()
			n := 0
			uniq := func(r *model.SecretKeyRef) {
				n++
				r.Name, r.Key = fmt.Sprintf("ref-secret-%d", n), fmt.Sprintf("ref-key-%d", n)
			}
			if gw.WireGuard != nil {
				uniq(&gw.WireGuard.PrivateKey)
			}
			for i := range gw.Peers {
				if p := gw.Peers[i].IPsec; p != nil {
					uniq(&p.PSK)
				}
				if p := gw.Peers[i].WireGuard; p != nil && p.PresharedKey != nil {
					uniq(p.PresharedKey)
				}
			}
			c := mustRender(t, gw, tc.opts)

			// Trivially: a value that exists nowhere in the input is nowhere in the output.
			if bytes.Contains(toYAML(t, c), []byte(marker)) {
				t.Fatal("marker secret value rendered")
			}

			cm := c.ConfigMap
			if len(cm.BinaryData) != 0 {
				t.Errorf("unexpected binaryData keys")
			}
			if keys := slices.Sorted(mapKeys(cm.Data)); !slices.Equal(keys, []string{"model.json"}) {
				t.Fatalf("data keys %v, want [model.json]", keys)
			}
			doc := cm.Data["model.json"]

			// The model round-trips exactly: nothing was added on the way to the ConfigMap.
			var back model.Gateway
			if err := json.Unmarshal([]byte(doc), &back); err != nil {
				t.Fatalf("model.json does not parse: %v", err)
			}
			if !reflect.DeepEqual(&back, gw) {
				t.Errorf("model.json does not round-trip to the input model")
			}

			// Every secret reference in the input, and where it may appear.
			refNames, refKeys := map[string]bool{}, map[string]bool{}
			addRef := func(r model.SecretKeyRef) { refNames[r.Name], refKeys[r.Key] = true, true }
			if gw.WireGuard != nil {
				addRef(gw.WireGuard.PrivateKey)
			}
			for _, p := range gw.Peers {
				if p.IPsec != nil {
					addRef(p.IPsec.PSK)
				}
				if p.WireGuard != nil && p.WireGuard.PresharedKey != nil {
					addRef(*p.WireGuard.PresharedKey)
				}
			}

			var tree any
			if err := json.Unmarshal([]byte(doc), &tree); err != nil {
				t.Fatal(err)
			}
			refs := 0
			walkJSON(tree, nil, func(path []string, v any) {
				field := path[len(path)-1]
				// A field that sounds like secret material holds only a {name, key} reference.
				lower := strings.ToLower(field)
				if secretRefFields[field] || strings.Contains(lower, "secret") || strings.Contains(lower, "password") ||
					strings.Contains(lower, "psk") || strings.Contains(lower, "private") || strings.Contains(lower, "preshared") {
					obj, ok := v.(map[string]any)
					if !ok || len(obj) != 2 || !isString(obj["name"]) || !isString(obj["key"]) {
						t.Errorf("%s: secret-like field is not a {name, key} reference: %#v", strings.Join(path, "."), v)
						return
					}
					refs++
				}
				s, ok := v.(string)
				if !ok {
					return
				}
				inRef := len(path) >= 2 && secretRefFields[path[len(path)-2]]
				if refNames[s] && !(inRef && field == "name") {
					t.Errorf("%s: secret name %q appears outside a secret reference", strings.Join(path, "."), s)
				}
				if refKeys[s] && !(inRef && field == "key") {
					t.Errorf("%s: secret key %q appears outside a secret reference", strings.Join(path, "."), s)
				}
			})
			wantRefs := 0
			if gw.WireGuard != nil {
				wantRefs++
			}
			for _, p := range gw.Peers {
				if p.IPsec != nil || (p.WireGuard != nil && p.WireGuard.PresharedKey != nil) {
					wantRefs++
				}
			}
			if refs != wantRefs {
				t.Errorf("found %d secret references in model.json, want %d", refs, wantRefs)
			}
		})
	}
}

func isString(v any) bool { _, ok := v.(string); return ok }

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// walkJSON calls fn for every object member and array element, with its path.
func walkJSON(v any, path []string, fn func(path []string, v any)) {
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			p := append(slices.Clone(path), k)
			fn(p, child)
			walkJSON(child, p, fn)
		}
	case []any:
		for i, child := range x {
			p := append(slices.Clone(path), fmt.Sprintf("[%d]", i))
			if len(path) > 0 {
				// Elements are judged by the field holding the array.
				p[len(p)-1] = path[len(path)-1]
			}
			fn(p, child)
			walkJSON(child, p, fn)
		}
	}
}

func TestDeploymentShape(t *testing.T) {
	for _, tc := range renderCases() {
		t.Run(tc.name, func(t *testing.T) {
			gw := tc.gw()
			c := mustRender(t, gw, tc.opts)
			d := c.Deployment.Spec
			switch {
			case gw.Standby:
				if *d.Replicas != 2 || string(*d.Strategy.Type) != "RollingUpdate" ||
					d.Strategy.RollingUpdate.MaxSurge.String() != "0" || d.Strategy.RollingUpdate.MaxUnavailable.String() != "1" {
					t.Errorf("replicas %d strategy %s %+v", *d.Replicas, *d.Strategy.Type, d.Strategy.RollingUpdate)
				}
			case *d.Replicas != 1 || string(*d.Strategy.Type) != "Recreate" || d.Strategy.RollingUpdate != nil:
				t.Errorf("replicas %d strategy %s", *d.Replicas, *d.Strategy.Type)
			}
			wantSel := map[string]string{"app.kubernetes.io/instance": gw.Name, "vpn.bnerd.net/gateway": gw.Name}
			if !reflect.DeepEqual(d.Selector.MatchLabels, wantSel) {
				t.Errorf("selector %v", d.Selector.MatchLabels)
			}
			for k, v := range wantSel {
				if d.Template.Labels[k] != v {
					t.Errorf("pod labels %v do not match the selector", d.Template.Labels)
				}
			}
			pod := d.Template.Spec
			if *pod.TerminationGracePeriodSeconds != 30 {
				t.Errorf("terminationGracePeriodSeconds %d", *pod.TerminationGracePeriodSeconds)
			}

			if gw.Endpoint.Kind == model.EndpointHostNetwork {
				if pod.HostNetwork == nil || !*pod.HostNetwork || *pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet || pod.NodeName != nil {
					t.Errorf("hostNetwork pod: hostNetwork/dnsPolicy/nodeName wrong")
				}
				terms := pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
				if len(terms) != 1 || len(terms[0].MatchFields) != 1 || *terms[0].MatchFields[0].Key != "metadata.name" ||
					!slices.Equal(terms[0].MatchFields[0].Values, []string{gw.Endpoint.NodeName}) {
					t.Errorf("hostNetwork pod is not pinned to node %s by affinity: %+v", gw.Endpoint.NodeName, terms)
				}
				if len(pod.SecurityContext.Sysctls) != 0 {
					t.Errorf("hostNetwork pod must not set sysctls")
				}
			} else {
				if pod.HostNetwork != nil || pod.NodeName != nil || pod.DNSPolicy != nil || (pod.Affinity != nil) != gw.Standby {
					t.Errorf("pod-network pod sets hostNetwork/nodeName/dnsPolicy/affinity (or a standby's lacks its anti-affinity)")
				}
				s := pod.SecurityContext.Sysctls
				if len(s) != 1 || *s[0].Name != "net.ipv4.ip_forward" || *s[0].Value != "1" {
					t.Errorf("sysctls %+v", s)
				}
			}

			if len(pod.InitContainers) != 1 {
				t.Fatalf("%d init containers", len(pod.InitContainers))
			}
			ini := pod.InitContainers[0]
			var dataplane []string // the agent renders for the dataplane it runs
			// ... and refuses a model that disagrees with where its pod runs
			placement := []string{"--gateway", gw.Name, "--namespace", gw.Namespace,
				fmt.Sprintf("--host-network=%t", gw.Endpoint.Kind == model.EndpointHostNetwork), "--node-name=$(NODE_NAME)",
				"--service-cidr", gw.ServiceCIDR.String()}
			if tc.opts.UserspaceDataplane {
				dataplane = []string{"--userspace-dataplane"}
			}
			if *ini.Name != "agent-init" || *ini.Image != tc.opts.AgentImage ||
				!slices.Equal(ini.Command, []string{"/gateway-agent"}) ||
				!slices.Equal(ini.Args, append(append([]string{"init", "--config-dir", "/etc/vpn-gateway"}, placement...), dataplane...)) {
				t.Errorf("init container %s %s %v %v", *ini.Name, *ini.Image, ini.Command, ini.Args)
			}

			var names []string
			var agent *corev1ac.ContainerApplyConfiguration
			for i := range pod.Containers {
				names = append(names, *pod.Containers[i].Name)
				if *pod.Containers[i].Name == "agent" {
					agent = &pod.Containers[i]
				}
			}
			wantNames := []string{"charon", "agent"}
			wgUserspace := gw.Protocol == model.ProtocolWireGuard && tc.opts.UserspaceDataplane
			switch {
			case wgUserspace:
				// the device in a container of its own, configured by the agent over UAPI
				wantNames = []string{"wireguard", "agent"}
				dev := pod.Containers[0]
				if *dev.Image != tc.opts.AgentImage || !slices.Equal(dev.Command, []string{"/gateway-agent"}) ||
					!slices.Equal(dev.Args, []string{"wireguard-device", "--interface", "wg0"}) {
					t.Errorf("wireguard container %s %v %v", *dev.Image, dev.Command, dev.Args)
				}
				if len(dev.Ports) != 1 || *dev.Ports[0].Protocol != corev1.ProtocolUDP || *dev.Ports[0].ContainerPort != int32(gw.WireGuard.ListenPort) {
					t.Errorf("wireguard container ports %+v", dev.Ports)
				}
				dataplane = append(dataplane, "--wireguard-mode=external")
			case gw.Protocol == model.ProtocolWireGuard:
				wantNames = []string{"agent"}
			}
			if !slices.Equal(names, wantNames) {
				t.Fatalf("containers %v, want %v", names, wantNames)
			}
			if gw.Protocol == model.ProtocolIPsec {
				charon := pod.Containers[0]
				if *charon.Image != tc.opts.StrongSwanImage {
					t.Errorf("charon image %s", *charon.Image)
				}
				// kernel ESP: charon's configuration without kernel-libipsec; userspace: the
				// image's default, which loads it
				var conf string
				for _, e := range charon.Env {
					if *e.Name == "STRONGSWAN_CONF" {
						conf = *e.Value
					}
				}
				if want := map[bool]string{false: "/etc/strongswan-kernel.conf", true: ""}[tc.opts.UserspaceDataplane]; conf != want {
					t.Errorf("charon's STRONGSWAN_CONF %q, want %q (userspace dataplane %v)", conf, want, tc.opts.UserspaceDataplane)
				}
			}
			metricsPort := tc.opts.MetricsPort
			if metricsPort == 0 {
				metricsPort = DefaultMetricsPort
			}
			wantArgs := append(append(append([]string{"run"}, placement...),
				"--config-map", gw.Name+"-gateway-config", "--metrics-addr", fmt.Sprintf(":%d", metricsPort)), dataplane...)
			if gw.Standby {
				wantArgs = append(wantArgs, "--standby-lease="+gw.Name+"-gateway-active")
			}
			if !slices.Equal(agent.Args, wantArgs) {
				t.Errorf("agent args %v", agent.Args)
			}
			var podNS bool
			for _, e := range agent.Env {
				if *e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && *e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
					podNS = true
				}
			}
			if !podNS {
				t.Error("agent lacks POD_NAMESPACE from the downward API")
			}
			var hasMetrics bool
			for _, p := range agent.Ports {
				if *p.Name == "metrics" && *p.ContainerPort == metricsPort && *p.Protocol == corev1.ProtocolTCP {
					hasMetrics = true
				}
			}
			if !hasMetrics {
				t.Errorf("agent has no metrics port %d", metricsPort)
			}
			if agent.LivenessProbe == nil || *agent.LivenessProbe.HTTPGet.Path != "/healthz" || agent.LivenessProbe.HTTPGet.Port.StrVal != "metrics" ||
				agent.ReadinessProbe == nil || *agent.ReadinessProbe.HTTPGet.Path != "/readyz" || agent.ReadinessProbe.HTTPGet.Port.StrVal != "metrics" ||
				agent.ReadinessProbe.PeriodSeconds == nil || *agent.ReadinessProbe.PeriodSeconds != ReadinessPeriodSeconds {
				t.Error("agent probes wrong")
			}

			// The config volume is the gateway's ConfigMap, mounted read-only.
			var cfgVol string
			for _, v := range pod.Volumes {
				if v.ConfigMap != nil {
					if *v.ConfigMap.Name != gw.Name+"-gateway-config" {
						t.Errorf("config volume from %s", *v.ConfigMap.Name)
					}
					cfgVol = *v.Name
				}
			}
			for _, ctr := range allContainers(c) {
				for _, m := range ctr.VolumeMounts {
					if *m.Name == cfgVol && (*m.MountPath != "/etc/vpn-gateway" || m.ReadOnly == nil || !*m.ReadOnly) {
						t.Errorf("%s mounts the config at %s (read-only %v)", *ctr.Name, *m.MountPath, m.ReadOnly)
					}
				}
			}
			if gw.Protocol == model.ProtocolIPsec {
				// charon and the agent share the VICI socket directory.
				for _, ctr := range pod.Containers {
					found := false
					for _, m := range ctr.VolumeMounts {
						if *m.MountPath == "/run/strongswan" {
							found = true
						}
					}
					if !found {
						t.Errorf("%s does not mount /run/strongswan", *ctr.Name)
					}
				}
			}
		})
	}
}

func TestNetworkPolicy(t *testing.T) {
	for _, tc := range renderCases() {
		t.Run(tc.name, func(t *testing.T) {
			gw := tc.gw()
			np := mustRender(t, gw, tc.opts).NetworkPolicy.Spec
			if !reflect.DeepEqual(np.PodSelector.MatchLabels, SelectorLabels(gw.Name)) {
				t.Errorf("podSelector %v", np.PodSelector.MatchLabels)
			}
			if len(np.PolicyTypes) != 1 || np.PolicyTypes[0] != "Ingress" || len(np.Egress) != 0 {
				t.Errorf("policyTypes %v egress %v", np.PolicyTypes, np.Egress)
			}
			var got []string
			for _, r := range np.Ingress {
				var ps, from []string
				for _, p := range r.Ports {
					ps = append(ps, fmt.Sprintf("%s/%s", *p.Protocol, p.Port.String()))
				}
				for _, f := range r.From {
					switch {
					case f.NamespaceSelector != nil && f.PodSelector == nil &&
						reflect.DeepEqual(appliedSelector(f.NamespaceSelector), MetricsNamespaceSelector(tc.opts)):
						from = append(from, "metrics-namespaces")
					case f.IPBlock != nil:
						from = append(from, *f.IPBlock.CIDR)
					case f.NamespaceSelector != nil && f.PodSelector == nil &&
						reflect.DeepEqual(*f.NamespaceSelector, *metav1ac.LabelSelector()):
						from = append(from, "cluster")
					case f.NamespaceSelector != nil && f.PodSelector == nil && f.NamespaceSelector.MatchExpressions == nil &&
						reflect.DeepEqual(f.NamespaceSelector.MatchLabels, map[string]string{"kubernetes.io/metadata.name": gw.Namespace}):
						from = append(from, "own-namespace")
					case f.NamespaceSelector == nil && f.PodSelector != nil && f.IPBlock == nil &&
						reflect.DeepEqual(appliedSelector(f.PodSelector), &metav1.LabelSelector{MatchLabels: SelectorLabels(gw.Name)}):
						from = append(from, "own-pods")
					case f.NamespaceSelector != nil && f.PodSelector == nil && gw.ReverseClientNamespaces != nil:
						sel, err := metav1.LabelSelectorAsSelector(gw.ReverseClientNamespaces)
						if err != nil {
							t.Fatal(err)
						}
						gotSel, err := metav1.LabelSelectorAsSelector(appliedSelector(f.NamespaceSelector))
						if err != nil || gotSel.String() != sel.String() {
							t.Errorf("namespace selector %v, want %v", gotSel, sel)
						}
						from = append(from, "selected-namespaces")
					default:
						from = append(from, "other")
					}
				}
				got = append(got, fmt.Sprintf("ports=%v from=%v", ps, from))
			}
			metrics := tc.opts.MetricsPort
			if metrics == 0 {
				metrics = 9090
			}
			var want []string
			if gw.Protocol == model.ProtocolIPsec {
				want = append(want, "ports=[UDP/500 UDP/4500] from=[]")
			} else {
				want = append(want, fmt.Sprintf("ports=[UDP/%d] from=[]", gw.WireGuard.ListenPort))
			}
			if len(gw.ReverseExposures) > 0 {
				var ports []string
				for _, r := range gw.ReverseExposures {
					for _, p := range r.Ports {
						ports = append(ports, fmt.Sprintf("%s/%d", strings.ToUpper(p.Protocol), p.GatewayPort))
					}
				}
				from := []string{"own-namespace"}
				if gw.ReverseClientNamespaces != nil {
					from = append(from, "selected-namespaces")
				}
				for _, r := range gw.Routes { // the ready ClusterLinks' ranges
					from = append(from, r.CIDR.String())
				}
				want = append(want, fmt.Sprintf("ports=%v from=%v", ports, from))
			}
			want = append(want, fmt.Sprintf("ports=[TCP/%d] from=[metrics-namespaces]", metrics))
			if gw.Standby {
				want = append(want, fmt.Sprintf("ports=[TCP/%d] from=[own-pods]", metrics))
			}
			if !slices.Equal(got, want) {
				t.Errorf("ingress rules\n got: %q\nwant: %q", got, want)
			}
		})
	}
}

// appliedSelector is a label selector apply configuration as the selector it applies.
func appliedSelector(ac *metav1ac.LabelSelectorApplyConfiguration) *metav1.LabelSelector {
	out := &metav1.LabelSelector{MatchLabels: ac.MatchLabels}
	for _, e := range ac.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{Key: *e.Key, Operator: *e.Operator, Values: e.Values})
	}
	return out
}

// The agent's metrics port admits the namespaces the admin selects: by default the operator's
// and "monitoring" only, never every pod of the cluster.
func TestMetricsNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string // the selector, as labels.Selector prints it
	}{
		{"default", Options{}, "kubernetes.io/metadata.name in (monitoring)"},
		{"default with the operator's namespace", Options{OperatorNamespace: "vpn-system"}, "kubernetes.io/metadata.name in (monitoring,vpn-system)"},
		{"selected", Options{OperatorNamespace: "vpn-system", MetricsNamespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "observability"}}}, "team=observability"},
		{"every namespace, when the admin says so", Options{MetricsNamespaces: &metav1.LabelSelector{}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.AgentImage, opts.StrongSwanImage = testAgentImage, testStrongSwanImage
			np := mustRender(t, ipsecSingleSNAT(), opts).NetworkPolicy.Spec
			metrics := np.Ingress[len(np.Ingress)-1]
			if len(metrics.Ports) != 1 || metrics.Ports[0].Port.IntVal != DefaultMetricsPort || len(metrics.From) != 1 {
				t.Fatalf("metrics rule %+v", metrics)
			}
			sel, err := metav1.LabelSelectorAsSelector(appliedSelector(metrics.From[0].NamespaceSelector))
			if err != nil {
				t.Fatal(err)
			}
			if sel.String() != tc.want {
				t.Errorf("metrics from namespaces %q, want %q", sel.String(), tc.want)
			}
		})
	}
	bad := Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage, MetricsNamespaces: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}}
	if _, err := Render(ipsecSingleSNAT(), ownerOf(ipsecSingleSNAT()), bad); err == nil || !strings.Contains(err.Error(), "metrics namespace selector") {
		t.Errorf("an invalid selector: %v", err)
	}
}

func TestRenderRejectsInvalidInput(t *testing.T) {
	okOpts := Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage}
	cases := []struct {
		name   string
		gw     func() *model.Gateway
		owner  func(*model.Gateway) metav1.OwnerReference
		opts   Options
		errHas string
	}{
		{"nil gateway", func() *model.Gateway { return nil }, nil, okOpts, "nil"},
		{"no agent image", ipsecSingleSNAT, nil, Options{StrongSwanImage: testStrongSwanImage}, "agent image"},
		{"ipsec without strongswan image", ipsecSingleSNAT, nil, Options{AgentImage: testAgentImage}, "strongSwan image"},
		{"no name", func() *model.Gateway { g := ipsecSingleSNAT(); g.Name = ""; return g }, nil, okOpts, "name"},
		{"name too long for a label", func() *model.Gateway { g := ipsecSingleSNAT(); g.Name = strings.Repeat("a", 64); return g }, nil, okOpts, "label"},
		{"no namespace", func() *model.Gateway { g := ipsecSingleSNAT(); g.Namespace = ""; return g }, nil, okOpts, "namespace"},
		{"unknown protocol", func() *model.Gateway { g := ipsecSingleSNAT(); g.Protocol = "gre"; return g }, nil, okOpts, "protocol"},
		{"ipsec without settings", func() *model.Gateway { g := ipsecSingleSNAT(); g.IPsec = nil; return g }, nil, okOpts, "ipsec settings"},
		{"wireguard without settings", func() *model.Gateway { g := wireguardPSK(); g.WireGuard = nil; return g }, nil, okOpts, "wireguard settings"},
		{"wireguard without key ref", func() *model.Gateway { g := wireguardPSK(); g.WireGuard.PrivateKey = model.SecretKeyRef{}; return g }, nil, okOpts, "private key"},
		{"wireguard listen port 0", func() *model.Gateway { g := wireguardPSK(); g.WireGuard.ListenPort = 0; return g }, nil, okOpts, "listen port"},
		{"hostNetwork without node", func() *model.Gateway { g := ipsecHostNetworkTwoPeers(); g.Endpoint.NodeName = ""; return g }, nil, okOpts, "node name"},
		{"peer protocol mismatch", func() *model.Gateway { g := ipsecSingleSNAT(); g.Peers[0].IPsec = nil; return g }, nil, okOpts, "no ipsec settings"},
		{"peer without psk ref", func() *model.Gateway { g := ipsecSingleSNAT(); g.Peers[0].IPsec.PSK.Name = ""; return g }, nil, okOpts, "psk"},
		{"duplicate peer", func() *model.Gateway {
			g := ipsecHostNetworkTwoPeers()
			g.Peers[1].Name = g.Peers[0].Name
			return g
		}, nil, okOpts, "twice"},
		{"invalid internal CIDR", func() *model.Gateway {
			g := ipsecSingleSNAT()
			g.InternalSourceCIDRs = append(g.InternalSourceCIDRs, netip.Prefix{})
			return g
		}, nil, okOpts, "internalSourceCIDRs"},
		{"bad pull policy", ipsecSingleSNAT, nil, Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage, ImagePullPolicy: "Sometimes"}, "pull policy"},
		{"metrics port out of range", ipsecSingleSNAT, nil, Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage, MetricsPort: 70000}, "metrics port"},
		{"owner not a controller", ipsecSingleSNAT, func(g *model.Gateway) metav1.OwnerReference {
			o := ownerOf(g)
			o.Controller = nil
			return o
		}, okOpts, "controller"},
		{"owner without uid", ipsecSingleSNAT, func(g *model.Gateway) metav1.OwnerReference {
			o := ownerOf(g)
			o.UID = ""
			return o
		}, okOpts, "uid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gw := tc.gw()
			var owner metav1.OwnerReference
			if tc.owner != nil {
				owner = tc.owner(gw)
			} else if gw != nil {
				owner = ownerOf(gw)
			}
			c, err := Render(gw, owner, tc.opts)
			if err == nil {
				t.Fatal("Render accepted invalid input")
			}
			if c != nil {
				t.Error("Render returned children along with an error")
			}
			if !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("error %q does not mention %q", err, tc.errHas)
			}
		})
	}
}

func TestWireGuardDoesNotNeedStrongSwanImage(t *testing.T) {
	if _, err := Render(wireguardPSK(), ownerOf(wireguardPSK()), Options{AgentImage: testAgentImage}); err != nil {
		t.Fatal(err)
	}
}

// Only the agent holds an API token: the pod does not automount one, and the projected token
// volume is mounted into the agent container alone (charon faces the internet; the init step
// reads only its ConfigMap).
func TestOnlyTheAgentHoldsAToken(t *testing.T) {
	for _, tc := range renderCases() {
		t.Run(tc.name, func(t *testing.T) {
			c := mustRender(t, tc.gw(), tc.opts)
			pod := c.Deployment.Spec.Template.Spec
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Fatalf("automountServiceAccountToken = %v, want false", pod.AutomountServiceAccountToken)
			}
			var tokenVolume bool
			for _, v := range pod.Volumes {
				if *v.Name == VolumeAPIAccess && v.Projected != nil {
					for _, src := range v.Projected.Sources {
						tokenVolume = tokenVolume || src.ServiceAccountToken != nil
					}
				}
			}
			if !tokenVolume {
				t.Fatal("no projected ServiceAccount token volume")
			}
			for _, ctr := range allContainers(c) {
				var mounted bool
				for _, m := range ctr.VolumeMounts {
					if *m.Name == VolumeAPIAccess {
						mounted = true
						if *m.MountPath != ServiceAccountDir || m.ReadOnly == nil || !*m.ReadOnly {
							t.Errorf("%s mounts the token at %s (read-only %v)", *ctr.Name, *m.MountPath, m.ReadOnly)
						}
					}
				}
				if mounted != (*ctr.Name == ContainerAgent) {
					t.Errorf("container %s: token mounted %v", *ctr.Name, mounted)
				}
			}
		})
	}
}

// Each reverse exposure's Service selects the gateway pod and sends each exposure port to the
// gateway port the ruleset DNATs from; the status lists the same ports.
func TestReverseServices(t *testing.T) {
	gw := ipsecHostNetworkTwoPeers()
	c := mustRender(t, gw, Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage})
	if len(c.ReverseServices) != 1 {
		t.Fatalf("%d reverse Services, want 1", len(c.ReverseServices))
	}
	svc := c.ReverseServices[0]
	if svc.Spec.PublishNotReadyAddresses == nil || !*svc.Spec.PublishNotReadyAddresses {
		t.Error("a restarting agent (the pod not ready) would make the exposure unreachable")
	}
	if *svc.Name != "gamma-erp" || *svc.Spec.Type != corev1.ServiceTypeClusterIP || !reflect.DeepEqual(svc.Spec.Selector, SelectorLabels(gw.Name)) {
		t.Errorf("Service %s type %v selector %v", *svc.Name, *svc.Spec.Type, svc.Spec.Selector)
	}
	var got []string
	for _, p := range svc.Spec.Ports {
		got = append(got, fmt.Sprintf("%s %s %d->%s", *p.Name, *p.Protocol, *p.Port, p.TargetPort.String()))
	}
	if want := []string{"tcp-1433 TCP 1433->20000", "udp-161 UDP 161->20001"}; !slices.Equal(got, want) {
		t.Errorf("ports %q, want %q", got, want)
	}
	if got, want := ReverseServicePorts(gw.ReverseExposures[0]), []string{"1433/TCP", "161/UDP"}; !slices.Equal(got, want) {
		t.Errorf("status ports %q, want %q", got, want)
	}

	gw.Name = "a-very-long-gateway-name-of-forty-chars"
	gw.ReverseExposures[0].Name = "and-an-exposure-name-that-is-too-long"
	if _, err := Render(gw, ownerOf(gw), Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage}); err == nil || !strings.Contains(err.Error(), "Service name") {
		t.Errorf("a Service name over 63 characters: %v", err)
	}
}

// A pod-network gateway's pod leaves a lost node after NodeLossToleration; a host-network one,
// pinned to its node, keeps Kubernetes' default.
func TestNodeLossToleration(t *testing.T) {
	opts := renderCases()[0].opts
	opts.Pod.NodeLossToleration = 15 * time.Second
	for _, tc := range []struct {
		name string
		gw   func() *model.Gateway
		want map[string]int64 // taint key -> seconds
	}{
		{"pod network", ipsecSingleSNAT, map[string]int64{corev1.TaintNodeNotReady: 15, corev1.TaintNodeUnreachable: 15}},
		{"host network", ipsecHostNetworkTwoPeers, map[string]int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]int64{}
			for _, tol := range mustRender(t, tc.gw(), opts).Deployment.Spec.Template.Spec.Tolerations {
				if tol.Key != nil && tol.TolerationSeconds != nil && *tol.Effect == corev1.TaintEffectNoExecute {
					got[*tol.Key] = *tol.TolerationSeconds
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("NoExecute tolerations %v, want %v", got, tc.want)
			}
		})
	}
}

// A gateway with a standby: the agent is told its Lease and its pod's name and address, and
// the Lease's name maps back to its gateway (for either kind).
func TestStandby(t *testing.T) {
	gw := ipsecStandby()
	c := mustRender(t, gw, Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage})
	var agent *corev1ac.ContainerApplyConfiguration
	for i := range c.Deployment.Spec.Template.Spec.Containers {
		if *c.Deployment.Spec.Template.Spec.Containers[i].Name == ContainerAgent {
			agent = &c.Deployment.Spec.Template.Spec.Containers[i]
		}
	}
	if !slices.Contains(agent.Args, "--standby-lease=acme-gateway-active") {
		t.Errorf("agent args %v lack --standby-lease", agent.Args)
	}
	env := map[string]string{}
	for _, e := range agent.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[*e.Name] = *e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_IP"] != "status.podIP" {
		t.Errorf("agent env from the downward API: %v", env)
	}
	terms := c.Deployment.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if len(terms) != 1 || *terms[0].TopologyKey != "kubernetes.io/hostname" || !reflect.DeepEqual(terms[0].LabelSelector.MatchLabels, SelectorLabels(gw.Name)) {
		t.Errorf("pod anti-affinity %+v", terms)
	}
	if c.Lease == nil || *c.Lease.Name != "acme-gateway-active" || *c.Lease.Spec.LeaseDurationSeconds != 2 || c.Lease.Spec.HolderIdentity != nil || c.Lease.Spec.RenewTime != nil {
		t.Errorf("lease %+v", c.Lease)
	}
	if p := c.PodDisruptionBudget; p == nil || p.Spec.MaxUnavailable.String() != "1" || !reflect.DeepEqual(p.Spec.Selector.MatchLabels, SelectorLabels(gw.Name)) {
		t.Errorf("pod disruption budget %+v", p)
	}

	// Without a standby there is neither.
	plain := mustRender(t, ipsecSingleSNAT(), Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage})
	if plain.Lease != nil || plain.PodDisruptionBudget != nil {
		t.Error("a gateway without a standby has a Lease or a PodDisruptionBudget")
	}

	// Only a loadBalancer endpoint can have a standby.
	hn := ipsecHostNetworkTwoPeers()
	hn.Standby = true
	if _, err := Render(hn, ownerOf(hn), Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage}); err == nil || !strings.Contains(err.Error(), "standby needs a loadBalancer endpoint") {
		t.Errorf("host-network gateway with a standby: %v", err)
	}

	for _, tc := range []struct {
		kind, gateway string
	}{{"", "acme"}, {model.KindIPsecGateway, "acme"}, {"", "acme-ipsecgw"}, {model.KindIPsecGateway, "acme-gateway"}} {
		kind, name, ok := GatewayOfActiveLease(ActiveLeaseNameFor(tc.kind, tc.gateway))
		if !ok || kind != tc.kind || name != tc.gateway {
			t.Errorf("GatewayOfActiveLease(ActiveLeaseNameFor(%q, %q)) = %q, %q, %v", tc.kind, tc.gateway, kind, name, ok)
		}
	}
	for _, name := range []string{"acme-gateway", "acme-active", "-gateway-active", "-ipsecgw-active", "acme-gateway-config-active"} {
		if kind, gw, ok := GatewayOfActiveLease(name); ok {
			t.Errorf("GatewayOfActiveLease(%q) = %q, %q", name, kind, gw)
		}
	}
}
