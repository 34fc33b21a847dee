package labcloud_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/trunks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/lab/labcloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/vmtest"
)

const (
	routerGateway = "198.51.100.1"
	routerMAC     = "02:00:00:ca:fe:01"
	nodeNIC       = "lab-cprov"
	foreignIP     = "198.51.100.250" // on no port
	gatewayVLAN   = 101
)

// switchTopology is the lab cloud's provider network as hack/lab/cloud.sh builds it: the router
// namespace with the bridge "provider" (the router's gateway address on it) and its client
// link, the cloud's L3 agent (Router) and L2 agent (Switch) programming it until the test
// ends; namespaces for the VMs, IPv6 off (the lab's NICs carry IPv4 only).
type switchTopology struct {
	run            *netns.Run
	client, router *netns.NS
}

func newSwitchTopology(t *testing.T, c *labCloud) *switchTopology {
	t.Helper()
	run := netns.NewRun(t, "lcsw")
	tp := &switchTopology{run: run, client: run.NS("client"), router: run.NS("router")}
	netns.VethAddr(tp.client, "c0", clientAddr+"/30", tp.router, "client", "100.64.7.1/30")
	tp.client.MustRun("ip", "route", "add", "203.0.113.0/24", "via", "100.64.7.1")
	tp.router.MustRun("ip", "link", "add", "provider", "address", routerMAC, "type", "bridge")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	r := &labcloud.Router{Netns: tp.router.Name, Links: labcloud.Links{Client: "client", Provider: "provider"}, Log: testr.New(t)}
	if err := r.Setup(netip.MustParsePrefix(routerGateway + "/24")); err != nil {
		t.Fatal(err)
	}
	sw := &labcloud.Switch{Netns: tp.router.Name, Bridge: "provider", Log: testr.New(t)}
	if err := sw.Setup(); err != nil {
		t.Fatal(err)
	}
	wg.Add(2)
	go func() { defer wg.Done(); r.Run(ctx, c.Server, 200*time.Millisecond) }()
	go func() { defer wg.Done(); sw.Run(ctx, c.Server, 200*time.Millisecond) }()
	return tp
}

// vmNS is a namespace of the test without IPv6.
func (tp *switchTopology) vmNS(short string) *netns.NS {
	ns := tp.run.NS(short)
	ns.Sysctl("net.ipv6.conf.all.disable_ipv6", "1")
	ns.Sysctl("net.ipv6.conf.default.disable_ipv6", "1")
	return ns
}

// plug is what hack/lab/cloud.sh's cloud_port_link does: the port's tap in the router
// namespace, enslaved to the bridge, and its other end ifname in ns with the port's MAC (and
// cidr, the default route the router, unless empty).
func (tp *switchTopology) plug(port neutronfake.Port, ns *netns.NS, ifname, cidr string) {
	tap := labcloud.TapName(port.ID)
	ns.MustRun("ip", "link", "add", ifname, "address", port.MACAddress, "type", "veth", "peer", "name", tap, "netns", tp.router.Name)
	tp.router.MustRun("ip", "link", "set", tap, "master", "provider", "up")
	ns.MustRun("ip", "link", "set", ifname, "up")
	if cidr != "" {
		ns.MustRun("ip", "addr", "add", cidr, "dev", ifname)
		ns.MustRun("ip", "route", "add", "default", "via", routerGateway)
	}
}

// checked waits until port security covers the ports' links (or, with present false, no
// longer lists them).
func (tp *switchTopology) checked(t *testing.T, present bool, ids ...string) {
	t.Helper()
	if err := netns.Eventually(10*time.Second, func() error {
		table := tp.router.MustRun("nft", "list", "table", "bridge", labcloud.PortSecurityTable)
		for _, id := range ids {
			if strings.Contains(table, `"`+labcloud.TapName(id)+`"`) != present {
				return fmt.Errorf("port security lists %s: %v, want %v:\n%s", labcloud.TapName(id), !present, present, table)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// counter is the packet count of a named counter of the port security table.
func (tp *switchTopology) counter(t *testing.T, name string) int {
	t.Helper()
	out := tp.router.MustRun("nft", "list", "counter", "bridge", labcloud.PortSecurityTable, name)
	_, rest, ok := strings.Cut(out, "packets ")
	if !ok {
		t.Fatalf("counter %s: %s", name, out)
	}
	n, err := strconv.Atoi(strings.Fields(rest)[0])
	if err != nil {
		t.Fatalf("counter %s: %s", name, out)
	}
	return n
}

type routerLink struct {
	IfName    string `json:"ifname"`
	Master    string `json:"master"`
	Link      string `json:"link"`
	OperState string `json:"operstate"`
	LinkInfo  struct {
		InfoKind string `json:"info_kind"`
		InfoData struct {
			ID int `json:"id"`
		} `json:"info_data"`
	} `json:"linkinfo"`
}

// link is `ip -d -j link show name` in ns; false when there is no such link.
func link(t *testing.T, ns *netns.NS, name string) (routerLink, bool) {
	t.Helper()
	out, err := ns.Run("ip", "-d", "-j", "link", "show", name)
	if err != nil {
		return routerLink{}, false
	}
	var ls []routerLink
	if err := json.Unmarshal([]byte(out), &ls); err != nil || len(ls) != 1 {
		t.Fatalf("ip -d -j link show %s: %v: %s", name, err, out)
	}
	return ls[0], true
}

// pings sends count echo requests from ns to dst and returns how many were answered.
func pings(t *testing.T, ns *netns.NS, dst string, count int) int {
	t.Helper()
	r, err := ns.Ping("", dst, count, 100*time.Millisecond, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return r.Received
}

// vlanDevices is nil when this kernel creates 802.1Q VLAN links (CONFIG_VLAN_8021Q).
func (tp *switchTopology) vlanDevices() error {
	probe := tp.run.NS("probe")
	probe.MustRun("ip", "link", "add", "pv0", "type", "veth", "peer", "name", "pv1")
	if out, err := probe.Run("ip", "link", "add", "link", "pv0", "name", "pv0.1", "type", "vlan", "id", "1"); err != nil {
		return fmt.Errorf("this kernel has no 802.1Q VLAN links (%s): TestSwitchInVM runs the test in Debian's kernel (BNERD_VMTEST=1)", strings.TrimSpace(out))
	}
	return nil
}

// provider is the switch topology with a node (its port a trunk's parent, node-ID a server ID
// as the lab's nodes have) plugged in with its fixed IP.
type provider struct {
	*switchTopology
	c        *labCloud
	nodePort neutronfake.Port
	node     *netns.NS
}

func newProvider(t *testing.T) *provider {
	t.Helper()
	netns.Skip(t, "nft", "socat", "ping")
	if vmtest.InGuest() { // the cloud's API is served on the guest's loopback, down at boot
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Fatalf("ip link set lo up: %v: %s", err, out)
		}
	}
	c := newLabCloud(t)
	p := &provider{switchTopology: newSwitchTopology(t, c), c: c}
	var err error
	if p.nodePort, err = c.AddVMPort(c.provNet, "lab-node-2", "5ab0de00-0000-4000-8000-000000000002", true); err != nil {
		t.Fatal(err)
	}
	p.node = p.vmNS("node")
	p.plug(p.nodePort, p.node, nodeNIC, p.nodePort.FixedIPs[0].IPAddress+"/24")
	p.checked(t, true, p.nodePort.ID)
	return p
}

// The provider network is a switch with Neutron's port security: a node's port (a trunk's
// parent) and a VM's port plugged in as taps reach the router and each other (bridged frames
// meet no router chain; the router's floating IP and security groups work on the bridge); a
// frame the node sends from an address that is not its port's (b), and the gateway port's MAC
// and address sent through a macvlan on the node's NIC (a: a binding a real cloud carries no
// packet of), are dropped and counted on the node's port, and frames for a MAC that is not the
// node's never reach it.
func TestSwitchEnforcesPortSecurity(t *testing.T) {
	p := newProvider(t)
	sc := p.c.network(t)
	bg := context.Background()
	vmPort, err := p.c.AddVMPort(p.c.provNet, "vm", "5ab0de00-0000-4000-8000-0000000000aa", false)
	if err != nil {
		t.Fatal(err)
	}
	nodeIP, vmIP := p.nodePort.FixedIPs[0].IPAddress, vmPort.FixedIPs[0].IPAddress
	vm := p.vmNS("vm")
	p.plug(vmPort, vm, "eth0", vmIP+"/24")
	p.checked(t, true, vmPort.ID)
	nodeSpoofed, nodeMisdirected := labcloud.SpoofedCounter(p.nodePort.ID), labcloud.MisdirectedCounter(p.nodePort.ID)

	// Plugged in, both reach the router and each other with their own addresses.
	if n := pings(t, p.node, routerGateway, 3); n == 0 {
		t.Fatal("the node does not reach the router from its own address")
	}
	if n := pings(t, vm, nodeIP, 3); n == 0 {
		t.Fatal("the VM does not reach the node across the bridge")
	}
	if n := p.counter(t, nodeSpoofed) + p.counter(t, labcloud.SpoofedCounter(vmPort.ID)); n != 0 {
		t.Fatalf("%d frames of the node's and the VM's own addresses were dropped", n)
	}

	// The router's L3 work on the bridge: the VM's floating IP, filtered by its security group.
	group, err := groups.Create(bg, sc, groups.CreateOpts{Name: "vm"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rules.Create(bg, sc, rules.CreateOpts{Direction: rules.DirIngress, EtherType: rules.EtherType4, SecGroupID: group.ID,
		Protocol: rules.ProtocolUDP, PortRangeMin: 7000, PortRangeMax: 7000, RemoteIPPrefix: "0.0.0.0/0"}).Extract(); err != nil {
		t.Fatal(err)
	}
	if _, err := ports.Update(bg, sc, vmPort.ID, ports.UpdateOpts{SecurityGroups: &[]string{group.ID}}).Extract(); err != nil {
		t.Fatal(err)
	}
	fip, err := floatingips.Create(bg, sc, floatingips.CreateOpts{FloatingNetworkID: p.c.extNet, PortID: vmPort.ID}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	echo(vm, "udp", vmIP, 7000, "vm")
	expectAnswer(t, p.client, "udp", fip.FloatingIP, 7000, "vm-"+clientAddr)

	// To the node's port only its MAC (and broadcast, multicast): the VM's frames for a MAC the
	// bridge has not learnt are flooded, and kept from the node.
	before := p.counter(t, nodeMisdirected)
	vm.MustRun("ip", "neigh", "replace", "198.51.100.77", "lladdr", "fa:16:3e:77:77:77", "dev", "eth0", "nud", "permanent")
	pings(t, vm, "198.51.100.77", 3)
	if d := p.counter(t, nodeMisdirected) - before; d < 3 {
		t.Fatalf("%d frames for another MAC were kept from the node, want 3", d)
	}

	// (b) The node's own MAC with an address that is no port's: dropped and counted.
	p.node.MustRun("ip", "addr", "flush", "dev", nodeNIC)
	p.node.MustRun("ip", "addr", "add", foreignIP+"/24", "dev", nodeNIC)
	p.node.MustRun("ip", "neigh", "replace", routerGateway, "lladdr", routerMAC, "dev", nodeNIC, "nud", "permanent")
	before = p.counter(t, nodeSpoofed)
	if n := pings(t, p.node, routerGateway, 3); n != 0 {
		t.Fatalf("the router answered %d pings from %s, an address on no port", n, foreignIP)
	}
	if d := p.counter(t, nodeSpoofed) - before; d < 3 {
		t.Fatalf("%s counted %d frames from %s, want 3", nodeSpoofed, d, foreignIP)
	}
	t.Logf("the node's MAC with %s: dropped, %s +%d", foreignIP, nodeSpoofed, p.counter(t, nodeSpoofed)-before)
	p.node.MustRun("ip", "addr", "flush", "dev", nodeNIC)

	// (a) The gateway's port bound as a macvlan on the node's NIC (its MAC and address through
	// the node's port): dropped and counted on the node's port.
	gwPort, err := ports.Create(bg, sc, ports.CreateOpts{NetworkID: p.c.provNet, Name: "bnerd-vpn-edge"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	gwIP := gwPort.FixedIPs[0].IPAddress
	pod := p.vmNS("pod")
	p.node.MustRun("ip", "link", "add", "mv0", "link", nodeNIC, "address", gwPort.MACAddress, "type", "macvlan", "mode", "bridge")
	p.node.MustRun("ip", "link", "set", "mv0", "netns", pod.Name)
	pod.MustRun("ip", "link", "set", "mv0", "name", "net1")
	pod.MustRun("ip", "addr", "add", gwIP+"/24", "dev", "net1")
	pod.MustRun("ip", "link", "set", "net1", "up")
	pod.MustRun("ip", "neigh", "replace", routerGateway, "lladdr", routerMAC, "dev", "net1", "nud", "permanent")
	before = p.counter(t, nodeSpoofed)
	if n := pings(t, pod, routerGateway, 3); n != 0 {
		t.Fatalf("the router answered %d pings of the gateway's port through a macvlan on the node's NIC", n)
	}
	if d := p.counter(t, nodeSpoofed) - before; d < 3 {
		t.Fatalf("%s counted %d frames of the gateway's MAC and address, want 3", nodeSpoofed, d)
	}
	t.Logf("the macvlan binding (%s %s through the node's port): dropped, %s +%d", gwPort.MACAddress, gwIP, nodeSpoofed, p.counter(t, nodeSpoofed)-before)
}

// (c) The gateway's port as a subport (VLAN 101) of the node's trunk gets its VLAN link on the
// node's tap; a pod with a vlan 101 link on the node's NIC, the port's MAC and address (the
// real vlan and tuning CNI plugins, as the operator's NAD has them) reaches the router, nothing
// dropped on either port; removing the subport removes the link and the traffic stops.
func TestSwitchCarriesSubports(t *testing.T) {
	for _, plugin := range []string{"vlan", "tuning", "static"} {
		if _, err := (&labcloud.Attacher{}).Find(plugin); err != nil {
			netns.SkipUnavailable(t, fmt.Errorf("CNI plugin %s: %v (hack/install-test-deps.sh installs containernetworking-plugins)", plugin, err))
		}
	}
	p := newProvider(t)
	if err := p.vlanDevices(); err != nil {
		t.Skip(err)
	}
	sc := p.c.network(t)
	bg := context.Background()
	gwPort, err := ports.Create(bg, sc, ports.CreateOpts{NetworkID: p.c.provNet, Name: "bnerd-vpn-edge"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	gwIP := gwPort.FixedIPs[0].IPAddress
	nodeSpoofed := labcloud.SpoofedCounter(p.nodePort.ID)

	trunkID := p.nodePort.TrunkDetails.TrunkID
	if _, err := trunks.AddSubports(bg, sc, trunkID, trunks.AddSubportsOpts{Subports: []trunks.Subport{
		{PortID: gwPort.ID, SegmentationType: "vlan", SegmentationID: gatewayVLAN}}}).Extract(); err != nil {
		t.Fatal(err)
	}
	subTap, nodeTap := labcloud.TapName(gwPort.ID), labcloud.TapName(p.nodePort.ID)
	if err := netns.Eventually(10*time.Second, func() error {
		l, ok := link(t, p.router, subTap)
		if !ok || l.LinkInfo.InfoKind != "vlan" || l.LinkInfo.InfoData.ID != gatewayVLAN || l.Link != nodeTap || l.Master != "provider" {
			return fmt.Errorf("the subport's link %s: %v %+v", subTap, ok, l)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	p.checked(t, true, gwPort.ID)

	// The pod's side as the operator's NAD makes it: vlan on the node's NIC, the port's MAC
	// (tuning) and fixed IP (static).
	pod := p.vmNS("pod")
	conf := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "edge-uplink", "plugins": [
	  {"type": "vlan", "master": %q, "vlanId": %d, "ipam": {"type": "static", "addresses": [{"address": "%s/24"}]}},
	  {"type": "tuning", "mac": %q}]}`, nodeNIC, gatewayVLAN, gwIP, gwPort.MACAddress)
	a := &labcloud.Attacher{CacheDir: t.TempDir(), NodeNetns: p.node.Name}
	ref := labcloud.Pod{Namespace: "tenant-a", Name: "edge-0", UID: "pod-uid-1", ContainerID: "sandbox-edge-0", NetNS: "/run/netns/" + pod.Name}
	if _, err := a.Add(bg, conf, ref); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Del(context.Background(), conf, ref) })
	net1, ok := link(t, pod, "net1")
	if !ok || net1.LinkInfo.InfoKind != "vlan" || net1.LinkInfo.InfoData.ID != gatewayVLAN {
		t.Fatalf("the pod's net1: %v %+v", ok, net1)
	}
	before := p.counter(t, nodeSpoofed)
	if n := pings(t, pod, routerGateway, 3); n == 0 {
		t.Fatal("the router does not answer the gateway's port on its subport")
	}
	if n := p.counter(t, labcloud.SpoofedCounter(gwPort.ID)); n != 0 {
		t.Fatalf("%d frames of the gateway's own subport were dropped", n)
	}
	if d := p.counter(t, nodeSpoofed) - before; d != 0 {
		t.Fatalf("the subport's tagged frames met the node's port security (%d dropped)", d)
	}
	t.Logf("subport %s (vlan %d on %s): the pod reaches the router", subTap, gatewayVLAN, nodeTap)

	// The subport removed: its link goes, and the pod's traffic with it.
	if _, err := trunks.RemoveSubports(bg, sc, trunkID, trunks.RemoveSubportsOpts{Subports: []trunks.RemoveSubport{{PortID: gwPort.ID}}}).Extract(); err != nil {
		t.Fatal(err)
	}
	if err := netns.Eventually(10*time.Second, func() error {
		if _, ok := link(t, p.router, subTap); ok {
			return fmt.Errorf("the removed subport's link %s is still there", subTap)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	p.checked(t, false, gwPort.ID)
	if n := pings(t, pod, routerGateway, 3); n != 0 {
		t.Fatalf("the router answered %d pings on a removed subport", n)
	}
	t.Logf("subport removed: %s gone, the pod's pings unanswered", subTap)
}

// The operator's trunk binding on the lab's switch: the provider's port (BindingTrunk, its
// NAD's master the node's NIC) bound to the trunk of the node found by its providerID
// (BindUplink) gets its VLAN link; the NAD the provider rendered, executed unchanged, gives
// the pod the port's VLAN interface, which reaches the router, and IKE to the floating IP
// reaches the pod through the router, the switch and the subport; nothing is dropped on the
// gateway's port.
func TestSwitchCarriesTheOperatorsTrunkBinding(t *testing.T) {
	for _, plugin := range []string{"vlan", "tuning", "static"} {
		if _, err := (&labcloud.Attacher{}).Find(plugin); err != nil {
			netns.SkipUnavailable(t, fmt.Errorf("CNI plugin %s: %v (hack/install-test-deps.sh installs containernetworking-plugins)", plugin, err))
		}
	}
	p := newProvider(t)
	if err := p.vlanDevices(); err != nil {
		t.Skip(err)
	}
	bg := context.Background()
	op := p.c.provider(t, func(cfg *openstack.Config) { cfg.NADMaster = nodeNIC; cfg.PortBinding = openstack.BindingTrunk })
	req := gatewayRequest()
	res := ensureReady(t, op, req)
	t.Cleanup(func() { _ = op.Delete(context.Background(), req) })
	att := res.Pod.NetworkAttachment
	node := cloud.Node{Name: p.nodePort.Name, ProviderID: "openstack:///" + p.nodePort.DeviceID}
	if _, msg, err := op.BindUplink(bg, req, node); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("BindUplink: %s", msg)
	}
	subTap := labcloud.TapName(att.PortID)
	if err := netns.Eventually(10*time.Second, func() error {
		if l, ok := link(t, p.router, subTap); !ok || l.LinkInfo.InfoKind != "vlan" || l.Link != labcloud.TapName(p.nodePort.ID) || l.Master != "provider" {
			return fmt.Errorf("the gateway port's link %s: %v %+v", subTap, ok, l)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	p.checked(t, true, att.PortID)

	pod := p.vmNS("pod")
	a := &labcloud.Attacher{CacheDir: t.TempDir(), NodeNetns: p.node.Name}
	ref := labcloud.Pod{Namespace: req.Namespace, Name: "edge-0", UID: "pod-uid-1", ContainerID: "sandbox-edge-0", NetNS: "/run/netns/" + pod.Name}
	if _, err := a.Add(bg, att.Config, ref); err != nil {
		t.Fatalf("%v\nNAD: %s", err, att.Config)
	}
	t.Cleanup(func() { _ = a.Del(context.Background(), att.Config, ref) })
	pod.MustRun("ip", "route", "replace", "default", "via", routerGateway, "dev", "net1")
	if n := pings(t, pod, routerGateway, 3); n == 0 {
		t.Fatalf("the router does not answer the pod on the operator's NAD:\n%s", att.Config)
	}
	echo(pod, "udp", att.FixedIP, 500, "ike")
	expectAnswer(t, p.client, "udp", res.PublicAddress, 500, "ike-"+clientAddr)
	if n := p.counter(t, labcloud.SpoofedCounter(att.PortID)); n != 0 {
		t.Fatalf("%d frames of the gateway's port were dropped", n)
	}
}

// The operator's address-pairs binding on the lab's switch (no VLANs): the NAD the provider
// rendered (macvlan on the node's NIC with the port's MAC and address) gives the pod frames the
// cloud drops on the node's port until BindUplink makes the port's address and MAC a pair of
// that NIC; then the router answers the pod and IKE to the floating IP reaches it, filtered by
// the security groups of the port that carries it (the node's NIC, which the binding gave the
// gateway's group, as ML2 filters an address pair by its port's groups). Delete takes the pair
// and the group off the NIC again.
func TestSwitchCarriesTheOperatorsAddressPairBinding(t *testing.T) {
	for _, plugin := range []string{"macvlan", "static"} {
		if _, err := (&labcloud.Attacher{}).Find(plugin); err != nil {
			netns.SkipUnavailable(t, fmt.Errorf("CNI plugin %s: %v (hack/install-test-deps.sh installs containernetworking-plugins)", plugin, err))
		}
	}
	p := newProvider(t)
	bg := context.Background()
	op := p.c.provider(t, func(cfg *openstack.Config) { cfg.NADMaster = nodeNIC; cfg.PortBinding = openstack.BindingAddressPairs })
	req := gatewayRequest()
	res := ensureReady(t, op, req)
	t.Cleanup(func() { _ = op.Delete(context.Background(), req) })
	att := res.Pod.NetworkAttachment

	pod := p.vmNS("pod")
	a := &labcloud.Attacher{CacheDir: t.TempDir(), NodeNetns: p.node.Name}
	ref := labcloud.Pod{Namespace: req.Namespace, Name: "edge-0", UID: "pod-uid-1", ContainerID: "sandbox-edge-0", NetNS: "/run/netns/" + pod.Name}
	if _, err := a.Add(bg, att.Config, ref); err != nil {
		t.Fatalf("%v\nNAD: %s", err, att.Config)
	}
	t.Cleanup(func() { _ = a.Del(context.Background(), att.Config, ref) })
	pod.MustRun("ip", "route", "replace", "default", "via", routerGateway, "dev", "net1")
	before := p.counter(t, labcloud.SpoofedCounter(p.nodePort.ID))
	if n := pings(t, pod, routerGateway, 3); n != 0 {
		t.Fatalf("unbound, the pod's frames through the node's NIC were answered %d times", n)
	}
	if after := p.counter(t, labcloud.SpoofedCounter(p.nodePort.ID)); after <= before {
		t.Fatalf("unbound, the node's port counted nothing spoofed (%d -> %d)", before, after)
	}

	node := cloud.Node{Name: p.nodePort.Name, ProviderID: "openstack:///" + p.nodePort.DeviceID}
	if _, msg, err := op.BindUplink(bg, req, node); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("BindUplink: %s", msg)
	}
	if err := netns.Eventually(10*time.Second, func() error {
		if n := pings(t, pod, routerGateway, 1); n != 1 {
			return fmt.Errorf("the router does not answer the bound pod")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	echo(pod, "udp", att.FixedIP, 500, "ike")
	expectAnswer(t, p.client, "udp", res.PublicAddress, 500, "ike-"+clientAddr)
	echo(pod, "udp", att.FixedIP, 501, "other")
	expectSilence(t, p.client, "udp", res.PublicAddress, 501)

	if err := op.Delete(bg, req); err != nil {
		t.Fatal(err)
	}
	for _, port := range p.c.PortList() {
		if port.ID == p.nodePort.ID && (len(port.AllowedAddressPairs) != 0 || len(port.SecurityGroups) != 0) {
			t.Errorf("after Delete the node's port keeps pairs %+v and groups %v", port.AllowedAddressPairs, port.SecurityGroups)
		}
	}
}

// TestSwitchInVM runs the switch's tests in the test VM (internal/testing/vmtest: Debian's
// kernel, which has the 802.1Q VLAN links a trunk's subports need and some kernels lack);
// opt-in with BNERD_VMTEST=1.
func TestSwitchInVM(t *testing.T) {
	vmtest.Skip(t)
	res := vmtest.Run(t, "./internal/lab/labcloud", vmtest.Options{Run: "^TestSwitch(EnforcesPortSecurity|CarriesSubports|CarriesTheOperatorsTrunkBinding)$", Timeout: 8 * time.Minute,
		Modules: append(slices.Clone(vmtest.DefaultModules), "8021q", "bridge", "br_netfilter", "macvlan", "nft_nat", "nft_masq")})
	for _, name := range []string{"TestSwitchEnforcesPortSecurity", "TestSwitchCarriesSubports", "TestSwitchCarriesTheOperatorsTrunkBinding"} {
		if !strings.Contains(res.Output, "--- PASS: "+name+" ") {
			t.Errorf("the VM did not report %s as passed", name)
		}
	}
}
