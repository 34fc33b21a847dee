package vmtest_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/deviceconfig"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/vmtest"
)

// EnvLibreswan is the directory with libreswan's pluto, whack and addconn (hack/libreswan.sh;
// TestVM sets it).
const EnvLibreswan = "BNERD_VMTEST_LIBRESWAN"

// TestGuestKernelLibreswanSite: a libreswan site (pluto, Debian's 4.10: the other IKE
// implementation, RHEL's default) configured only from what `kubectl vpn peer-config --format
// libreswan --include-secrets` prints for its VPNPeer — the conn as printed, its secrets line
// uncommented, in an ipsec.conf of the site's own — reaches its exposures through a kernel-ESP
// gateway over IKEv2 and over IKEv1 (main mode), with two local networks (leftsubnets: one
// CHILD_SA per network, each with its subnet's reqid on the gateway). A source outside the
// peer's networks sent through the site's SA is dropped and counted.
func TestGuestKernelLibreswanSite(t *testing.T) {
	vmtest.SkipUnlessGuest(t)
	charontest.Skip(t, "nft")
	bin := os.Getenv(EnvLibreswan)
	if bin == "" {
		t.Fatalf("%s is not set (TestVM runs hack/libreswan.sh)", EnvLibreswan)
	}
	for _, version := range []int32{2, 1} {
		t.Run(fmt.Sprintf("IKEv%d", version), func(t *testing.T) {
			g := newKernelGW(t)
			s := g.addSite("ls", 0, []string{"web", "dns"}, nil)
			s.perSubnet = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/29"), netip.MustParsePrefix("203.0.113.8/29")}
			hosts := []netip.Addr{s.addr, netip.MustParseAddr("203.0.113.9")}
			peer := &g.in.Peers[0]
			peer.Spec.IPsec.RemoteSubnets = nil
			for _, n := range s.perSubnet {
				peer.Spec.IPsec.RemoteSubnets = append(peer.Spec.IPsec.RemoteSubnets, n.String())
			}
			for _, h := range hosts[1:] {
				s.ns.AddLoopback(h.String() + "/32")
			}
			if version == 1 {
				// the gateway's IKE proposal is AES-GCM, which IKEv1 has no IKE SA for
				peer.Spec.IPsec.IKE = &vpnv1.PeerIKESettings{Version: 1, Proposals: []string{"aes256-sha256-modp2048"}}
			}
			g.publish()
			// charon's own retransmission timing: with charontest's quick one it gave an
			// ISAKMP SA up while pluto (slow at its first start) was still finishing quick
			// modes on the other, and pluto kept SAs the gateway never installed
			g.startCharon(true)
			g.startAgent(true)

			conf := g.peerConfig(t, "ls", "libreswan", s.psk)
			pluto := startPluto(t, s.ns, bin, conf, version == 1)
			t.Cleanup(func() {
				if t.Failed() { // both kernels' SAs, the agent, and charon's lines about the children
					t.Logf("the gateway's SAs:\n%s\nthe site's SAs:\n%s\nthe site's policies:\n%s\nthe agent:\n%s", g.node.MustRun("ip", "xfrm", "state"),
						s.ns.MustRun("ip", "xfrm", "state"), s.ns.MustRun("ip", "xfrm", "policy"), g.agent.Output())
					for _, l := range strings.Split(g.charon.Log(), "\n") {
						if strings.Contains(l, "CHILD_SA") || strings.Contains(l, "Quick Mode") || strings.Contains(l, "QUICK_MODE") {
							t.Logf("charon: %s", l)
						}
					}
				}
			})
			reqids := g.peer("ls").IPsec.SubnetReqids
			if len(reqids) == 0 {
				reqids = append(reqids, g.peer("ls").IPsec.Reqid)
			}
			waitUntil(t, "the libreswan site's CHILD_SAs in the gateway's kernel, one per network", 90*time.Second, func() error {
				if pluto.Exited() {
					t.Fatalf("pluto exited:\n%s", pluto.Output())
				}
				states := g.node.MustRun("ip", "xfrm", "state")
				for i, r := range reqids {
					if n := strings.Count(states, fmt.Sprintf("reqid %d ", r)); n < 2 {
						return fmt.Errorf("network %s: %d kernel SAs with reqid %d", s.perSubnet[i], n, r)
					}
				}
				return nil
			})
			web := netip.AddrPortFrom(g.vip("web"), 80).String()
			dns := netip.AddrPortFrom(g.vip("dns"), 53).String()
			for _, src := range hosts {
				waitUntil(t, "TCP from "+src.String()+" to "+web, 30*time.Second, func() error {
					return request(s.ns, "tcp", src, web, 2*time.Second)
				})
				if err := request(s.ns, "udp", src, dns, 2*time.Second); err != nil {
					t.Fatalf("UDP from %s to %s: %v", src, dns, err)
				}
			}
			t.Logf("libreswan IKEv%d site: a CHILD_SA per network (gateway reqids %v), each network's TCP and UDP answered", version, reqids)

			// From an address of the site's outside its networks, through the first network's
			// SA (pluto's reqid for it, a policy of higher priority than pluto's).
			spoof := netip.MustParseAddr("203.0.113.77")
			counted := g.spoofThrough(s.ns, s.ext, spoof, plutoReqid(t, s.ns, s.perSubnet[0]), dns)
			if counted < 5 {
				t.Errorf("5 datagrams from %s (outside the peer's networks) through its SA: %s counted %d", spoof, nft.CounterSpoofed, counted)
			}
			t.Logf("libreswan IKEv%d site: from %s through %s's SA: %s +%d", version, spoof, s.perSubnet[0], nft.CounterSpoofed, counted)
		})
	}
}

// peerConfig is what `kubectl vpn peer-config --format <format>` prints for a peer of the
// gateway (its status as the operator writes it), with the pre-shared key included.
func (g *kernelGW) peerConfig(t *testing.T, peer, format, psk string) string {
	t.Helper()
	gw := g.in.Gateway.DeepCopy()
	gw.Status.PublicAddress = ipsecPublic.String()
	gw.Status.ServiceCIDR = g.m.ServiceCIDR.String()
	for i := range g.in.Peers {
		if p := &g.in.Peers[i]; p.Name == peer {
			out, err := deviceconfig.RenderInput(deviceconfig.Input{Gateway: gw, Peer: p, PSK: psk}, format)
			if err != nil {
				t.Fatalf("peer-config --format %s for %s: %v", format, peer, err)
			}
			return out
		}
	}
	t.Fatalf("no peer %s", peer)
	return ""
}

// startPluto runs libreswan's pluto in the site's namespace with the generated conn. The site
// adds what the generated file leaves to it: an ipsec.conf that includes the conn (with
// updown disabled: the test routes itself), the secrets line uncommented, a default route
// (left=%defaultroute), an NSS database, and for IKEv1 `ikev1-policy=accept` (Debian's 4.10
// drops IKEv1 unless told). pluto runs addconn from /usr/libexec/ipsec, which a private mount
// namespace provides (the guest's root is the host's, read-only, without libreswan).
func startPluto(t *testing.T, ns *netns.NS, bin, conn string, ikev1 bool) *netns.Process {
	t.Helper()
	dir, err := os.MkdirTemp("", "pluto") // short: pluto.ctl is a unix socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var secret string
	lines := strings.Split(conn, "\n")
	for i, l := range lines {
		if strings.HasSuffix(l, ".secrets:") && i+1 < len(lines) {
			secret = strings.TrimPrefix(lines[i+1], "# ")
		}
	}
	if !strings.Contains(secret, " PSK ") {
		t.Fatalf("no secrets line in the generated configuration:\n%s", conn)
	}
	setup := "config setup\n\tlogfile=/dev/stderr\n"
	if ikev1 {
		setup += "\tikev1-policy=accept\n"
	}
	files := map[string]string{
		"site.conf":     conn,
		"ipsec.conf":    setup + "\nconn %default\n\tleftupdown=%disabled\n\ninclude " + filepath.Join(dir, "site.conf") + "\n",
		"ipsec.secrets": secret + "\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"nss", "run"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ns.MustRun("certutil", "-N", "-d", "sql:"+filepath.Join(dir, "nss"), "--empty-password")
	ns.MustRun("ip", "route", "add", "default", "via", ipsecPublic.String(), "dev", "ext0")
	script := fmt.Sprintf(`set -e
mount -t tmpfs libreswan /usr/libexec
mkdir /usr/libexec/ipsec
for f in %[1]s/*; do ln -s "$f" /usr/libexec/ipsec/; done
exec %[1]s/pluto --nofork --stderrlog --config %[2]s/ipsec.conf --secretsfile %[2]s/ipsec.secrets --ipsecdir %[2]s --nssdir %[2]s/nss --rundir %[2]s/run
`, bin, dir)
	p := ns.Start("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pluto's log:\n%s", p.Output())
		}
	})
	return p
}

var reqidRE = regexp.MustCompile(`reqid (\d+)`)

// plutoReqid is the reqid of the site's outbound policy for one of its networks.
func plutoReqid(t *testing.T, ns *netns.NS, local netip.Prefix) string {
	t.Helper()
	out := ns.MustRun("ip", "xfrm", "policy", "list", "dir", "out", "src", local.String())
	m := reqidRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no outbound policy for %s at the site:\n%s", local, out)
	}
	return m[1]
}
