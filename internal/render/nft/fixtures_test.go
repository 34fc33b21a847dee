package nft

import (
	"net/netip"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen/modelgen"
)

var (
	pfx  = netip.MustParsePrefix
	addr = netip.MustParseAddr
)

func tcp(port, target uint16) model.Port {
	return model.Port{Protocol: "tcp", Port: port, TargetPort: target}
}
func udp(port, target uint16) model.Port {
	return model.Port{Protocol: "udp", Port: port, TargetPort: target}
}

// ipsecGateway is an IPsec gateway of tenant-a with a floating IP from the pool "public" and
// the service CIDR 100.64.7.0/24.
func ipsecGateway(name string, peers []model.Peer, exposures []model.Exposure) *model.Gateway {
	return modelgen.Gateway("tenant-a", name, modelgen.FloatingIPPool("public"), modelgen.ServiceCIDR("100.64.7.0/24"),
		modelgen.Exposures(exposures...), modelgen.IKE(2, "aes256gcm16-prfsha256-ecp256"), modelgen.Peers(peers...))
}

// ipsecPeer is a peer at 198.51.100.77 with the reqids of a gateway tenant-a/fixture (its own
// and, with several subnets, theirs); only an authorized peer holds the exposures (as the model
// leaves a dark peer none).
func ipsecPeer(name string, d model.Decision, exposures []string, subnets ...string) model.Peer {
	mods := []modelgen.PeerMod{modelgen.IPsec("198.51.100.77", "198.51.100.77"), modelgen.SourceCIDRs(subnets...),
		modelgen.Reqid("tenant-a", "fixture")}
	if d.Authorized {
		mods = append(mods, modelgen.Grants(exposures...))
	}
	return modelgen.Peer(name, d, mods...)
}

type renderCase struct {
	name string
	gw   func() *model.Gateway
	opts func(*model.Gateway) Options
}

func libipsec(g *model.Gateway) Options  { return DefaultOptions(g, true) }
func kernelESP(g *model.Gateway) Options { return DefaultOptions(g, false) }

func renderCases() []renderCase {
	return []renderCase{
		{
			// One peer, no authorization block: it reaches every exposure. Kernel ESP.
			name: "single-peer-default-allow",
			gw: func() *model.Gateway {
				return ipsecGateway("office", []model.Peer{
					ipsecPeer("hq", modelgen.DefaultAllow(), []string{"db", "web"}, "203.0.113.0/24"),
				}, []model.Exposure{
					{Name: "web", VirtualIP: addr("100.64.7.10"), Target: addr("192.0.2.10"), Ports: []model.Port{tcp(443, 8443), tcp(80, 8080)}, GrantedTo: []string{"hq"}},
					{Name: "db", VirtualIP: addr("100.64.7.11"), Target: addr("192.0.2.20"), TargetService: "postgres", Ports: []model.Port{tcp(5432, 5432)}, GrantedTo: []string{"hq"}},
				})
			},
			opts: kernelESP,
		},
		{
			// Default-deny: each peer reaches what it names; one peer with two subnets.
			name: "multi-peer-mixed-grants",
			gw: func() *model.Gateway {
				return ipsecGateway("partners", []model.Peer{
					ipsecPeer("branch-1", modelgen.Authorized(), []string{"db", "web"}, "203.0.113.0/28", "203.0.113.64/26"),
					ipsecPeer("branch-2", modelgen.Authorized(), []string{"web"}, "203.0.113.16/28"),
					ipsecPeer("vendor", modelgen.Authorized(), []string{"db"}, "198.51.100.0/25"),
				}, []model.Exposure{
					{Name: "web", VirtualIP: addr("100.64.7.10"), Target: addr("192.0.2.10"), Ports: []model.Port{tcp(443, 443)}, GrantedTo: []string{"branch-1", "branch-2"}},
					{Name: "db", VirtualIP: addr("100.64.7.11"), Target: addr("192.0.2.20"), Ports: []model.Port{tcp(5432, 5432)}, GrantedTo: []string{"branch-1", "vendor"}},
					{Name: "unused", VirtualIP: addr("100.64.7.12"), Target: addr("192.0.2.30"), Ports: []model.Port{tcp(22, 22)}},
				})
			},
			opts: libipsec,
		},
		{
			// A dark peer (no grants) gets counters and drops but no grant. A younger peer whose
			// subnet overlaps an authorized one's is dark too; the overlap counts for the
			// authorized peer.
			name: "dark-peer",
			gw: func() *model.Gateway {
				return ipsecGateway("branches", []model.Peer{
					ipsecPeer("branch", modelgen.Authorized(), []string{"web"}, "203.0.113.0/25"),
					ipsecPeer("guest", modelgen.NoGrants(), nil, "203.0.113.128/26"),
					ipsecPeer("latecomer", modelgen.Dark(model.ReasonSubnetConflict, ""), nil, "203.0.113.0/24"),
				}, []model.Exposure{
					{Name: "web", VirtualIP: addr("100.64.7.10"), Target: addr("192.0.2.10"), Ports: []model.Port{tcp(443, 443)}, GrantedTo: []string{"branch"}},
				})
			},
			opts: libipsec,
		},
		{
			// Internal sources reach a host inside the grantee's subnet, TCP and UDP; a reverse
			// exposure nobody holds renders nothing.
			name: "reverse-exposure",
			gw: func() *model.Gateway {
				g := ipsecGateway("ops", []model.Peer{
					ipsecPeer("plant", modelgen.Authorized(), []string{"web"}, "203.0.113.0/28"),
					ipsecPeer("office", modelgen.Authorized(), []string{"web"}, "203.0.113.16/28"),
				}, []model.Exposure{
					{Name: "web", VirtualIP: addr("100.64.7.10"), Target: addr("192.0.2.10"), Ports: []model.Port{tcp(443, 443)}, GrantedTo: []string{"office", "plant"}},
				})
				g.Peers[0].ReverseExposures = []string{"plc"}
				g.InternalSourceCIDRs = []netip.Prefix{pfx("198.51.100.0/24"), pfx("192.0.2.0/24"), pfx("198.51.100.128/25")}
				g.ReverseClients = []netip.Addr{addr("198.51.100.7"), addr("192.0.2.9"), addr("198.51.100.200")}
				g.ReverseExposures = []model.ReverseExposure{
					{Name: "plc", VirtualIP: addr("100.64.7.20"), Target: addr("203.0.113.5"), Grantee: "plant",
						Ports: []model.Port{{Protocol: "tcp", Port: 502, TargetPort: 502, GatewayPort: 20000}, {Protocol: "udp", Port: 161, TargetPort: 161, GatewayPort: 20001}}},
					{Name: "orphan", VirtualIP: addr("100.64.7.21"), Target: addr("203.0.113.6"),
						Ports: []model.Port{{Protocol: "tcp", Port: 22, TargetPort: 22, GatewayPort: 20002}}},
				}
				return g
			},
			opts: libipsec,
		},
		{
			// Ready ClusterLinks: their whole ranges reach the reverse exposure (reverse_clients
			// becomes an interval set; a pod inside a range is not listed twice), and an exposure
			// targets a host in a service cluster.
			name: "cluster-link",
			gw: func() *model.Gateway {
				g := ipsecGateway("ops", []model.Peer{
					ipsecPeer("plant", modelgen.DefaultAllow(), []string{"web"}, "203.0.113.0/28"),
				}, []model.Exposure{
					{Name: "web", VirtualIP: addr("100.64.7.10"), Target: addr("10.50.0.9"), Ports: []model.Port{tcp(443, 443)}, GrantedTo: []string{"plant"}},
				})
				g.Peers[0].ReverseExposures = []string{"plc"}
				g.Routes = []model.Route{
					{CIDR: pfx("10.50.0.0/16"), Via: addr("198.51.100.202"), Link: "svc"},
					{CIDR: pfx("10.51.0.0/16"), Via: addr("198.51.100.202"), Link: "svc"},
					{CIDR: pfx("172.20.0.0/24"), Via: addr("198.51.100.206"), Link: "other"},
				}
				g.InternalSourceCIDRs = []netip.Prefix{pfx("198.51.100.0/24"), pfx("10.50.0.0/16"), pfx("10.51.0.0/16"), pfx("172.20.0.0/24")}
				g.ReverseClients = []netip.Addr{addr("198.51.100.7"), addr("198.51.100.9")}
				g.ReverseExposures = []model.ReverseExposure{
					{Name: "plc", VirtualIP: addr("100.64.7.20"), Target: addr("203.0.113.5"), Grantee: "plant",
						Ports: []model.Port{{Protocol: "tcp", Port: 502, TargetPort: 502, GatewayPort: 20000}}},
				}
				return g
			},
			opts: libipsec,
		},
		{
			// Without internalSourceCIDRs no reverse rule at all is rendered.
			name: "reverse-exposure-without-internal-sources",
			gw: func() *model.Gateway {
				g := ipsecGateway("ops", []model.Peer{
					ipsecPeer("plant", modelgen.DefaultAllow(), nil, "203.0.113.0/28"),
				}, nil)
				g.ReverseExposures = []model.ReverseExposure{
					{Name: "plc", VirtualIP: addr("100.64.7.20"), Target: addr("203.0.113.5"), Grantee: "plant",
						Ports: []model.Port{{Protocol: "tcp", Port: 502, TargetPort: 502, GatewayPort: 20000}}},
				}
				return g
			},
			opts: libipsec,
		},
		{
			name: "wireguard",
			gw:   wireguardGateway,
			opts: func(g *model.Gateway) Options { return DefaultOptions(g, false) },
		},
		{
			// Two exposures on the same port, told apart by their virtual IPs.
			name: "same-port-two-virtual-ips",
			gw: func() *model.Gateway {
				return ipsecGateway("web", []model.Peer{
					ipsecPeer("hq", modelgen.Authorized(), []string{"shop", "wiki"}, "203.0.113.0/24"),
					ipsecPeer("shop-only", modelgen.Authorized(), []string{"shop"}, "198.51.100.0/24"),
				}, []model.Exposure{
					{Name: "wiki", VirtualIP: addr("100.64.7.10"), Target: addr("192.0.2.10"), Ports: []model.Port{tcp(443, 443)}, GrantedTo: []string{"hq"}},
					{Name: "shop", VirtualIP: addr("100.64.7.11"), Target: addr("192.0.2.20"), Ports: []model.Port{tcp(443, 8443)}, GrantedTo: []string{"hq", "shop-only"}},
				})
			},
			opts: libipsec,
		},
		{
			name: "udp-exposure",
			gw: func() *model.Gateway {
				return ipsecGateway("infra", []model.Peer{
					ipsecPeer("site", modelgen.DefaultAllow(), []string{"dns"}, "203.0.113.0/24"),
				}, []model.Exposure{
					{Name: "dns", VirtualIP: addr("100.64.7.53"), Target: addr("192.0.2.53"), Ports: []model.Port{udp(53, 5353), tcp(53, 5353)}, GrantedTo: []string{"site"}},
					{Name: "syslog", VirtualIP: addr("100.64.7.54"), Target: addr("192.0.2.54"), Ports: []model.Port{udp(514, 514)}, GrantedTo: []string{"site"}},
				})
			},
			opts: libipsec,
		},
		{
			// A host-network gateway shares the node's namespace: the forward chain accepts the
			// node's other traffic and only clamps and drops tunnel traffic.
			name: "host-network-shared-netns",
			gw: func() *model.Gateway {
				g := ipsecGateway("edge", []model.Peer{
					ipsecPeer("hq", modelgen.DefaultAllow(), []string{"web"}, "203.0.113.0/24"),
				}, []model.Exposure{
					{Name: "web", VirtualIP: addr("100.64.7.10"), Target: addr("192.0.2.10"), Ports: []model.Port{tcp(443, 443)}, GrantedTo: []string{"hq"}},
				})
				modelgen.HostNetwork("node-1", "198.51.100.1")(g)
				return g
			},
			opts: libipsec,
		},
		{
			// The same in kernel-ESP mode: the tunnel is its IPsec policy.
			name: "host-network-kernel-esp",
			gw: func() *model.Gateway {
				g := ipsecGateway("edge", []model.Peer{
					ipsecPeer("hq", modelgen.DefaultAllow(), []string{"web"}, "203.0.113.0/24"),
				}, []model.Exposure{
					{Name: "web", VirtualIP: addr("100.64.7.10"), Target: addr("192.0.2.10"), Ports: []model.Port{tcp(443, 443)}, GrantedTo: []string{"hq"}},
				})
				modelgen.HostNetwork("node-1", "198.51.100.1")(g)
				g.InternalSourceCIDRs = []netip.Prefix{pfx("10.244.0.0/16")}
				g.ReverseClients = []netip.Addr{addr("10.244.0.5"), addr("10.244.0.6")}
				g.ReverseExposures = []model.ReverseExposure{{Name: "ldap", Grantee: "hq", VirtualIP: addr("100.64.7.20"), Target: addr("203.0.113.5"),
					ServiceIP: addr("10.96.0.40"),
					Ports:     []model.Port{{Protocol: "tcp", Port: 389, TargetPort: 389, GatewayPort: 20000}}}}
				return g
			},
			opts: kernelESP,
		},
		{
			// A host-network WireGuard gateway: its device has the gateway's own name.
			name: "host-network-wireguard",
			gw: func() *model.Gateway {
				g := wireguardGateway()
				modelgen.HostNetwork("node-1", "198.51.100.1")(g)
				return g
			},
			opts: kernelESP,
		},
	}
}

func wireguardGateway() *model.Gateway {
	return modelgen.Gateway("tenant-b", "roadwarriors", modelgen.LoadBalancer("", nil), modelgen.ServiceCIDR("100.64.9.0/24"),
		modelgen.WireGuardDevice(51820, 1380),
		modelgen.Exposures(model.Exposure{Name: "git", VirtualIP: addr("100.64.9.2"), Target: addr("192.0.2.40"),
			Ports: []model.Port{tcp(22, 2222), tcp(443, 443)}, GrantedTo: []string{"laptop"}}),
		modelgen.Peers(
			modelgen.Peer("laptop", modelgen.Authorized(), modelgen.Grants("git"), modelgen.SourceCIDRs("203.0.113.7/32"), modelgen.WireGuard("x")),
			modelgen.Peer("phone", modelgen.Dark(model.ReasonNoGrants, ""), modelgen.SourceCIDRs("203.0.113.8/32"), modelgen.WireGuard("y")),
		))
}
