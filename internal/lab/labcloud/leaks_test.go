package labcloud_test

import (
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/lab/labcloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// A gateway's port left as a subport on a node's trunk is a leak of its own row, naming the
// node's NIC and the VLAN; someone else's subport is not the operator's.
func TestLeaksNameSubportsLeftOnTrunks(t *testing.T) {
	st := labcloud.State{
		Ports: []neutronfake.Port{
			{ID: "p-node", Name: "lab-node-2"},
			{ID: "p-gw", Name: openstack.NamePrefix + "uid-1", DeviceOwner: neutronfake.SubportOwner},
			{ID: "p-other", Name: "someone-elses", DeviceOwner: neutronfake.SubportOwner},
		},
		Trunks: []neutronfake.Trunk{{ID: "t1", PortID: "p-node", SubPorts: []neutronfake.Subport{
			{PortID: "p-gw", SegmentationType: "vlan", SegmentationID: 100},
			{PortID: "p-other", SegmentationType: "vlan", SegmentationID: 7},
		}}},
	}
	leaks := labcloud.Leaks(st)
	table := labcloud.LeakTable(leaks)
	if labcloud.Leaked(leaks) != 2 || !strings.Contains(table, "subport") || !strings.Contains(table, "VLAN 100 on the trunk of lab-node-2") || strings.Contains(table, "VLAN 7") {
		t.Fatalf("want the gateway's port and its subport on lab-node-2's trunk, nothing of someone else's:\n%s", table)
	}
}

// An address pair of a gateway's port left on a node's NIC, or one whose port is gone, is a
// leak naming the NIC; a port's pair of its own kind (a VM's virtual IP with its own MAC) is not.
func TestLeaksNameAddressPairsLeftOnNICs(t *testing.T) {
	st := labcloud.State{Ports: []neutronfake.Port{
		{ID: "p-gw", Name: openstack.NamePrefix + "uid-1", MACAddress: "fa:16:3e:00:00:01"},
		{ID: "p-n1", Name: "lab-node", MACAddress: "fa:16:3e:00:00:11", AllowedAddressPairs: []neutronfake.AddressPair{{IPAddress: "100.100.0.5", MACAddress: "fa:16:3e:00:00:01"}}},
		{ID: "p-n2", Name: "lab-node-2", MACAddress: "fa:16:3e:00:00:12", AllowedAddressPairs: []neutronfake.AddressPair{{IPAddress: "100.100.0.9", MACAddress: "fa:16:3e:00:00:99"}}},
		{ID: "p-vm", Name: "vm", MACAddress: "fa:16:3e:00:00:13", AllowedAddressPairs: []neutronfake.AddressPair{{IPAddress: "100.100.0.200", MACAddress: "fa:16:3e:00:00:13"}}},
	}}
	table := labcloud.LeakTable(labcloud.Leaks(st))
	for _, want := range []string{"100.100.0.5 fa:16:3e:00:00:01 on lab-node", "100.100.0.9 fa:16:3e:00:00:99 on lab-node-2 (no port has that MAC any more)"} {
		if !strings.Contains(table, want) {
			t.Errorf("the leak table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "100.100.0.200") || strings.Contains(table, "MISSING") {
		t.Errorf("a VM's own pair listed, or a pair called missing:\n%s", table)
	}
}
