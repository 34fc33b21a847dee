package strongswan

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
)

// TestCharonAgreesWithCanonicalID asks strongSwan itself whether two spellings of an IKE
// identity are one identity: the gateway's charon holds one connection whose remote ID, and
// its PSK's owner, are spelled A; a site's charon presents its own ID spelled B with that PSK.
// IKE_AUTH succeeds exactly when charon takes A and B to be equal — and model.CanonicalID must
// say the same, so that no two peers whose identities charon confuses are both admitted (a
// dark peer's PSK would otherwise prove its sibling's identity).
func TestCharonAgreesWithCanonicalID(t *testing.T) {
	charontest.Skip(t)
	run := charontest.NewRun(t)
	gwNS, siteNS := run.Netns("gw"), run.Netns("site")
	charontest.Veth(gwNS, "eth0", "198.51.100.1/30", siteNS, "eth0", "198.51.100.2/30")
	gw := charontest.Start(t, gwNS, "gw", charontest.Config{})
	site := charontest.Start(t, siteNS, "site", charontest.Config{RetransmitTries: 1})

	pairs := identityPairs(rand.New(rand.NewPCG(7, 11)))
	equal, apart := 0, 0
	for i, p := range pairs {
		ca, errA := model.CanonicalID(p[0])
		cb, errB := model.CanonicalID(p[1])
		if errA != nil || errB != nil {
			t.Fatalf("pair %q, %q: the corpus holds only accepted spellings: %v %v", p[0], p[1], errA, errB)
		}
		want := ca == cb
		got, out := charonAuthenticates(t, gw, site, i, p[0], p[1])
		if got != want {
			t.Errorf("remote ID %q at the gateway, %q presented by the site: charon authenticates: %v; CanonicalID says equal: %v (%q, %q)\n%s",
				p[0], p[1], got, want, ca, cb, out)
		}
		if want {
			equal++
		} else {
			apart++
		}
	}
	// What CanonicalID refuses, charon lets match more than one identity: a subnet, a range or a
	// wildcard as the gateway's remote ID authenticates a site presenting one address or name of it.
	for i, p := range [][2]string{
		{"198.51.100.0/30", "198.51.100.2"},
		{"192.0.2.8-192.0.2.12", "192.0.2.9"},
		{"*.example.com", "victim2.example.com"},
		{"CN=*, O=Acme", "CN=site, O=Acme"},
	} {
		if _, err := model.CanonicalID(p[0]); err == nil {
			t.Errorf("CanonicalID accepts %q", p[0])
		}
		if got, out := charonAuthenticates(t, gw, site, len(pairs)+i, p[0], p[1]); !got {
			t.Errorf("remote ID %q at the gateway: charon did not authenticate %q, so refusing it proves nothing\n%s", p[0], p[1], out)
		}
	}
	t.Logf("%d spelling pairs negotiated: %d one identity to charon and to CanonicalID, %d two", len(pairs), equal, apart)
	if equal == 0 || apart == 0 {
		t.Fatal("the corpus must hold both equal and different pairs")
	}
}

// charonAuthenticates loads connection n on both daemons (the gateway's remote ID and key
// owner a; the site's local ID b) and reports whether the site's IKE_SA comes up.
func charonAuthenticates(t *testing.T, gw, site *charontest.Charon, n int, a, b string) (bool, string) {
	t.Helper()
	psk := fmt.Sprintf("identity-test-%d-0123456789abcdef", n)
	gwConf := fmt.Sprintf(`connections {
  p%[1]d {
    version = 2
    local_addrs = 198.51.100.1
    proposals = aes256gcm16-prfsha256-ecp256
    local { auth = psk
            id = gw.example.net }
    remote { auth = psk
             id = "%[2]s" }
    children { c { local_ts = 203.0.113.0/28
                   remote_ts = 203.0.113.16/28
                   esp_proposals = aes256gcm16 } }
  }
}
secrets { ike-p%[1]d { id = "%[2]s"
                      secret = "%[3]s" } }
`, n, a, psk)
	siteConf := fmt.Sprintf(`connections {
  s%[1]d {
    version = 2
    local_addrs = 198.51.100.2
    remote_addrs = 198.51.100.1
    proposals = aes256gcm16-prfsha256-ecp256
    local { auth = psk
            id = "%[2]s" }
    remote { auth = psk
             id = gw.example.net }
    children { c { local_ts = 203.0.113.16/28
                   remote_ts = 203.0.113.0/28
                   esp_proposals = aes256gcm16 } }
  }
}
secrets { ike-s%[1]d { secret = "%[3]s" } }
`, n, b, psk)
	if err := gw.LoadSwanctlConf(gwConf); err != nil {
		t.Fatalf("gateway: %v", err)
	}
	if err := site.LoadSwanctlConf(siteConf); err != nil {
		t.Fatalf("site: %v", err)
	}
	out, err := site.Swanctl("--initiate", "--ike", fmt.Sprintf("s%d", n), "--child", "c", "--timeout", "5")
	_, _ = site.Swanctl("--terminate", "--ike", fmt.Sprintf("s%d", n), "--force", "--timeout", "2")
	_, _ = gw.Swanctl("--terminate", "--ike", fmt.Sprintf("p%d", n), "--force", "--timeout", "2")
	// The IKE_SA coming up is charon's verdict on the identities (the CHILD_SA is not needed).
	_ = err
	return strings.Contains(out, fmt.Sprintf("IKE_SA s%d[", n)) && strings.Contains(out, "established between"), out
}

// identityPairs is the corpus: spellings of a few identities of every accepted type —
// prefixes, '@' forms, case, DN separators, spaces and attribute aliases, IPv6 notation —
// paired within one identity and across identities that differ in one respect (type, one
// character, RDN order).
func identityPairs(r *rand.Rand) [][2]string {
	spell := func(forms ...string) []string { return forms }
	groups := [][]string{
		spell("victim2.example.com", "fqdn:victim2.example.com", "FQDN:Victim2.Example.com", "dns:VICTIM2.example.com", "@victim2.example.com", "@Victim2.Example.COM"),
		spell("victim3.example.com", "fqdn:victim3.example.com"),
		spell("ops@example.com", "email:ops@example.com", "rfc822:OPS@example.com", "userfqdn:ops@Example.com", "@@ops@example.com"),
		spell("ops@example.net", "email:ops@example.net"),
		spell("192.0.2.9"),
		spell("192.0.2.10"),
		spell("2001:db8::9", "2001:0db8:0000::9", "2001:DB8::9"),
		spell("C=CH, O=Acme, CN=site", "c=ch, o=acme, cn=SITE", "/C=CH/O=Acme/CN=site", "C = CH,O=Acme ,CN=site", "C=CH, O=Acme, CN==site"),
		spell("O=Acme, C=CH, CN=site"),
		spell("CN=ops, E=ops@example.com", "CN=ops, Email=OPS@example.com", "cn=ops, emailAddress=ops@EXAMPLE.com"),
		spell("CN=a, EN=7", "CN=a, employeeNumber=7"),
	}
	var pairs [][2]string
	for _, g := range groups {
		for i := 1; i < len(g); i++ {
			pairs = append(pairs, [2]string{g[0], g[i]}, [2]string{g[i], g[r.IntN(len(g))]})
		}
	}
	// Across identities: neighbours in the list differ in one respect.
	for i := 0; i+1 < len(groups); i++ {
		a, b := groups[i], groups[i+1]
		pairs = append(pairs, [2]string{a[r.IntN(len(a))], b[r.IntN(len(b))]})
	}
	pairs = append(pairs,
		[2]string{"vpn.example.com", "vpn@example.com"},
		[2]string{"ops@example.com", "ops.example.com"})
	return pairs
}
