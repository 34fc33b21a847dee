package labcloud_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/lab/labcloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

type ipLink struct {
	IfName   string `json:"ifname"`
	Address  string `json:"address"`
	AddrInfo []struct {
		Family    string `json:"family"`
		Local     string `json:"local"`
		PrefixLen int    `json:"prefixlen"`
	} `json:"addr_info"`
}

// links is `ip -j addr` in ns.
func links(t *testing.T, ns *netns.NS) map[string]ipLink {
	t.Helper()
	var ls []ipLink
	if err := json.Unmarshal([]byte(ns.MustRun("ip", "-j", "addr", "show")), &ls); err != nil {
		t.Fatal(err)
	}
	out := map[string]ipLink{}
	for _, l := range ls {
		out[l.IfName] = l
	}
	return out
}

func hasAddr(l ipLink, cidr string) bool {
	for _, a := range l.AddrInfo {
		if a.Family == "inet" && fmt.Sprintf("%s/%d", a.Local, a.PrefixLen) == cidr {
			return true
		}
	}
	return false
}

// A NetworkAttachmentDefinition rendered by the operator's provider for a port of the lab
// cloud, executed unchanged with the real CNI plugins (Multus' call: ADD/DEL, net1, the pod's
// namespace), gives the pod net1 with the port's MAC and fixed IP, on the provider network
// (the cloud router's gateway answers through it); DEL takes it away again, twice without
// error (once for host-device, whose Debian release fails a repeated DEL). Both the macvlan template (BindingNone) and the host-device variant; the node is a
// namespace whose p0 is the provider network (the macvlan's master, or the port's own NIC).
func TestNADDispatchGivesThePodThePort(t *testing.T) {
	for _, tc := range []struct {
		name     string
		template string
	}{
		{"macvlan", ""},
		{"host-device", openstack.HostDeviceNADConfigTemplate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			netns.Skip(t, "nft", "socat")
			for _, plugin := range []string{"macvlan", "static", "host-device"} {
				if _, err := (&labcloud.Attacher{}).Find(plugin); err != nil {
					t.Skipf("CNI plugin %s: %v (hack/install-test-deps.sh installs containernetworking-plugins)", plugin, err)
				}
			}
			c := newLabCloud(t)
			tp := newTopology(t, c)
			node := tp.port
			p := c.provider(t, onVeth, func(cfg *openstack.Config) { cfg.NADConfigTemplate = tc.template })
			req := gatewayRequest()
			att := ensureReady(t, p, req).Pod.NetworkAttachment
			t.Cleanup(func() { _ = p.Delete(context.Background(), req) })
			t.Logf("NAD %s: %s", att.Name, att.Config)
			if tc.template != "" {
				node.MustRun("ip", "link", "set", "p0", "address", att.MAC) // the cloud's NIC for the port
			}

			pod := tp.run.NS("pod")
			ref := labcloud.Pod{Namespace: req.Namespace, Name: "edge-0", UID: "pod-uid-1", ContainerID: "sandbox-edge-0", NetNS: "/run/netns/" + pod.Name}
			a := &labcloud.Attacher{CacheDir: t.TempDir(), NodeNetns: node.Name}
			res, err := a.Add(context.Background(), att.Config, ref)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := json.Marshal(res); err == nil {
				t.Logf("CNI result: %s", b)
			}
			net1, ok := links(t, pod)[cloud.NetworkAttachmentInterface]
			if !ok {
				t.Fatalf("the pod has no %s: %v", cloud.NetworkAttachmentInterface, links(t, pod))
			}
			if !strings.EqualFold(net1.Address, att.MAC) || !hasAddr(net1, att.FixedIP+"/24") {
				t.Fatalf("net1 is %s %+v, want the port's %s %s/24", net1.Address, net1.AddrInfo, att.MAC, att.FixedIP)
			}
			t.Logf("net1: %s %s/24", net1.Address, att.FixedIP)
			if r, err := pod.Ping("", "198.51.100.1", 3, 200*time.Millisecond, time.Second); err != nil || r.Received == 0 {
				t.Fatalf("the provider gateway does not answer through net1: %v %+v", err, r)
			}

			dels := 2 // CNI: a repeated DEL succeeds ...
			if tc.template != "" {
				dels = 1 // ... except with Debian's host-device 1.1.1: "failed to find net1"
			}
			for i := 0; i < dels; i++ {
				if err := a.Del(context.Background(), att.Config, ref); err != nil {
					t.Fatalf("DEL %d: %v", i+1, err)
				}
			}
			if _, ok := links(t, pod)[cloud.NetworkAttachmentInterface]; ok {
				t.Fatalf("net1 is still in the pod after DEL")
			}
			if tc.template != "" { // host-device hands the NIC back to the node
				back := false
				for _, l := range links(t, node) {
					back = back || strings.EqualFold(l.Address, att.MAC)
				}
				if !back {
					t.Fatalf("the port's NIC did not return to the node: %v", links(t, node))
				}
			}
		})
	}
}
