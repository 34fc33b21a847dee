package model

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"strings"
)

// IKE identities as strongSwan reads them (libstrongswan's identification_create_from_string),
// in one canonical form: "<type>:<value>", where two identities strongSwan takes to be equal
// have the same form. Uniqueness among a gateway's peers, the owner of a pre-shared key and the
// gateway's own identity are all compared in this form.
//
// strongSwan reads a configured identity in this order:
//  1. a type prefix, case-insensitive (fqdn:, dns:, email:, rfc822:, userfqdn:, ipv4:, ipv6:,
//     ipv4net:, ipv6net:, ipv4range:, ipv6range:, asn1dn:, asn1gn:, xmppaddr:, keyid:, uri:),
//     the rest taken as the identity's encoding byte for byte;
//  2. a numeric type, "{n}:";
//  3. a string with '=': a distinguished name (RDNs separated by ',', or by '/' when it starts
//     with one), or a key ID when an attribute is not one strongSwan knows;
//  4. without '@': the wildcards (%any, %any6, *, 0.0.0.0, ::, empty), else an IPv4 address
//     (a '/' makes it a subnet, a '-' a range), else an FQDN; with ':' an IPv6 address, subnet
//     or range, else a key ID;
//  5. with '@': "@#hex" a key ID, "@@x" the e-mail address x, "@x" the FQDN x, else an e-mail
//     address.
//
// FQDNs, e-mail addresses and printable DN values compare case-insensitively; addresses by
// their binary form.
//
// Accepted are the forms that name exactly one identity and that a site presenting it can
// match: FQDNs, e-mail addresses, IPv4 and IPv6 addresses and distinguished names, with or
// without the fqdn/dns/email/rfc822/userfqdn prefixes. Refused, each with the reason: every
// wildcard (*, %any and its spellings, a wildcard RDN), subnets and ranges (ipv4net: …, or an
// address followed by '/' or '-'), key IDs, general names and URIs (keyid:, asn1gn:, xmppaddr:,
// uri:, "{n}:", "@#", a ':' that is no IPv6 address, an unknown DN attribute), and the ipv4:,
// ipv6: and asn1dn: prefixes (strongSwan keeps their text as the encoding, which no site's
// binary identity ever equals: write the address or the DN without a prefix).

// Canonical identity types.
const (
	idFQDN  = "fqdn"
	idEmail = "email"
	idIPv4  = "ipv4"
	idIPv6  = "ipv6"
	idDN    = "dn"
)

// idPrefixes are strongSwan's type prefixes: the canonical type of each accepted one, or the
// reason it is refused.
var idPrefixes = []struct {
	prefix  string
	typ     string // canonical type; empty: refused
	refusal string
}{
	{"ipv4:", "", "the ipv4: prefix makes strongSwan keep the text as the address, which no site's identity equals: write the address without a prefix"},
	{"ipv6:", "", "the ipv6: prefix makes strongSwan keep the text as the address, which no site's identity equals: write the address without a prefix"},
	{"ipv4net:", "", "names a subnet, not one identity"},
	{"ipv6net:", "", "names a subnet, not one identity"},
	{"ipv4range:", "", "names an address range, not one identity"},
	{"ipv6range:", "", "names an address range, not one identity"},
	{"rfc822:", idEmail, ""},
	{"email:", idEmail, ""},
	{"userfqdn:", idEmail, ""},
	{"fqdn:", idFQDN, ""},
	{"dns:", idFQDN, ""},
	{"asn1dn:", "", "the asn1dn: prefix makes strongSwan keep the text as the DN's encoding, which no certificate's DN equals: write the DN without a prefix"},
	{"asn1gn:", "", "is a general name, which a pre-shared key cannot be bound to"},
	{"xmppaddr:", "", "is a general name, which a pre-shared key cannot be bound to"},
	{"keyid:", "", "is a key ID, which a pre-shared key cannot be bound to"},
	{"uri:", "", "is a URI identity, which a pre-shared key cannot be bound to"},
}

// dnAttributes maps the DN attribute names strongSwan knows (case-insensitive) to one name per
// attribute (strongSwan's aliases name the same OID), and says whether its values compare
// case-insensitively (printable strings and e-mail addresses do).
var dnAttributes = map[string]string{
	"nd": "ND", "uid": "UID", "dc": "DC", "cn": "CN", "sn": "SN", "serialnumber": "serialNumber",
	"c": "C", "l": "L", "st": "ST", "street": "STREET", "o": "O", "ou": "OU",
	"organizationidentifier": "organizationIdentifier", "t": "T", "d": "D",
	"postaladdress": "postalAddress", "postalcode": "postalCode", "n": "N", "g": "G", "i": "I",
	"dnqualifier": "dnQualifier", "dmdname": "dmdName", "pseudonym": "pseudonym", "id": "ID",
	"en": "employeeNumber", "employeenumber": "employeeNumber",
	"e": "E", "email": "E", "emailaddress": "E",
	"un": "UN", "unstructuredname": "UN", "ua": "UA", "unstructuredaddress": "UA", "tcgid": "TCGID",
}

// IdentityError says why an IKE identity is refused.
type IdentityError struct {
	ID     string
	Reason string
}

func (e *IdentityError) Error() string { return fmt.Sprintf("%q %s", e.ID, e.Reason) }

func refuseID(id, format string, args ...any) (string, error) {
	return "", &IdentityError{ID: id, Reason: fmt.Sprintf(format, args...)}
}

// CanonicalID is the canonical form of an IKE identity as strongSwan reads it (see above), or
// an *IdentityError when the identity does not name exactly one identity a PSK can prove.
func CanonicalID(id string) (string, error) {
	if id != strings.TrimSpace(id) {
		return refuseID(id, "has leading or trailing spaces, which strongSwan keeps")
	}
	lower := strings.ToLower(id)
	for _, p := range idPrefixes {
		if !strings.HasPrefix(lower, p.prefix) {
			continue
		}
		if p.typ == "" {
			return refuseID(id, "%s", p.refusal)
		}
		return canonicalValue(id, p.typ, id[len(p.prefix):])
	}
	switch {
	case strings.HasPrefix(id, "{"):
		return refuseID(id, "names a numeric identity type, which a pre-shared key cannot be bound to")
	case strings.HasPrefix(id, "%"):
		return refuseID(id, "is one of strongSwan's special values (%%any matches any identity)")
	case strings.HasPrefix(id, "@#"):
		return refuseID(id, "is a key ID, which a pre-shared key cannot be bound to")
	}
	if i := strings.IndexFunc(id, func(r rune) bool { return !idChar(r) }); i >= 0 {
		return refuseID(id, "contains %q: an identity is written with letters, digits, spaces and @._:=,+/*-", id[i:i+1])
	}
	switch {
	case strings.Contains(id, "="):
		return canonicalDN(id)
	case !strings.Contains(id, "@"):
		switch id {
		case "", "*", "0.0.0.0", "::", "0::0":
			return refuseID(id, "matches any identity")
		}
		return canonicalAddressOrFQDN(id)
	case strings.HasPrefix(id, "@@"):
		return canonicalValue(id, idEmail, id[2:])
	case strings.HasPrefix(id, "@"):
		return canonicalValue(id, idFQDN, id[1:])
	default:
		return canonicalValue(id, idEmail, id)
	}
}

// canonicalAddressOrFQDN reads an identity without '@' or '=' as strongSwan does: an address,
// subnet or range when the part before any '/' (else '-') is an address, else an FQDN (no ':')
// or a key ID (with ':').
func canonicalAddressOrFQDN(id string) (string, error) {
	head, rest, cut := strings.Cut(id, "/")
	what := "a subnet"
	if !cut {
		head, rest, cut = strings.Cut(id, "-")
		what = "an address range"
	}
	ip := strings.Contains(id, ":")
	if a, err := netip.ParseAddr(head); err == nil && a.Zone() == "" && a.Is4() != ip {
		if cut {
			if what == "a subnet" || rangeEnd(rest, ip) {
				return refuseID(id, "names %s, not one identity", what)
			}
			// strongSwan falls back to an FQDN (IPv4) or a key ID (IPv6) here
			return refuseID(id, "starts with an address and a '-' but is no range strongSwan reads; write the address alone")
		}
		if a.IsUnspecified() {
			return refuseID(id, "is the unspecified address, which strongSwan reads as any identity")
		}
		if ip {
			return idIPv6 + ":" + a.String(), nil
		}
		return idIPv4 + ":" + a.String(), nil
	}
	if ip {
		return refuseID(id, "has a ':' but is no IPv6 address, which makes strongSwan read it as a key ID")
	}
	return canonicalValue(id, idFQDN, id)
}

func rangeEnd(s string, ip6 bool) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Zone() == "" && a.Is4() != ip6
}

// canonicalValue checks an FQDN or e-mail address (the text after any prefix, which strongSwan
// keeps byte for byte) and folds its case.
func canonicalValue(id, typ, v string) (string, error) {
	switch {
	case v == "":
		return refuseID(id, "is empty after its prefix")
	case strings.Contains(v, "*"):
		return refuseID(id, "contains a wildcard (*), so it matches more than one identity")
	case strings.ContainsAny(v, " ,=/:"):
		return refuseID(id, "is no %s: it contains one of ' ,=/:'", map[string]string{idFQDN: "FQDN", idEmail: "e-mail address"}[typ])
	}
	if typ == idFQDN && strings.Contains(v, "@") {
		return refuseID(id, "is no FQDN: it contains '@'")
	}
	if typ == idEmail {
		local, domain, ok := strings.Cut(v, "@")
		if !ok || local == "" || domain == "" || strings.Contains(domain, "@") {
			return refuseID(id, "is no e-mail address (user@domain)")
		}
	}
	if typ == idFQDN {
		if _, err := netip.ParseAddr(v); err == nil {
			return refuseID(id, "is an address written as an FQDN, which no site presenting the address matches: write the address without a prefix")
		}
	}
	return typ + ":" + strings.ToLower(v), nil
}

// canonicalDN reads a distinguished name as strongSwan's atodn does: RDNs separated by ','
// (by '/' when the string starts with one), "attribute=value" each, spaces around both
// dropped; attribute names are strongSwan's (case-insensitive, aliases folded). Printable and
// e-mail values compare case-insensitively, other (UTF-8) values exactly.
func canonicalDN(id string) (string, error) {
	s, sep := id, ","
	if strings.HasPrefix(s, "/") {
		s, sep = s[1:], "/"
	}
	var out []string
	for _, rdn := range strings.Split(s, sep) {
		if strings.TrimSpace(rdn) == "" {
			continue
		}
		attr, value, ok := strings.Cut(strings.TrimLeft(rdn, " "), "=")
		name, known := dnAttributes[strings.ToLower(strings.TrimRight(attr, " "))]
		if !ok || !known {
			return refuseID(id, "has the DN attribute %q, which strongSwan does not know: it would read the identity as a key ID", strings.TrimSpace(attr))
		}
		value = strings.TrimRight(strings.TrimLeft(value, " ="), " ")
		switch {
		case value == "*" || strings.Contains(value, "*"):
			return refuseID(id, "has a wildcard RDN (%s=*), so it matches more than one identity", name)
		case value == "":
			return refuseID(id, "has an empty RDN %s", name)
		case strings.ContainsAny(value, ",/"):
			return refuseID(id, "has a ',' or '/' in the value of %s, which another spelling would read as a separator", name)
		}
		if printable(value) || name == "E" {
			value = strings.ToLower(value)
		}
		out = append(out, name+"="+value)
	}
	if len(out) == 0 {
		return refuseID(id, "is no distinguished name")
	}
	return idDN + ":" + strings.Join(out, ","), nil
}

// idChar reports whether r may appear in an identity (the API's pattern for IKE IDs).
func idChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@._:=,+/* -", r)
}

// printable reports whether s is an ASN.1 PrintableString (strongSwan encodes other values as
// UTF8String, compared case-sensitively).
func printable(s string) bool {
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune(" '()+,-./:=?", c):
		default:
			return false
		}
	}
	return true
}

// NormalizeID is CanonicalID for comparisons that need a key for any identity (matching a
// logged identity to a peer): the canonical form, or the identity folded to lower case when
// it is refused.
func NormalizeID(id string) string {
	if c, err := CanonicalID(id); err == nil {
		return c
	}
	return strings.ToLower(strings.TrimSpace(id))
}

// CanonicalWireGuardKey is a WireGuard public key in its one spelling: base64 of its 32 bytes
// (encodings that differ only in the unused low bits of the last character decode to the same
// key).
func CanonicalWireGuardKey(k string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(k)
	if err != nil || len(b) != 32 {
		return "", fmt.Errorf("%q is no WireGuard public key (base64 of 32 bytes)", k)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}
