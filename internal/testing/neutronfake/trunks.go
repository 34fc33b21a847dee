package neutronfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// SubportOwner is the device_owner Neutron gives a port while it is a trunk's subport (its
// device_id is then the trunk's ID).
const SubportOwner = "trunk:subport"

// Subport is one port of a trunk, carried tagged with SegmentationID on the parent's link.
type Subport struct {
	PortID           string `json:"port_id"`
	SegmentationType string `json:"segmentation_type"`
	SegmentationID   int    `json:"segmentation_id"`
}

// Trunk is a Neutron trunk: a parent port (a VM's NIC) carrying its subports as VLANs.
type Trunk struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	Description    string    `json:"description"`
	PortID         string    `json:"port_id"`
	SubPorts       []Subport `json:"sub_ports"`
	Status         string    `json:"status"`
	AdminStateUp   bool      `json:"admin_state_up"`
	ProjectID      string    `json:"project_id"`
	Tags           []string  `json:"tags"`
	CreatedAt      string    `json:"created_at"`
	RevisionNumber int       `json:"revision_number"`
}

// TrunkDetails is what a trunk's parent port shows of it.
type TrunkDetails struct {
	TrunkID  string    `json:"trunk_id"`
	SubPorts []Subport `json:"sub_ports"`
}

// AddVMPort creates a port as Nova does for a server's NIC: device_id the server's ID,
// device_owner "compute:nova". With trunk, the port is made a trunk's parent (the server was
// booted with a trunk port). It returns a copy of the port.
func (s *Server) AddVMPort(networkID, name, serverID string, trunk bool) (Port, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, apiErr := s.createPort(map[string]any{"network_id": networkID, "name": name, "device_id": serverID, "device_owner": "compute:nova"})
	if apiErr != nil {
		return Port{}, fmt.Errorf("%s: %s", apiErr.typ, apiErr.msg)
	}
	p.Status = "ACTIVE"
	if trunk {
		if _, apiErr := s.createTrunk(map[string]any{"port_id": p.ID, "name": name + "-trunk"}); apiErr != nil {
			return Port{}, fmt.Errorf("%s: %s", apiErr.typ, apiErr.msg)
		}
	}
	s.notify()
	return *p, nil
}

// AddSubport makes a port a trunk's subport with a VLAN (someone else's: another workload's).
func (s *Server) AddSubport(trunkID, portID string, vlan int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.trunks[trunkID]
	if !ok {
		return fmt.Errorf("trunk %s does not exist", trunkID)
	}
	subs, apiErr := s.subports(t, []any{map[string]any{"port_id": portID, "segmentation_type": "vlan", "segmentation_id": float64(vlan)}}, true)
	if apiErr != nil {
		return fmt.Errorf("%s: %s", apiErr.typ, apiErr.msg)
	}
	s.attach(t, subs)
	if p, ok := s.ports[t.PortID]; ok {
		p.TrunkDetails = &TrunkDetails{TrunkID: t.ID, SubPorts: t.SubPorts}
	}
	s.notify()
	return nil
}

// TrunkList returns copies of the trunks, oldest first.
func (s *Server) TrunkList() []Trunk {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Trunk
	for _, t := range sorted(s.trunks, func(t *Trunk) string { return t.CreatedAt + t.ID }) {
		c := *t
		c.SubPorts = slices.Clone(t.SubPorts)
		out = append(out, c)
	}
	return out
}

// setPortSecurity applies allowed_address_pairs and port_security_enabled from a create or
// update body, with Neutron's checks: pairs need port security, port security cannot be
// switched off while the port has security groups.
func (s *Server) setPortSecurity(p *Port, m map[string]any) *apiError {
	if v, present := m["port_security_enabled"]; present {
		on, ok := v.(bool)
		if !ok {
			return errf(400, "InvalidInput", "Invalid input for port_security_enabled: %v is not a boolean.", v)
		}
		p.PortSecurityEnabled = on
	}
	if raw, present := m["allowed_address_pairs"]; present {
		list, ok := raw.([]any)
		if raw != nil && !ok {
			return errf(400, "InvalidInput", "Invalid input for allowed_address_pairs: not a list.")
		}
		pairs := []AddressPair{}
		for _, item := range list {
			e, _ := item.(map[string]any)
			ip := str(e, "ip_address")
			if _, err := netip.ParsePrefix(ip); err != nil {
				if _, err := netip.ParseAddr(ip); err != nil {
					return errf(400, "InvalidInput", "Invalid input for allowed_address_pairs: '%s' is not a valid IP address or CIDR.", ip)
				}
			}
			mac := str(e, "mac_address")
			if mac == "" {
				mac = p.MACAddress
			}
			pair := AddressPair{IPAddress: ip, MACAddress: strings.ToLower(mac)}
			if slices.Contains(pairs, pair) {
				return errf(400, "InvalidInput", "Invalid input for allowed_address_pairs: duplicate address pair %s %s.", pair.IPAddress, pair.MACAddress)
			}
			pairs = append(pairs, pair)
		}
		p.AllowedAddressPairs = pairs
	}
	if !p.PortSecurityEnabled && len(p.AllowedAddressPairs) > 0 {
		return errf(409, "AddressPairAndPortSecurityRequired", "Port Security must be enabled in order to have allowed address pairs on a port.")
	}
	if !p.PortSecurityEnabled && len(p.SecurityGroups) > 0 {
		return errf(409, "PortSecurityAndIPRequiredForSecurityGroups", "Port security must be enabled and port must have an IP address in order to use security groups.")
	}
	return nil
}

// usedBy names the trunk a port already serves in (as parent or subport), or "".
func (s *Server) usedBy(portID string) string {
	for _, t := range s.trunks {
		if t.PortID == portID || slices.ContainsFunc(t.SubPorts, func(sp Subport) bool { return sp.PortID == portID }) {
			return t.ID
		}
	}
	return ""
}

func (s *Server) createTrunk(m map[string]any) (*Trunk, *apiError) {
	parentID := str(m, "port_id")
	parent, ok := s.ports[parentID]
	if !ok {
		return nil, errf(404, "PortNotFound", "Port %s could not be found.", parentID)
	}
	if used := s.usedBy(parentID); used != "" {
		return nil, errf(409, "TrunkPortInUse", "Port %s is in use by another trunk.", parentID)
	}
	t := &Trunk{ID: s.newID(), Name: str(m, "name"), Description: str(m, "description"), PortID: parentID,
		SubPorts: []Subport{}, Status: "ACTIVE", AdminStateUp: true, ProjectID: ProjectID, Tags: []string{}, CreatedAt: s.now()}
	if raw, ok := m["sub_ports"].([]any); ok && len(raw) > 0 {
		subs, e := s.subports(t, raw, true)
		if e != nil {
			return nil, e
		}
		s.attach(t, subs)
	}
	s.trunks[t.ID] = t
	parent.TrunkDetails = &TrunkDetails{TrunkID: t.ID, SubPorts: t.SubPorts}
	return t, nil
}

func (s *Server) deleteTrunk(id string) *apiError {
	t, ok := s.trunks[id]
	if !ok {
		return errf(404, "TrunkNotFound", "Trunk %s could not be found.", id)
	}
	s.detach(t, slices.Clone(t.SubPorts))
	if p, ok := s.ports[t.PortID]; ok {
		p.TrunkDetails = nil
	}
	delete(s.trunks, id)
	return nil
}

// subports parses a sub_ports list; adding, each must be a free port and a segmentation ID
// not yet used on the trunk (nor twice in the list); removing, each must be on the trunk.
func (s *Server) subports(t *Trunk, raw []any, adding bool) ([]Subport, *apiError) {
	var out []Subport
	for _, item := range raw {
		e, _ := item.(map[string]any)
		sp := Subport{PortID: str(e, "port_id"), SegmentationType: str(e, "segmentation_type")}
		if v, ok := e["segmentation_id"].(float64); ok {
			sp.SegmentationID = int(v)
		}
		if !adding {
			if !slices.ContainsFunc(t.SubPorts, func(o Subport) bool { return o.PortID == sp.PortID }) {
				return nil, errf(404, "SubPortNotFound", "SubPort %s could not be found on trunk %s.", sp.PortID, t.ID)
			}
			out = append(out, sp)
			continue
		}
		if _, ok := s.ports[sp.PortID]; !ok {
			return nil, errf(404, "PortNotFound", "Port %s could not be found.", sp.PortID)
		}
		if sp.SegmentationType != "vlan" {
			return nil, errf(400, "InvalidInput", "Invalid input for operation: segmentation_type %q is not supported (vlan).", sp.SegmentationType)
		}
		if sp.SegmentationID < 1 || sp.SegmentationID > 4094 {
			return nil, errf(400, "InvalidInput", "Invalid input for operation: segmentation_id %d is not in 1..4094.", sp.SegmentationID)
		}
		if s.usedBy(sp.PortID) != "" || slices.ContainsFunc(out, func(o Subport) bool { return o.PortID == sp.PortID }) {
			return nil, errf(409, "PortInUse", "Port %s is currently in use and is not eligible for use as a subport.", sp.PortID)
		}
		clash := func(o Subport) bool { return o.SegmentationID == sp.SegmentationID }
		if slices.ContainsFunc(t.SubPorts, clash) || slices.ContainsFunc(out, clash) {
			return nil, errf(409, "DuplicateSubPort", "segmentation_type vlan and segmentation_id %d already in use on trunk %s.", sp.SegmentationID, t.ID)
		}
		out = append(out, sp)
	}
	return out, nil
}

// attach makes subs the trunk's subports: each port's device_owner and device_id say so, and
// it is bound where the parent is.
func (s *Server) attach(t *Trunk, subs []Subport) {
	for _, sp := range subs {
		p := s.ports[sp.PortID]
		p.DeviceOwner, p.DeviceID, p.Status = SubportOwner, t.ID, "ACTIVE"
		p.RevisionNumber++
	}
	t.SubPorts = append(t.SubPorts, subs...)
	t.RevisionNumber++
}

func (s *Server) detach(t *Trunk, subs []Subport) {
	for _, sp := range subs {
		if p, ok := s.ports[sp.PortID]; ok {
			p.DeviceOwner, p.DeviceID, p.Status = "", "", "DOWN"
			p.RevisionNumber++
		}
		t.SubPorts = slices.DeleteFunc(t.SubPorts, func(o Subport) bool { return o.PortID == sp.PortID })
	}
	t.RevisionNumber++
}

// trunkAction serves PUT /v2.0/trunks/{id}/add_subports and remove_subports (answering the
// trunk itself, unwrapped, as Neutron does) and GET /v2.0/trunks/{id}/get_subports.
func (s *Server) trunkAction(method, id, action string, body []byte) (int, any, *apiError) {
	t, ok := s.trunks[id]
	if !ok {
		return 0, nil, errf(404, "TrunkNotFound", "Trunk %s could not be found.", id)
	}
	switch {
	case method == http.MethodGet && action == "get_subports":
		return 200, map[string]any{"sub_ports": t.SubPorts}, nil
	case method == http.MethodPut && (action == "add_subports" || action == "remove_subports"):
		var req struct {
			SubPorts []any `json:"sub_ports"`
		}
		if err := json.Unmarshal(body, &req); err != nil || req.SubPorts == nil {
			return 0, nil, errf(400, "HTTPBadRequest", "Resource body required: sub_ports")
		}
		adding := action == "add_subports"
		subs, e := s.subports(t, req.SubPorts, adding)
		if e != nil {
			return 0, nil, e
		}
		if adding {
			s.attach(t, subs)
		} else {
			s.detach(t, subs)
		}
		if p, ok := s.ports[t.PortID]; ok {
			p.TrunkDetails = &TrunkDetails{TrunkID: t.ID, SubPorts: t.SubPorts}
		}
		return 200, t, nil
	}
	return 0, nil, errf(405, "HTTPMethodNotAllowed", "%s not allowed on trunk action %q", method, action)
}
