package openstack

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strconv"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// NADNameSuffix + the gateway's name names its NetworkAttachmentDefinition.
const NADNameSuffix = "-gateway-uplink"

// NADName is the name of a gateway's NetworkAttachmentDefinition.
func NADName(gateway string) string { return gateway + NADNameSuffix }

// NADNameFor is the NetworkAttachmentDefinition name of a gateway of the given model kind (a
// legacy IPsecGateway's ends in "-ipsecgw-uplink", never a VPNGateway's).
func NADNameFor(kind, gateway string) string {
	if kind == model.KindIPsecGateway {
		return gateway + "-ipsecgw-uplink"
	}
	return NADName(gateway)
}

// TrunkNADConfigTemplate is the attachment of a port bound as a subport of the node's trunk
// (Config.PortBinding "trunk", the default): a VLAN interface on the node's Master interface
// (the trunk's parent NIC) with the subport's segmentation ID, given the port's MAC (tuning)
// and fixed IP (static IPAM). The cloud's port security then sees the pod's frames as the
// port's own, on the port's own VLAN, filtered by the port's own security group.
const TrunkNADConfigTemplate = `{
  "cniVersion": "0.4.0",
  "name": {{json .Name}},
  "plugins": [
    {
      "type": "vlan",
      "master": {{json .Master}},
      "vlanId": {{.VLAN}},
      "ipam": {
        "type": "static",
        "addresses": [{"address": {{json .Address}}{{if .GatewayIP}}, "gateway": {{json .GatewayIP}}{{end}}}]
      }
    },
    {"type": "tuning", "mac": {{json .MAC}}}
  ]
}`

// MacvlanNADConfigTemplate attaches the gateway pod to the node's Master interface with
// macvlan, using the Neutron port's MAC and fixed IP (static IPAM), the default with
// Config.PortBinding "none". Its frames leave through the node's own port with another
// port's MAC and address, which only a network without port security on the node's port
// delivers.
const MacvlanNADConfigTemplate = `{
  "cniVersion": "0.4.0",
  "name": {{json .Name}},
  "type": "macvlan",
  "master": {{json .Master}},
  "mode": "bridge",
  "mac": {{json .MAC}},
  "ipam": {
    "type": "static",
    "addresses": [{"address": {{json .Address}}{{if .GatewayIP}}, "gateway": {{json .GatewayIP}}{{end}}}]
  }
}`

// HostDeviceNADConfigTemplate is the variant for a port attached to the node as its own NIC
// (the cloud hot-plugs it into the node's VM): host-device moves the NIC carrying the port's
// MAC into the pod, static IPAM gives it the fixed IP.
const HostDeviceNADConfigTemplate = `{
  "cniVersion": "0.4.0",
  "name": {{json .Name}},
  "type": "host-device",
  "hwaddr": {{json .MAC}},
  "ipam": {
    "type": "static",
    "addresses": [{"address": {{json .Address}}{{if .GatewayIP}}, "gateway": {{json .GatewayIP}}{{end}}}]
  }
}`

// NADTemplateData is what the NAD config template sees.
type NADTemplateData struct {
	// Name and Namespace of the NetworkAttachmentDefinition (and of the CNI network).
	Name, Namespace string
	// Gateway is the VPNGateway's name, UID its UID.
	Gateway, UID string
	// Master is Config.NADMaster.
	Master string
	// PortID, MAC and IP of the Neutron port; Address is IP/PrefixLength.
	PortID, MAC, IP string
	PrefixLength    int
	Address         string
	// CIDR and GatewayIP of the port's subnet; NetworkID and SubnetID.
	CIDR, GatewayIP     string
	NetworkID, SubnetID string
	// VLAN is the port's segmentation ID as a trunk subport (0 with PortBinding "none").
	VLAN int
}

func (p *Provider) renderAttachment(req cloud.Request, portID, mac, ip string, vlan int, sub *subnets.Subnet) (*cloud.NetworkAttachment, error) {
	d := NADTemplateData{
		Name: NADNameFor(req.Kind, req.Name), Namespace: req.Namespace, Gateway: req.Name, UID: string(req.UID),
		Master: p.cfg.NADMaster, PortID: portID, MAC: mac, IP: ip, VLAN: vlan,
		CIDR: sub.CIDR, GatewayIP: sub.GatewayIP, NetworkID: sub.NetworkID, SubnetID: sub.ID,
	}
	if pfx, err := netip.ParsePrefix(sub.CIDR); err == nil {
		d.PrefixLength = pfx.Bits()
	} else {
		d.PrefixLength = 32
	}
	d.Address = ip + "/" + strconv.Itoa(d.PrefixLength)
	var buf bytes.Buffer
	if err := p.tmpl.Execute(&buf, d); err != nil {
		return nil, cloud.Terminalf(cloud.ReasonInvalidConfiguration, 0, "rendering the NAD config template: %v", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, buf.Bytes()); err != nil {
		return nil, cloud.Terminalf(cloud.ReasonInvalidConfiguration, 0, "the NAD config template does not produce JSON: %v", err)
	}
	return &cloud.NetworkAttachment{
		Name: d.Name, Namespace: d.Namespace, Config: compact.String(),
		PortID: portID, MAC: mac, FixedIP: ip, Address: d.Address, GatewayIP: sub.GatewayIP,
	}, nil
}
