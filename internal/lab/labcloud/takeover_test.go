package labcloud_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/lab/labcloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// standby is a second node plugged into the provider switch, for the takeover measurements.
func (p *provider) secondNode(t *testing.T) (neutronfake.Port, *netns.NS) {
	t.Helper()
	port, err := p.c.AddVMPort(p.c.provNet, "lab-node-3", "5ab0de00-0000-4000-8000-000000000003", true)
	if err != nil {
		t.Fatal(err)
	}
	ns := p.vmNS("node3")
	p.plug(port, ns, nodeNIC, port.FixedIPs[0].IPAddress+"/24")
	p.checked(t, true, port.ID)
	return port, ns
}

// podOn is a gateway pod's namespace on node with the attachment's net1 (the NAD executed on
// that node, as Multus would), its default route the router, echoing tag on UDP 500.
func (p *provider) podOn(t *testing.T, node *netns.NS, name string, att *cloud.NetworkAttachment, tag string) *netns.NS {
	t.Helper()
	pod := p.vmNS(name)
	a := &labcloud.Attacher{CacheDir: t.TempDir(), NodeNetns: node.Name}
	ref := labcloud.Pod{Namespace: "tenant-a", Name: name, UID: "uid-" + name, ContainerID: "sandbox-" + name, NetNS: "/run/netns/" + pod.Name}
	if _, err := a.Add(context.Background(), att.Config, ref); err != nil {
		t.Fatalf("%v\nNAD: %s", err, att.Config)
	}
	t.Cleanup(func() { _ = a.Del(context.Background(), att.Config, ref) })
	pod.MustRun("ip", "route", "replace", "default", "via", routerGateway, "dev", "net1")
	echo(pod, "udp", att.FixedIP, 500, tag)
	return pod
}

// answeredBy waits until the client's probes to addr:500 are answered by tag and returns when;
// before each probe, announce (when set) runs: the standby announcing itself.
func answeredBy(t *testing.T, client *netns.NS, addr, tag string, announce ...func()) time.Time {
	t.Helper()
	if err := netns.Eventually(20*time.Second, func() error {
		for _, a := range announce {
			a()
		}
		if got := ask(client, "udp", addr, 500); !strings.HasPrefix(got, tag+"-") {
			return fmt.Errorf("%s:500 answered %q, want %s", addr, got, tag)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// How a floating IP could follow a standby gateway in an OpenStack cloud, measured in the lab's
// cloud (its API and its L2/L3 agents in namespaces; a real cloud's agents take longer). The
// active's pod goes (its net1 down); then either
//
//   - the floating IP is re-associated with the standby's own port (one PUT; each pod keeps
//     its own port, bound to its own node), or
//   - the one port's address pair moves to the standby's node's NIC (the address-pairs
//     binding: the standby's pod has the same MAC and address on its node, the NIC update
//     and the removal from the old NIC are the API calls; the standby announces itself with
//     one packet, as a GARP does),
//
// and the client's probe is answered by the standby. Both ways must work; the API calls' time
// and the outage (from the active's death to the standby's first answer) are printed.
func TestStandbyTakeoverInTheLabCloud(t *testing.T) {
	for _, plugin := range []string{"macvlan", "static"} {
		if _, err := (&labcloud.Attacher{}).Find(plugin); err != nil {
			netns.SkipUnavailable(t, fmt.Errorf("CNI plugin %s: %v (hack/install-test-deps.sh installs containernetworking-plugins)", plugin, err))
		}
	}
	bg := context.Background()
	binding := func(cfg *openstack.Config) { cfg.NADMaster = nodeNIC; cfg.PortBinding = openstack.BindingAddressPairs }

	t.Run("floating IP re-associated", func(t *testing.T) {
		p := newProvider(t)
		port3, node3 := p.secondNode(t)
		op := p.c.provider(t, binding)
		active, standby := gatewayRequest(), gatewayRequest()
		standby.Name, standby.UID = "edge-standby", "0b7d1c1e-5a4e-4a43-9d6f-2f4a4f1f0002"
		resA, resB := ensureReady(t, op, active), ensureReady(t, op, standby)
		t.Cleanup(func() { _ = op.Delete(context.Background(), active); _ = op.Delete(context.Background(), standby) })
		for req, node := range map[*cloud.Request]neutronfake.Port{&active: p.nodePort, &standby: port3} {
			if _, _, err := op.BindUplink(bg, *req, cloud.Node{Name: node.Name, ProviderID: "openstack:///" + node.DeviceID}); err != nil {
				t.Fatal(err)
			}
		}
		podA := p.podOn(t, p.node, "active", resA.Pod.NetworkAttachment, "active")
		p.podOn(t, node3, "standby", resB.Pod.NetworkAttachment, "standby")
		answeredBy(t, p.client, resA.PublicAddress, "active")

		sc := p.c.network(t)
		var fips []floatingips.FloatingIP
		for _, addr := range []string{resA.PublicAddress, resB.PublicAddress} {
			pages, err := floatingips.List(sc, floatingips.ListOpts{FloatingIP: addr}).AllPages(bg)
			if err != nil {
				t.Fatal(err)
			}
			list, err := floatingips.ExtractFloatingIPs(pages)
			if err != nil || len(list) != 1 {
				t.Fatalf("floating IP %s: %v %+v", addr, err, list)
			}
			fips = append(fips, list[0])
		}
		// the standby's own address is released beforehand: a port holds one floating IP
		if _, err := floatingips.Update(bg, sc, fips[1].ID, floatingips.UpdateOpts{PortID: new(string)}).Extract(); err != nil {
			t.Fatal(err)
		}
		dead := time.Now()
		podA.MustRun("ip", "link", "set", "net1", "down")
		portB := resB.Pod.NetworkAttachment.PortID
		if _, err := floatingips.Update(bg, sc, fips[0].ID, floatingips.UpdateOpts{PortID: &portB}).Extract(); err != nil {
			t.Fatal(err)
		}
		api := time.Since(dead)
		served := answeredBy(t, p.client, resA.PublicAddress, "standby")
		t.Logf("floating IP %s re-associated with the standby's port: API %.0f ms (one PUT), the standby answered within %.0f ms of the active's death (a probe waits up to 1 s)", resA.PublicAddress, ms(api), ms(served.Sub(dead)))
	})

	t.Run("address pair moved", func(t *testing.T) {
		p := newProvider(t)
		port3, node3 := p.secondNode(t)
		op := p.c.provider(t, binding)
		req := gatewayRequest()
		res := ensureReady(t, op, req)
		t.Cleanup(func() { _ = op.Delete(context.Background(), req) })
		if _, _, err := op.BindUplink(bg, req, cloud.Node{Name: p.nodePort.Name, ProviderID: "openstack:///" + p.nodePort.DeviceID}); err != nil {
			t.Fatal(err)
		}
		att := res.Pod.NetworkAttachment
		podA := p.podOn(t, p.node, "active", att, "active")
		podB := p.podOn(t, node3, "standby", att, "standby")
		answeredBy(t, p.client, res.PublicAddress, "active")

		dead := time.Now()
		podA.MustRun("ip", "link", "set", "net1", "down")
		if _, _, err := op.BindUplink(bg, req, cloud.Node{Name: port3.Name, ProviderID: "openstack:///" + port3.DeviceID}); err != nil {
			t.Fatal(err)
		}
		api := time.Since(dead)
		// the standby announces itself until the cloud carries it (a GARP's job, repeated)
		served := answeredBy(t, p.client, res.PublicAddress, "standby", func() { _, _ = podB.Ping("", routerGateway, 1, 50*time.Millisecond, 200*time.Millisecond) })
		t.Logf("address pair %s moved to the standby's node: API %.0f ms (the NICs listed and updated), the standby answered within %.0f ms of the active's death (a probe waits up to 1 s)", att.FixedIP, ms(api), ms(served.Sub(dead)))
	})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
