package model

import (
	"errors"
	"strings"
	"testing"
)

// TestCanonicalIDSpellings: every spelling strongSwan reads as the same identity has one
// canonical form, and identities strongSwan tells apart keep different ones.
func TestCanonicalIDSpellings(t *testing.T) {
	same := [][]string{
		{"victim2.example.com", "fqdn:victim2.example.com", "FQDN:Victim2.Example.COM", "dns:victim2.example.com", "@victim2.example.com", "@VICTIM2.example.com"},
		{"alice@example.com", "email:alice@example.com", "rfc822:Alice@Example.com", "userfqdn:alice@example.com", "@@alice@example.com", "ALICE@EXAMPLE.COM"},
		{"192.0.2.1"},
		{"2001:db8::1", "2001:0db8:0:0:0:0:0:1", "2001:DB8::1"},
		{"C=CH, O=Acme, CN=gw.example.com", "c=ch,o=acme,cn=GW.example.com", "/C=CH/O=Acme/CN=gw.example.com", "C = CH,  O=Acme , CN=gw.example.com", "C=CH, O=Acme, CN==gw.example.com"},
		{"CN=alice, E=alice@example.com", "CN=alice, Email=Alice@example.com", "CN=alice, emailAddress=alice@EXAMPLE.com"},
		{"CN=a, EN=7", "CN=a, employeeNumber=7"},
	}
	seen := map[string]string{}
	for _, group := range same {
		want, err := CanonicalID(group[0])
		if err != nil {
			t.Fatalf("%q: %v", group[0], err)
		}
		if other, dup := seen[want]; dup {
			t.Errorf("%q and %q are different identities but share the canonical form %q", group[0], other, want)
		}
		seen[want] = group[0]
		for _, id := range group[1:] {
			got, err := CanonicalID(id)
			if err != nil {
				t.Errorf("%q: %v", id, err)
				continue
			}
			if got != want {
				t.Errorf("CanonicalID(%q) = %q, want %q (as %q)", id, got, want, group[0])
			}
		}
	}
	// Told apart by strongSwan: another type, another value, RDNs in another order.
	apart := [][2]string{
		{"vpn.example.com", "vpn@example.com"},
		{"192.0.2.1", "192.0.2.2"},
		{"CN=a, O=b", "O=b, CN=a"},
	}
	for _, p := range apart {
		a, errA := CanonicalID(p[0])
		b, errB := CanonicalID(p[1])
		if errA != nil || errB != nil {
			t.Errorf("%q, %q: %v %v", p[0], p[1], errA, errB)
			continue
		}
		if a == b {
			t.Errorf("%q and %q are different identities to strongSwan but both canonicalize to %q", p[0], p[1], a)
		}
	}
}

// TestCanonicalIDRefusals: an identity that names no single identity a PSK can prove is
// refused, with the reason.
func TestCanonicalIDRefusals(t *testing.T) {
	for _, tt := range []struct{ id, reason string }{
		{"", "matches any identity"},
		{"*", "matches any identity"},
		{"0.0.0.0", "matches any identity"},
		{"::", "matches any identity"},
		{"0:0::0", "unspecified address"},
		{"%any", "special values"},
		{"%any6", "special values"},
		{"*.example.com", "wildcard"},
		{"fqdn:*.example.com", "wildcard"},
		{"email:*@example.com", "wildcard"},
		{"CN=*", "wildcard RDN"},
		{"C=CH, CN=*", "wildcard RDN"},
		{"ipv4net:198.51.100.0/24", "subnet"},
		{"IPV4NET:198.51.100.0/24", "subnet"},
		{"ipv6net:2001:db8::/64", "subnet"},
		{"ipv4range:192.0.2.1-192.0.2.9", "range"},
		{"ipv6range:2001:db8::1-2001:db8::9", "range"},
		{"198.51.100.0/24", "subnet"},
		{"192.0.2.1/", "subnet"},
		{"192.0.2.1/x", "subnet"},
		{"2001:db8::/64", "subnet"},
		{"192.0.2.1-192.0.2.9", "range"},
		{"192.0.2.1-x", "no range"},
		{"ipv4:192.0.2.1", "ipv4: prefix"},
		{"ipv6:2001:db8::1", "ipv6: prefix"},
		{"asn1dn:CN=gw", "asn1dn: prefix"},
		{"keyid:abcdef", "key ID"},
		{"@#abcdef", "key ID"},
		{"asn1gn:x", "general name"},
		{"xmppaddr:a@b", "general name"},
		{"uri:https://example.com", "URI"},
		{"{2}:vpn.example.com", "numeric"},
		{"host:500", "key ID"},
		{"fe80::1%eth0", "contains"},
		{"commonName=gw", "does not know"},
		{"CN=gw, Inc.", "does not know"},
		{"CN=", "empty RDN"},
		{"/CN=a,b", "separator"},
		{" vpn.example.com", "spaces"},
		{"fqdn:", "empty"},
		{"fqdn:192.0.2.1", "address written as an FQDN"},
		{"fqdn:@vpn.example.com", "'@'"},
		{"email:alice", "e-mail"},
		{"a@b@c", "e-mail"},
		{"vpn example.com", "' ,=/:'"},
		{"CN=Zürich", "contains"},
		{"vpn.exa\nmple.com", "contains"},
	} {
		_, err := CanonicalID(tt.id)
		var ie *IdentityError
		if !errors.As(err, &ie) {
			t.Errorf("CanonicalID(%q) = %v, want a refusal (%s)", tt.id, err, tt.reason)
			continue
		}
		if !strings.Contains(err.Error(), tt.reason) {
			t.Errorf("CanonicalID(%q): %q, want it to say %q", tt.id, err, tt.reason)
		}
	}
}

func TestCanonicalWireGuardKey(t *testing.T) {
	k := testPeerKey("a")
	got, err := CanonicalWireGuardKey(k)
	if err != nil || got != k {
		t.Fatalf("CanonicalWireGuardKey(%q) = %q, %v", k, got, err)
	}
	// The last character of a 32-byte key carries 4 bits and 2 unused ones: setting an unused
	// bit spells the same key differently.
	alias := k[:42] + string(base64Next(k[42])) + "="
	if alias == k {
		t.Fatal("no alias made")
	}
	got, err = CanonicalWireGuardKey(alias)
	if err != nil || got != k {
		t.Errorf("CanonicalWireGuardKey(%q) = %q, %v; want %q", alias, got, err, k)
	}
	if _, err := CanonicalWireGuardKey("AAAA"); err == nil {
		t.Error("a 3-byte key was accepted")
	}
}

// base64Next is the base64 digit one above c (c's unused low bit set).
func base64Next(c byte) byte {
	const digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	return digits[strings.IndexByte(digits, c)|1]
}

// FuzzCanonicalID: whatever the input, CanonicalID either refuses it or gives a form that is a
// fixed point for the accepted spellings of the same type, never one with a wildcard, and two
// accepted identities whose folded text is equal never get different forms.
func FuzzCanonicalID(f *testing.F) {
	for _, s := range []string{"vpn.example.com", "fqdn:vpn.example.com", "@vpn.example.com", "alice@example.com", "@@alice@example.com",
		"192.0.2.1", "2001:db8::1", "C=CH, O=Acme, CN=gw", "/C=CH/CN=gw", "ipv4net:198.51.100.0/24", "%any", "*", "keyid:ab"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		c, err := CanonicalID(id)
		if err != nil {
			return
		}
		if strings.Contains(c, "*") {
			t.Fatalf("CanonicalID(%q) = %q holds a wildcard", id, c)
		}
		typ, v, ok := strings.Cut(c, ":")
		if !ok {
			t.Fatalf("CanonicalID(%q) = %q has no type", id, c)
		}
		// The canonical value spelled with its type's prefix reads back the same.
		respelled := map[string]string{idFQDN: "fqdn:" + v, idEmail: "email:" + v, idIPv4: v, idIPv6: v, idDN: v}[typ]
		if again, err := CanonicalID(respelled); err != nil || again != c {
			t.Fatalf("CanonicalID(%q) = %q, but its respelling %q reads as %q, %v", id, c, respelled, again, err)
		}
		if up, err := CanonicalID(strings.ToUpper(id)); err == nil && typ != idDN && up != c {
			t.Fatalf("%q and %q differ only in case but canonicalize to %q and %q", id, strings.ToUpper(id), c, up)
		}
	})
}
