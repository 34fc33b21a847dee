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
