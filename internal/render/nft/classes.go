package nft

import (
	"cmp"
	"hash/fnv"
	"slices"
	"strings"
)

// Grant classes. Who may reach which forward port is written as (class . virtual IP .
// protocol . port) in fwd_grants and, for each peer subnet, its peer's class in the map peer_N
// (see lengthName): a new flow's source subnet gives its class, and the class and the flow's
// destination are looked up together. Peers granted the same ports share a class, so grants
// cost one element per class and port instead of one per subnet and port — at 10,000 peers
// granted alike, a handful of elements instead of tens of thousands, which is what the first
// load of a large gateway's ruleset is made of.
//
// A class's id is a hash of its ports (FNV-1a, 32 bits): the same ports have the same id in
// every render, so a peer joining or leaving a class changes its own subnets' elements only.
// An id that would be 0 (no grants), a conntrack mark the ruleset gives flows (MarkForward,
// MarkReverse) or another class's moves on to the next free value, classes taken in the order
// of their ports.

// noClass is the class of a peer granted nothing (not authorized, or no exposure).
const noClass = 0

// grantClasses returns each peer's class (granted and names indexed alike: the ports each
// peer is granted, its comment name) and the classes in id order.
func grantClasses(granted [][]forwardKey, names []string) ([]uint32, []grantClass) {
	peerClass := make([]uint32, len(granted))
	of := make([]int, len(granted)) // index into classes, -1: none
	var classes []grantClass
	var canon []string
	byPorts := map[string]int{}
	for i, ports := range granted {
		of[i] = -1
		if len(ports) == 0 {
			continue
		}
		ports = slices.Clone(ports)
		slices.SortFunc(ports, compareForwardKey)
		ports = slices.Compact(ports)
		key := portList(ports)
		c, ok := byPorts[key]
		if !ok {
			c = len(classes)
			byPorts[key] = c
			classes = append(classes, grantClass{ports: ports})
			canon = append(canon, key)
		}
		classes[c].peers = append(classes[c].peers, names[i])
		of[i] = c
	}
	for c, id := range classIDs(canon) {
		classes[c].id = id
	}
	for i, c := range of {
		if c >= 0 {
			peerClass[i] = classes[c].id
		}
	}
	slices.SortFunc(classes, func(a, b grantClass) int { return cmp.Compare(a.id, b.id) })
	return peerClass, classes
}

// classIDs returns the id of each class named by its port list: the list's FNV-1a hash, or
// the next value up that is free — not 0, not a flow mark, not an earlier list's id, lists
// taken in order.
func classIDs(portLists []string) []uint32 {
	order := make([]int, len(portLists))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(portLists[a], portLists[b]) })
	taken := map[uint32]bool{noClass: true, MarkForward: true, MarkReverse: true}
	ids := make([]uint32, len(portLists))
	for _, c := range order {
		h := fnv.New32a()
		h.Write([]byte(portLists[c]))
		id := h.Sum32()
		for taken[id] {
			id++
		}
		taken[id] = true
		ids[c] = id
	}
	return ids
}

func compareForwardKey(a, b forwardKey) int {
	if c := a.vip.Compare(b.vip); c != 0 {
		return c
	}
	if c := strings.Compare(a.proto, b.proto); c != 0 {
		return c
	}
	return cmp.Compare(a.port, b.port)
}

// portList is the ports as one string, the class's identity.
func portList(ports []forwardKey) string {
	var b strings.Builder
	for i, k := range ports {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k.String())
	}
	return b.String()
}
