package openstack_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// node adds a server's NIC on the gateways' network (a trunk's parent with trunk) and returns
// the node as the binding sees it.
func (e *env) node(t *testing.T, name string, trunk bool) cloud.Node {
	t.Helper()
	server := "5ab0de00-0000-4000-8000-" + strings.Repeat("0", 12-len(name)) + name
	if _, err := e.fake.AddVMPort(e.intNet, name, server, trunk); err != nil {
		t.Fatal(err)
	}
	return cloud.Node{Name: name, ProviderID: "openstack:///" + server}
}

// subportsOf maps each trunk's parent port name to its subports.
func (e *env) subportsOf() map[string][]neutronfake.Subport {
	names := map[string]string{}
	for _, p := range e.fake.PortList() {
		names[p.ID] = p.Name
	}
	out := map[string][]neutronfake.Subport{}
	for _, tr := range e.fake.TrunkList() {
		out[names[tr.PortID]] = tr.SubPorts
	}
	return out
}

func (e *env) port(t *testing.T, id string) neutronfake.Port {
	t.Helper()
	for _, p := range e.fake.PortList() {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("port %s does not exist", id)
	return neutronfake.Port{}
}

// The gateway's port is the subport of the trunk of the node its pod runs on, with the VLAN
// its NetworkAttachmentDefinition names; binding again changes nothing; the pod moving to
// another node moves the subport (the old node's trunk keeps nothing of it); Delete takes it
// off its trunk before deleting it; two gateways get different VLANs and share a trunk.
func TestBindUplinkFollowsThePod(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx()
	p := e.provider(t)
	n1, n2 := e.node(t, "1", true), e.node(t, "2", true)
	e.baseline = e.fake.Inventory()

	req := poolRequest()
	att := ensureReady(t, ctx, p, req).Pod.NetworkAttachment
	changed, msg, err := p.BindUplink(ctx, req, n1)
	if err != nil || !changed {
		t.Fatalf("BindUplink(node 1): changed %v, %v", changed, err)
	}
	t.Log(msg)
	want := neutronfake.Subport{PortID: att.PortID, SegmentationType: "vlan", SegmentationID: openstack.MinVLAN}
	if got := e.subportsOf(); len(got["1"]) != 1 || got["1"][0] != want || len(got["2"]) != 0 {
		t.Fatalf("subports %+v, want node 1's trunk to carry %+v only", got, want)
	}
	if pt := e.port(t, att.PortID); pt.DeviceOwner != openstack.SubportOwner {
		t.Errorf("bound port's device_owner %q", pt.DeviceOwner)
	}
	if changed, _, err := p.BindUplink(ctx, req, n1); err != nil || changed {
		t.Errorf("binding again: changed %v, %v", changed, err)
	}

	if changed, _, err := p.BindUplink(ctx, req, n2); err != nil || !changed {
		t.Fatalf("BindUplink(node 2): changed %v, %v", changed, err)
	}
	if got := e.subportsOf(); len(got["1"]) != 0 || len(got["2"]) != 1 || got["2"][0] != want {
		t.Fatalf("after the move: subports %+v, want node 2's trunk to carry %+v only", got, want)
	}

	other := poolRequest()
	other.Name = "other"
	att2 := ensureReady(t, ctx, p, other).Pod.NetworkAttachment
	if _, _, err := p.BindUplink(ctx, other, n2); err != nil {
		t.Fatalf("a second gateway on node 2: %v", err)
	}
	if got := e.subportsOf()["2"]; len(got) != 2 || got[1].PortID != att2.PortID || got[1].SegmentationID != openstack.MinVLAN+1 {
		t.Errorf("node 2's subports %+v: want the second gateway's port as VLAN %d", got, openstack.MinVLAN+1)
	}

	for _, r := range []cloud.Request{req, other} {
		if err := p.Delete(ctx, r); err != nil {
			t.Fatalf("Delete %s: %v", r.Name, err)
		}
	}
	if got := e.subportsOf(); len(got["1"])+len(got["2"]) != 0 {
		t.Errorf("after Delete: subports %+v", got)
	}
	if got := e.leaked(); got.Total() != 0 {
		t.Errorf("after Delete: %v left", got)
	}
}

// What the binding cannot do is said with the node named, terminal (nothing retries it soon):
// a node that is no OpenStack server, a node whose NIC is no trunk's parent, a VLAN another
// subport already holds on the trunk. A failed trunk call is transient and the next try binds.
func TestBindUplinkRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx()
	p := e.provider(t)
	req := poolRequest()
	att := ensureReady(t, ctx, p, req).Pod.NetworkAttachment

	terminal := func(t *testing.T, node cloud.Node, reason string, words ...string) {
		t.Helper()
		_, _, err := p.BindUplink(ctx, req, node)
		ce, ok := cloud.AsError(err)
		if !ok || !ce.Terminal || ce.Reason != reason {
			t.Fatalf("BindUplink(%s): %v, want a terminal %s", node.Name, err, reason)
		}
		for _, w := range append(words, node.Name) {
			if !strings.Contains(ce.Message, w) {
				t.Errorf("message %q does not name %q", ce.Message, w)
			}
		}
	}
	t.Run("no OpenStack server", func(t *testing.T) {
		terminal(t, cloud.Node{Name: "kind-worker", ProviderID: "kind://docker/kind/kind-worker"}, cloud.ReasonNotFound, "providerID")
	})
	t.Run("no trunk", func(t *testing.T) {
		terminal(t, e.node(t, "3", false), cloud.ReasonNotFound, "trunk")
	})
	t.Run("VLAN taken", func(t *testing.T) {
		n := e.node(t, "4", true)
		foreign := e.fake.AddPort(e.intNet, "someone-elses-subport")
		for _, tr := range e.fake.TrunkList() {
			if tr.Name == "4-trunk" {
				if err := e.fake.AddSubport(tr.ID, foreign, openstack.MinVLAN); err != nil {
					t.Fatal(err)
				}
			}
		}
		terminal(t, n, cloud.ReasonConflict, "VLAN 100")
	})
	t.Run("a failed trunk call is retried", func(t *testing.T) {
		n := e.node(t, "5", true)
		remove := e.fake.Inject(neutronfake.Fault{Method: "PUT", Resource: neutronfake.Trunks, Status: 503})
		_, _, err := p.BindUplink(ctx, req, n)
		remove()
		if ce, ok := cloud.AsError(err); !ok || ce.Terminal {
			t.Fatalf("503 adding the subport: %v, want a transient error", err)
		}
		if changed, _, err := p.BindUplink(ctx, req, n); err != nil || !changed {
			t.Fatalf("retry: changed %v, %v", changed, err)
		}
		if got := e.subportsOf()["5"]; len(got) != 1 || got[0].PortID != att.PortID {
			t.Errorf("node 5's subports %+v", got)
		}
	})
}

// Neutron pages long lists (pagination_max_limit): every list the provider makes follows the
// pages. Five gateways on a network whose lists come two items a page get five different
// VLANs, bind to one node's trunk side by side, and leave nothing behind.
func TestListsFollowNeutronsPages(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx()
	p := e.provider(t)
	n := e.node(t, "1", true)
	e.baseline = e.fake.Inventory()
	e.fake.SetPageSize(2)

	var reqs []cloud.Request
	vlans := map[int]bool{}
	for i := range 5 {
		req := poolRequest()
		req.Name = fmt.Sprintf("gw-%d", i)
		reqs = append(reqs, req)
		att := ensureReady(t, ctx, p, req).Pod.NetworkAttachment
		if _, _, err := p.BindUplink(ctx, req, n); err != nil {
			t.Fatalf("BindUplink %s: %v", req.Name, err)
		}
		vlan := 0
		for _, s := range e.subportsOf()["1"] {
			if s.PortID == att.PortID {
				vlan = s.SegmentationID
			}
		}
		if vlan == 0 || vlans[vlan] {
			t.Fatalf("gateway %s: VLAN %d (taken: %v)", req.Name, vlan, vlans)
		}
		vlans[vlan] = true
	}
	paged := 0
	for _, c := range e.fake.Calls() {
		if c.Method == "GET" && strings.Contains(c.Query, "marker=") {
			paged++
		}
	}
	if paged == 0 {
		t.Fatal("no list call followed a next page: the test does not exercise pagination")
	}
	for _, req := range reqs {
		if err := p.Delete(ctx, req); err != nil {
			t.Fatalf("Delete %s: %v", req.Name, err)
		}
	}
	if got := e.leaked(); got.Total() != 0 || len(e.subportsOf()["1"]) != 0 {
		t.Errorf("after Delete: %v left, subports %+v", got, e.subportsOf())
	}
	t.Logf("%d list calls followed a next page; VLANs %v", paged, vlans)
}

// pairsOn maps the name of each port but the gateways' own that has allowed address pairs or
// the group to its pairs.
func (e *env) pairsOn(group string) map[string][]neutronfake.AddressPair {
	out := map[string][]neutronfake.AddressPair{}
	for _, p := range e.fake.PortList() {
		if strings.HasPrefix(p.Name, openstack.NamePrefix) {
			continue
		}
		if len(p.AllowedAddressPairs) > 0 || slices.Contains(p.SecurityGroups, group) {
			out[p.Name] = p.AllowedAddressPairs
		}
	}
	return out
}

// With the address-pairs binding the gateway's port reaches the pod through the NIC of the
// pod's node: that NIC gets exactly the port's address and MAC as a pair and the gateway's
// security group, every other NIC loses them when the pod moves (a concurrent change of the
// NIC, 412, is retried), the attachment is a macvlan with the port's MAC, and Delete leaves no
// pair, group or port behind.
func TestAddressPairsFollowThePod(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx()
	p := e.provider(t, func(c *openstack.Config) { c.PortBinding = openstack.BindingAddressPairs })
	n1, n2 := e.node(t, "1", false), e.node(t, "2", false)
	e.baseline = e.fake.Inventory()

	req := poolRequest()
	att := ensureReady(t, ctx, p, req).Pod.NetworkAttachment
	if !strings.Contains(att.Config, `"type":"macvlan"`) || !strings.Contains(att.Config, att.MAC) {
		t.Errorf("attachment %s: want macvlan with the port's MAC", att.Config)
	}
	sg, port, _ := e.checkOne(t, req)
	want := neutronfake.AddressPair{IPAddress: att.FixedIP, MACAddress: port.MACAddress}
	carried := func(node string) {
		t.Helper()
		got := e.pairsOn(sg.ID)
		if len(got) != 1 || len(got[node]) != 1 || got[node][0] != want {
			t.Fatalf("pairs and group %s on %+v, want %+v on %s's NIC only", sg.ID, got, want, node)
		}
	}
	if changed, msg, err := p.BindUplink(ctx, req, n1); err != nil || !changed {
		t.Fatalf("BindUplink(node 1): changed %v, %v", changed, err)
	} else {
		t.Log(msg)
	}
	carried("1")
	if changed, _, err := p.BindUplink(ctx, req, n1); err != nil || changed {
		t.Errorf("binding again: changed %v, %v", changed, err)
	}

	remove := e.fake.Inject(neutronfake.Fault{Method: "PUT", Resource: neutronfake.Ports, Status: 412,
		Body: `{"NeutronError": {"type": "RevisionNumberConstraintFailed", "message": "Constrained to 1, but current revision is 2", "detail": ""}}`})
	_, _, err := p.BindUplink(ctx, req, n2)
	remove()
	if ce, ok := cloud.AsError(err); !ok || ce.Terminal {
		t.Fatalf("412 updating the NIC: %v, want a transient error", err)
	}
	if changed, _, err := p.BindUplink(ctx, req, n2); err != nil || !changed {
		t.Fatalf("BindUplink(node 2): changed %v, %v", changed, err)
	}
	carried("2")

	if err := p.Delete(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := e.pairsOn(sg.ID); len(got) != 0 {
		t.Errorf("after Delete: pairs or the group left on %+v", got)
	}
	if got := e.leaked(); got.Total() != 0 {
		t.Errorf("after Delete: %v left", got)
	}
}
