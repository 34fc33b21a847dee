package deviceconfig

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Kind is the transform type of an algorithm.
type Kind int

const (
	Encryption Kind = iota
	Integrity
	PRF
	DH
)

func (k Kind) String() string {
	return [...]string{"encryption", "integrity", "PRF", "DH group"}[k]
}

// Context is where an algorithm is used: the IKE SA (phase 1) or the CHILD SA (ESP, phase 2).
type Context int

const (
	IKE Context = iota
	ESP
)

func (c Context) String() string {
	if c == IKE {
		return "IKE"
	}
	return "ESP"
}

// Vendors (output formats) that name algorithms in their own words. strongswan and opnsense
// use strongSwan's keywords and have no column.
const (
	vFortigate = "fortigate"
	vPfsense   = "pfsense"
	vMikrotik  = "mikrotik"
	vCiscoIOS  = "cisco-ios"
	vCiscoASA  = "cisco-asa"
	vJunos     = "junos"
	vPaloalto  = "paloalto"
	vLibreswan = "libreswan"
)

// names is an algorithm's name on one vendor: in IKE proposals and in ESP proposals. An
// empty name means the vendor cannot do it there.
type names struct{ ike, esp string }

// both is the same name in IKE and ESP.
func both(n string) names { return names{n, n} }

// Algorithm is one row of the mapping table: the canonical algorithm (its strongSwan keyword),
// the words sheets use for it, and each vendor's name.
type Algorithm struct {
	// Name is the strongSwan keyword: the canonical value (aes256gcm16, sha256, prfsha256, ecp256).
	Name string
	Kind Kind
	// AEAD: authenticated encryption (no integrity algorithm beside it).
	AEAD bool
	// Bits is the key length of an encryption algorithm, the hash length of integrity and PRF.
	Bits int
	// Group is the IANA DH group number.
	Group int
	// Aliases are further words for the algorithm in parameter sheets and vendor UIs; they are
	// compared after normalize (lowercase, without '-', '_', ' ', '/' and '.').
	Aliases []string
	// Weak says why the algorithm should not be chosen for a tunnel ("": it is not weak). A weak
	// row stays in the table for the devices that can do no better; see also Weakness.
	Weak string
	// vendor names, by vendor; a vendor missing from the map cannot do the algorithm at all.
	vendor map[string]names
}

// algorithms is the one table every translation goes through: vendor output (peer-config) and
// vendor words in (import). Only algorithms the gateway's strongSwan negotiates and that are
// not broken are listed; see refused for the rest.
var algorithms = []Algorithm{
	// --- encryption, classic (CBC): integrity beside it ---
	{Name: "aes128", Kind: Encryption, Bits: 128,
		Aliases: []string{"aes128cbc", "aescbc128", "aes", "aes128bit"},
		vendor: map[string]names{
			vFortigate: both("aes128"), vPfsense: both("aes:128"),
			vMikrotik: {"aes-128", "aes-128-cbc"}, vCiscoIOS: {"aes-cbc-128", "esp-aes 128"},
			vCiscoASA: both("aes"), vJunos: both("aes-128-cbc"), vPaloalto: both("aes-128-cbc"),
			vLibreswan: both("aes128"),
		}},
	{Name: "aes192", Kind: Encryption, Bits: 192,
		Aliases: []string{"aes192cbc", "aescbc192"},
		vendor: map[string]names{
			vFortigate: both("aes192"), vPfsense: both("aes:192"),
			vMikrotik: {"aes-192", "aes-192-cbc"}, vCiscoIOS: {"aes-cbc-192", "esp-aes 192"},
			vCiscoASA: both("aes-192"), vJunos: both("aes-192-cbc"), vPaloalto: both("aes-192-cbc"),
			vLibreswan: both("aes192"),
		}},
	{Name: "aes256", Kind: Encryption, Bits: 256,
		Aliases: []string{"aes256cbc", "aescbc256", "aes256bit"},
		vendor: map[string]names{
			vFortigate: both("aes256"), vPfsense: both("aes:256"),
			vMikrotik: {"aes-256", "aes-256-cbc"}, vCiscoIOS: {"aes-cbc-256", "esp-aes 256"},
			vCiscoASA: both("aes-256"), vJunos: both("aes-256-cbc"), vPaloalto: both("aes-256-cbc"),
			vLibreswan: both("aes256"),
		}},
	// --- encryption, AEAD (16-octet ICV) ---
	{Name: "aes128gcm16", Kind: Encryption, AEAD: true, Bits: 128,
		Aliases: []string{"aes128gcm", "aes128gcm128", "aesgcm128", "gcmaes128", "aes128gcm16", "aesgcm16128", "aes128gcmicv16"},
		vendor: map[string]names{
			vFortigate: both("aes128gcm"), vPfsense: both("aes128gcm:128"),
			vMikrotik: {"", "aes-128-gcm"}, vCiscoIOS: {"aes-gcm-128", "esp-gcm 128"},
			vCiscoASA: both("aes-gcm"), vJunos: both("aes-128-gcm"), vPaloalto: both("aes-128-gcm"),
			vLibreswan: both("aes_gcm128"),
		}},
	{Name: "aes192gcm16", Kind: Encryption, AEAD: true, Bits: 192,
		Aliases: []string{"aes192gcm", "aes192gcm128", "aesgcm192", "gcmaes192"},
		vendor: map[string]names{
			vPfsense:  both("aes192gcm:128"),
			vMikrotik: {"", "aes-192-gcm"}, vCiscoASA: both("aes-gcm-192"),
			vJunos:     {"", "aes-192-gcm"},
			vLibreswan: both("aes_gcm192"),
		}},
	{Name: "aes256gcm16", Kind: Encryption, AEAD: true, Bits: 256,
		Aliases: []string{"aes256gcm", "aes256gcm128", "aesgcm256", "gcmaes256", "aesgcm16256", "aes256gcmicv16"},
		vendor: map[string]names{
			vFortigate: both("aes256gcm"), vPfsense: both("aes256gcm:128"),
			vMikrotik: {"", "aes-256-gcm"}, vCiscoIOS: {"aes-gcm-256", "esp-gcm 256"},
			vCiscoASA: both("aes-gcm-256"), vJunos: both("aes-256-gcm"), vPaloalto: both("aes-256-gcm"),
			vLibreswan: both("aes_gcm256"),
		}},
	{Name: "chacha20poly1305", Kind: Encryption, AEAD: true, Bits: 256,
		Aliases: []string{"chacha20", "chachapoly", "chacha20poly1305"},
		vendor: map[string]names{
			vFortigate: both("chacha20poly1305"), vPfsense: both("chacha20poly1305:0"),
			vJunos:     {"chacha20-poly1305", ""},
			vLibreswan: both("chacha20_poly1305"),
		}},
	// --- integrity ---
	{Name: "sha1", Kind: Integrity, Bits: 160, Weak: "SHA-1 is deprecated",
		Aliases: []string{"sha", "sha1", "hmacsha1", "hmacsha196", "sha196", "sha160"},
		vendor: map[string]names{
			vFortigate: both("sha1"), vPfsense: {"sha1", "hmac_sha1"}, vMikrotik: both("sha1"),
			vCiscoIOS: {"sha1", "esp-sha-hmac"}, vCiscoASA: {"sha", "sha-1"},
			vJunos: {"sha1", "hmac-sha1-96"}, vPaloalto: both("sha1"), vLibreswan: both("sha1"),
		}},
	{Name: "sha256", Kind: Integrity, Bits: 256,
		Aliases: []string{"sha2256", "sha256", "hmacsha256", "hmacsha256128", "sha256128", "sha2"},
		vendor: map[string]names{
			vFortigate: both("sha256"), vPfsense: {"sha256", "hmac_sha256"}, vMikrotik: both("sha256"),
			vCiscoIOS: {"sha256", "esp-sha256-hmac"}, vCiscoASA: {"sha256", "sha-256"},
			vJunos: {"sha-256", "hmac-sha-256-128"}, vPaloalto: both("sha256"), vLibreswan: both("sha2_256"),
		}},
	{Name: "sha384", Kind: Integrity, Bits: 384,
		Aliases: []string{"sha2384", "sha384", "hmacsha384", "hmacsha384192", "sha384192"},
		vendor: map[string]names{
			vFortigate: both("sha384"), vPfsense: {"sha384", "hmac_sha384"},
			vCiscoIOS: {"sha384", "esp-sha384-hmac"}, vCiscoASA: {"sha384", "sha-384"},
			vJunos: {"sha-384", "hmac-sha-384-192"}, vPaloalto: both("sha384"), vLibreswan: both("sha2_384"),
		}},
	{Name: "sha512", Kind: Integrity, Bits: 512,
		Aliases: []string{"sha2512", "sha512", "hmacsha512", "hmacsha512256", "sha512256"},
		vendor: map[string]names{
			vFortigate: both("sha512"), vPfsense: {"sha512", "hmac_sha512"}, vMikrotik: both("sha512"),
			vCiscoIOS: {"sha512", "esp-sha512-hmac"}, vCiscoASA: {"sha512", "sha-512"},
			vJunos: {"sha-512", "hmac-sha-512-256"}, vPaloalto: both("sha512"), vLibreswan: both("sha2_512"),
		}},
	// --- PRF (IKE only) ---
	{Name: "prfsha1", Kind: PRF, Bits: 160, Weak: "SHA-1 is deprecated",
		Aliases: []string{"prfsha1", "prfhmacsha1", "hmacsha1prf"},
		vendor: map[string]names{
			vFortigate: {"prfsha1", ""}, vPfsense: {"sha1", ""}, vMikrotik: {"sha1", ""},
			vCiscoIOS: {"sha1", ""}, vCiscoASA: {"sha", ""}, vJunos: {"prf-hmac-sha1", ""},
			vPaloalto: {"sha1", ""}, vLibreswan: {"sha1", ""},
		}},
	{Name: "prfsha256", Kind: PRF, Bits: 256,
		Aliases: []string{"prfsha256", "prfsha2256", "prfhmacsha256", "hmacsha256prf"},
		vendor: map[string]names{
			vFortigate: {"prfsha256", ""}, vPfsense: {"sha256", ""}, vMikrotik: {"sha256", ""},
			vCiscoIOS: {"sha256", ""}, vCiscoASA: {"sha256", ""}, vJunos: {"prf-hmac-sha256", ""},
			vPaloalto: {"sha256", ""}, vLibreswan: {"sha2_256", ""},
		}},
	{Name: "prfsha384", Kind: PRF, Bits: 384,
		Aliases: []string{"prfsha384", "prfsha2384", "prfhmacsha384", "hmacsha384prf"},
		vendor: map[string]names{
			vFortigate: {"prfsha384", ""}, vPfsense: {"sha384", ""}, vMikrotik: {"sha384", ""},
			vCiscoIOS: {"sha384", ""}, vCiscoASA: {"sha384", ""}, vJunos: {"prf-hmac-sha384", ""},
			vPaloalto: {"sha384", ""}, vLibreswan: {"sha2_384", ""},
		}},
	{Name: "prfsha512", Kind: PRF, Bits: 512,
		Aliases: []string{"prfsha512", "prfsha2512", "prfhmacsha512", "hmacsha512prf"},
		vendor: map[string]names{
			vFortigate: {"prfsha512", ""}, vPfsense: {"sha512", ""}, vMikrotik: {"sha512", ""},
			vCiscoIOS: {"sha512", ""}, vCiscoASA: {"sha512", ""}, vJunos: {"prf-hmac-sha512", ""},
			vPaloalto: {"sha512", ""}, vLibreswan: {"sha2_512", ""},
		}},
	// --- Diffie-Hellman groups (IKE, and ESP for PFS) ---
	weak(dhRow("modp1024", 2, "", []string{"dh2", "modp1024"}), "DH group 2 (modp1024) is too small"),
	weak(dhRow("modp1536", 5, "modp1536", []string{"dh5"}), "DH group 5 (modp1536) is too small"),
	dhRow("modp2048", 14, "modp2048", []string{"dh14"}),
	dhRow("modp3072", 15, "modp3072", []string{"dh15"}),
	dhRow("modp4096", 16, "modp4096", []string{"dh16"}),
	dhRow("ecp256", 19, "dh19", []string{"ecp256", "ecdh256", "p256", "nistp256", "secp256r1", "ecp256bit"}),
	dhRow("ecp384", 20, "dh20", []string{"ecp384", "ecdh384", "p384", "nistp384", "secp384r1"}),
	dhRow("ecp521", 21, "dh21", []string{"ecp521", "ecdh521", "p521", "nistp521", "secp521r1"}),
	{Name: "curve25519", Kind: DH, Group: 31,
		Aliases: []string{"x25519", "curve25519", "ecx25519", "group31", "dh31", "31"},
		vendor: map[string]names{
			vFortigate: both("31"), vPfsense: both("31"), vMikrotik: {"x25519", ""},
			vLibreswan: both("dh31"),
		}},
}

// dhRow is a DH group's row: the vendors all name MODP and NIST groups the same way (by
// number, or MikroTik's modpN/ecpN); libreswan's name is given (empty: libreswan refuses it).
func dhRow(name string, group int, libreswan string, aliases []string) Algorithm {
	n := fmt.Sprint(group)
	v := map[string]names{
		vFortigate: both(n), vPfsense: both(n), vMikrotik: both(name),
		vCiscoIOS: both(n), vCiscoASA: both(n), vJunos: both("group" + n), vPaloalto: both("group" + n),
	}
	if libreswan != "" {
		v[vLibreswan] = both(libreswan)
	}
	return Algorithm{Name: name, Kind: DH, Group: group,
		Aliases: append([]string{"group" + n, n, "modpgroup" + n, "dhgroup" + n}, aliases...), vendor: v}
}

// weak marks a row as weak, with the reason.
func weak(a Algorithm, why string) Algorithm {
	a.Weak = why
	return a
}

// refused are words for algorithms the operator will not negotiate, with the reason.
var refused = map[string]string{
	"des":          "DES is broken",
	"descbc":       "DES is broken",
	"3des":         "3DES is deprecated (64-bit blocks, Sweet32) and not offered by the gateway",
	"3descbc":      "3DES is deprecated (64-bit blocks, Sweet32) and not offered by the gateway",
	"tripledes":    "3DES is deprecated (64-bit blocks, Sweet32) and not offered by the gateway",
	"blowfish":     "Blowfish is not offered by the gateway",
	"blowfish128":  "Blowfish is not offered by the gateway",
	"blowfish192":  "Blowfish is not offered by the gateway",
	"blowfish256":  "Blowfish is not offered by the gateway",
	"cast128":      "CAST-128 is not offered by the gateway",
	"null":         "null encryption is not allowed",
	"md5":          "MD5 is broken",
	"hmacmd5":      "MD5 is broken",
	"hmacmd596":    "MD5 is broken",
	"prfmd5":       "MD5 is broken",
	"aesxcbc":      "AES-XCBC is not offered",
	"group1":       "DH group 1 (modp768) is broken",
	"modp768":      "DH group 1 (modp768) is broken",
	"1":            "DH group 1 (modp768) is broken",
	"modp1024s160": "DH group 22 (modp1024s160) is too small",
	"aes128gcm8":   "AES-GCM with an 8-octet ICV is not offered: use the 16-octet variant (aes128gcm16)",
	"aes256gcm8":   "AES-GCM with an 8-octet ICV is not offered: use the 16-octet variant (aes256gcm16)",
	"aes128gcm12":  "AES-GCM with a 12-octet ICV is not offered: use the 16-octet variant (aes128gcm16)",
	"aes256gcm12":  "AES-GCM with a 12-octet ICV is not offered: use the 16-octet variant (aes256gcm16)",
}

// synonyms are strongSwan's own further keywords for an algorithm, to its canonical keyword
// (also for algorithms the table does not list: a configured proposal may name them).
var synonyms = map[string]string{
	"aes": "aes128",
	"sha": "sha1", "sha1_96": "sha1",
	"sha2_256": "sha256", "sha256_128": "sha256",
	"sha2_384": "sha384", "sha384_192": "sha384",
	"sha2_512": "sha512", "sha512_256": "sha512",
	"prfsha2_256": "prfsha256", "prfsha2_384": "prfsha384", "prfsha2_512": "prfsha512",
	"aes128gcm128": "aes128gcm16", "aes192gcm128": "aes192gcm16", "aes256gcm128": "aes256gcm16",
	"x25519": "curve25519", "x448": "curve448",
}

var byName = func() map[string]*Algorithm {
	m := map[string]*Algorithm{}
	for i := range algorithms {
		m[algorithms[i].Name] = &algorithms[i]
	}
	for word, name := range synonyms {
		if a := m[name]; a != nil {
			m[word] = a
		}
	}
	return m
}()

// Weakness says why the algorithm of a strongSwan keyword (canonical, as Transforms hold
// them) should not be negotiated: a word the operator refuses, or a weak row of the table.
// weak is false for every other algorithm, known or not.
func Weakness(keyword string) (why string, weak bool) {
	if a := byName[keyword]; a != nil {
		return a.Weak, a.Weak != ""
	}
	why, weak = refused[normalize(keyword)]
	return why, weak
}

// charonTransforms translate the transform names of charon's log (a proposal as it prints
// it: IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/ECP_256) into strongSwan keywords. They are the
// two notations' grammar, key lengths and ICV sizes carried over, not a list of algorithms:
// the keyword names the algorithm in the table, refused, or neither.
var charonTransforms = []struct {
	re   *regexp.Regexp
	kind Kind
	kw   string // ${1}, ${2}: the captures
}{
	{regexp.MustCompile(`^AES_CBC_(\d+)$`), Encryption, "aes${1}"},
	{regexp.MustCompile(`^AES_GCM_(8|12|16)_(\d+)$`), Encryption, "aes${2}gcm${1}"},
	{regexp.MustCompile(`^AES_CCM_(8|12|16)_(\d+)$`), Encryption, "aes${2}ccm${1}"},
	{regexp.MustCompile(`^AES_CTR_(\d+)$`), Encryption, "aes${1}ctr"},
	{regexp.MustCompile(`^CAMELLIA_CBC_(\d+)$`), Encryption, "camellia${1}"},
	{regexp.MustCompile(`^CHACHA20_POLY1305(?:_256)?$`), Encryption, "chacha20poly1305"},
	{regexp.MustCompile(`^3DES_CBC$`), Encryption, "3des"},
	{regexp.MustCompile(`^DES_CBC$`), Encryption, "des"},
	{regexp.MustCompile(`^BLOWFISH_CBC_(\d+)$`), Encryption, "blowfish${1}"},
	{regexp.MustCompile(`^CAST_CBC(?:_\d+)?$`), Encryption, "cast128"},
	{regexp.MustCompile(`^NULL$`), Encryption, "null"},
	{regexp.MustCompile(`^HMAC_MD5_96$`), Integrity, "md5"},
	{regexp.MustCompile(`^HMAC_SHA1_96$`), Integrity, "sha1"},
	{regexp.MustCompile(`^HMAC_SHA1_160$`), Integrity, "sha1_160"},
	{regexp.MustCompile(`^HMAC_SHA2_256_128$`), Integrity, "sha256"},
	{regexp.MustCompile(`^HMAC_SHA2_256_96$`), Integrity, "sha256_96"},
	{regexp.MustCompile(`^HMAC_SHA2_384_192$`), Integrity, "sha384"},
	{regexp.MustCompile(`^HMAC_SHA2_512_256$`), Integrity, "sha512"},
	{regexp.MustCompile(`^AES_XCBC_96$`), Integrity, "aesxcbc"},
	{regexp.MustCompile(`^AES_CMAC_96$`), Integrity, "aescmac"},
	{regexp.MustCompile(`^PRF_HMAC_MD5$`), PRF, "prfmd5"},
	{regexp.MustCompile(`^PRF_HMAC_SHA1$`), PRF, "prfsha1"},
	{regexp.MustCompile(`^PRF_HMAC_SHA2_(256|384|512)$`), PRF, "prfsha${1}"},
	{regexp.MustCompile(`^PRF_AES128_XCBC$`), PRF, "prfaesxcbc"},
	{regexp.MustCompile(`^PRF_AES128_CMAC$`), PRF, "prfaescmac"},
	{regexp.MustCompile(`^MODP_(\d+)$`), DH, "modp${1}"},
	{regexp.MustCompile(`^MODP_(\d+)_(\d+)$`), DH, "modp${1}s${2}"},
	{regexp.MustCompile(`^ECP_(\d+)$`), DH, "ecp${1}"},
	{regexp.MustCompile(`^ECP_(\d+)_BP$`), DH, "ecp${1}bp"},
	{regexp.MustCompile(`^CURVE_(25519|448)$`), DH, "curve${1}"},
}

// byKindAlias maps normalized sheet words to algorithms, per kind (a word such as "sha256"
// names an integrity algorithm in one column and a PRF in another).
var byKindAlias = func() map[Kind]map[string]*Algorithm {
	m := map[Kind]map[string]*Algorithm{Encryption: {}, Integrity: {}, PRF: {}, DH: {}}
	add := func(k Kind, word string, a *Algorithm) {
		w := normalize(word)
		if prev, dup := m[k][w]; dup && prev != a {
			panic(fmt.Sprintf("deviceconfig: alias %q names both %s and %s", word, prev.Name, a.Name))
		}
		m[k][w] = a
	}
	for i := range algorithms {
		a := &algorithms[i]
		add(a.Kind, a.Name, a)
		for _, w := range a.Aliases {
			add(a.Kind, w, a)
		}
		for _, n := range a.vendor {
			for _, s := range []string{n.ike, n.esp} {
				// vendor names are aliases too, except bare hash names in a PRF row
				// (they are integrity words) and pfSense's name:keylen pairs
				if s != "" && !strings.Contains(s, ":") {
					add(a.Kind, s, a)
				}
			}
		}
		if a.Kind == PRF {
			// a PRF column may name the hash alone: "SHA2-256"
			h := byName[strings.TrimPrefix(a.Name, "prf")]
			for _, w := range append([]string{h.Name}, h.Aliases...) {
				add(PRF, w, a)
			}
		}
	}
	return m
}()

// normalize folds a sheet word: lowercase, no separators.
func normalize(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	return strings.Map(func(r rune) rune {
		switch r {
		case '-', '_', ' ', '/', '.', '(', ')':
			return -1
		}
		return r
	}, s)
}

// LookupAlias maps a sheet word of the given kind (e.g. "AES256-GCM-16", "GCMAES256",
// "SHA2-256", "group 19", "ecp256") to the canonical algorithm, or says why not.
func LookupAlias(k Kind, word string) (*Algorithm, error) {
	w := normalize(word)
	if w == "" {
		return nil, fmt.Errorf("empty %s", k)
	}
	if k == DH {
		w = strings.TrimPrefix(w, "dhgroup")
		w = strings.TrimPrefix(w, "group")
		if a, ok := byKindAlias[DH][w]; ok {
			return a, nil
		}
	}
	if a, ok := byKindAlias[k][w]; ok {
		return a, nil
	}
	if why, ok := refused[w]; ok {
		return nil, fmt.Errorf("%q: %s", word, why)
	}
	if k == DH {
		if why, ok := refused["group"+w]; ok {
			return nil, fmt.Errorf("%q: %s", word, why)
		}
	}
	// a word of another kind is a likely slip (an integrity algorithm in the encryption column)
	for _, other := range []Kind{Encryption, Integrity, PRF, DH} {
		if other == k {
			continue
		}
		if _, ok := byKindAlias[other][w]; ok {
			return nil, fmt.Errorf("%q is %s %s, not %s", word, article(other), other, k)
		}
	}
	return nil, fmt.Errorf("%q is not a known %s (known: %s)", word, k, strings.Join(Known(k), ", "))
}

func article(k Kind) string {
	if k == Encryption || k == Integrity {
		return "an"
	}
	return "a"
}

// Known lists the canonical names of one kind.
func Known(k Kind) []string {
	var out []string
	for _, a := range algorithms {
		if a.Kind == k {
			out = append(out, a.Name)
		}
	}
	return out
}

// Proposal is one strongSwan proposal split into its transforms, each list in preference order.
type Proposal struct {
	Enc, Integ, PRF, DH []*Algorithm
	// Raw is the proposal as configured.
	Raw string
}

// AEAD reports whether the proposal's encryption is authenticated (all of it: strongSwan does
// not mix AEAD and classic algorithms in one proposal).
func (p Proposal) AEAD() bool { return len(p.Enc) > 0 && p.Enc[0].AEAD }

// ParseProposal splits a proposal in strongSwan notation (aes256gcm16-prfsha256-ecp256,
// aes256-sha256-modp2048) into canonical algorithms, with strongSwan's rules: an IKE proposal
// without a PRF takes its integrity algorithms' hashes as PRFs; AEAD and classic encryption
// are not mixed; an IKE proposal needs a DH group and, with AEAD, a PRF; ESP integrity
// beside AEAD is dropped (as charon does); ESP's DH groups are its PFS groups.
func ParseProposal(ctx Context, s string) (Proposal, error) {
	p := Proposal{Raw: s}
	if s == "" {
		return p, fmt.Errorf("empty proposal")
	}
	for _, tok := range strings.Split(s, "-") {
		switch tok {
		case "esn", "noesn":
			if ctx == IKE {
				return p, fmt.Errorf("proposal %q: %q is an ESP option", s, tok)
			}
			if tok == "esn" {
				return p, fmt.Errorf("proposal %q: extended sequence numbers (esn) are not supported by the generated device configurations", s)
			}
			continue
		}
		a, ok := byName[tok]
		if !ok {
			return p, fmt.Errorf("proposal %q: %q is not an algorithm the device configurations know (known: %s)", s, tok,
				strings.Join(slices.Concat(Known(Encryption), Known(Integrity), Known(PRF), Known(DH)), ", "))
		}
		switch a.Kind {
		case Encryption:
			p.Enc = appendUnique(p.Enc, a)
		case Integrity:
			p.Integ = appendUnique(p.Integ, a)
		case PRF:
			if ctx == ESP {
				return p, fmt.Errorf("proposal %q: a PRF (%s) has no place in an ESP proposal", s, tok)
			}
			p.PRF = appendUnique(p.PRF, a)
		case DH:
			p.DH = appendUnique(p.DH, a)
		}
	}
	if len(p.Enc) == 0 {
		return p, fmt.Errorf("proposal %q has no encryption algorithm", s)
	}
	aead := p.Enc[0].AEAD
	for _, e := range p.Enc[1:] {
		if e.AEAD != aead {
			return p, fmt.Errorf("proposal %q mixes AEAD (%s) and classic (%s) encryption: strongSwan needs separate proposals", s, p.Enc[0].Name, e.Name)
		}
	}
	switch {
	case aead && ctx == ESP:
		p.Integ = nil
	case aead && ctx == IKE:
		if len(p.PRF) == 0 {
			// charon maps integrity algorithms in an AEAD IKE proposal to PRFs
			for _, i := range p.Integ {
				p.PRF = appendUnique(p.PRF, byName["prf"+i.Name])
			}
		}
		p.Integ = nil
		if len(p.PRF) == 0 {
			return p, fmt.Errorf("IKE proposal %q uses AEAD encryption and needs a PRF (e.g. %s-prfsha256-...)", s, p.Enc[0].Name)
		}
	default:
		if len(p.Integ) == 0 {
			return p, fmt.Errorf("proposal %q has classic encryption (%s) and no integrity algorithm", s, p.Enc[0].Name)
		}
		if ctx == IKE && len(p.PRF) == 0 {
			for _, i := range p.Integ {
				p.PRF = appendUnique(p.PRF, byName["prf"+i.Name])
			}
		}
	}
	if ctx == IKE && len(p.DH) == 0 {
		return p, fmt.Errorf("IKE proposal %q has no DH group", s)
	}
	return p, nil
}

func appendUnique(l []*Algorithm, a *Algorithm) []*Algorithm {
	if slices.Contains(l, a) {
		return l
	}
	return append(l, a)
}

// String writes the proposal in strongSwan notation: encryption, integrity, PRF (left out of
// a classic IKE proposal whose PRFs are its integrity algorithms' hashes, as strongSwan
// derives them), DH groups.
func (p Proposal) String(ctx Context) string {
	var parts []string
	for _, a := range p.Enc {
		parts = append(parts, a.Name)
	}
	for _, a := range p.Integ {
		parts = append(parts, a.Name)
	}
	if ctx == IKE && !p.prfImplied() {
		for _, a := range p.PRF {
			parts = append(parts, a.Name)
		}
	}
	for _, a := range p.DH {
		parts = append(parts, a.Name)
	}
	return strings.Join(parts, "-")
}

// prfImplied: the PRFs are exactly those strongSwan derives from the integrity algorithms.
func (p Proposal) prfImplied() bool {
	if p.AEAD() || len(p.PRF) != len(p.Integ) {
		return false
	}
	for i := range p.PRF {
		if p.PRF[i] != byName["prf"+p.Integ[i].Name] {
			return false
		}
	}
	return true
}

// hashOf is the integrity algorithm whose hash a PRF uses.
func hashOf(prf *Algorithm) *Algorithm { return byName[strings.TrimPrefix(prf.Name, "prf")] }

// vendorName is a vendor's name for a in ctx ("" when the vendor cannot do it).
func vendorName(vendor string, ctx Context, a *Algorithm) string {
	n := a.vendor[vendor]
	if ctx == IKE {
		return n.ike
	}
	return n.esp
}
