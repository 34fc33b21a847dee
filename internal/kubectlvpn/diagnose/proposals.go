package main

import (
	"regexp"
	"slices"
	"strings"
)

// swanProposal is one IKE or ESP proposal split into its transforms, in strongSwan's keywords
// (aes256gcm16, sha256, prfsha256, ecp256), whichever notation it was read from: charon's log
// (IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/ECP_256) or a configuration (aes256gcm16-prfsha256-ecp256).
type swanProposal struct {
	Protocol             string // IKE, ESP or AH
	Enc, Integ, PRF, DH  []string
	ExtendedSequenceNums bool
}

// keyword kinds
const (
	kEnc = iota
	kInteg
	kPRF
	kDH
	kESN
	kSkip
)

// charonTransforms map charon's transform names (as its log prints proposals) to keywords.
var charonTransforms = []struct {
	re   *regexp.Regexp
	kind int
	kw   string // $1, $2 replaced by the captures
}{
	{regexp.MustCompile(`^AES_CBC_(\d+)$`), kEnc, "aes${1}"},
	{regexp.MustCompile(`^AES_GCM_(8|12|16)_(\d+)$`), kEnc, "aes${2}gcm${1}"},
	{regexp.MustCompile(`^AES_CCM_(8|12|16)_(\d+)$`), kEnc, "aes${2}ccm${1}"},
	{regexp.MustCompile(`^AES_CTR_(\d+)$`), kEnc, "aes${1}ctr"},
	{regexp.MustCompile(`^CAMELLIA_CBC_(\d+)$`), kEnc, "camellia${1}"},
	{regexp.MustCompile(`^CHACHA20_POLY1305(?:_256)?$`), kEnc, "chacha20poly1305"},
	{regexp.MustCompile(`^3DES_CBC$`), kEnc, "3des"},
	{regexp.MustCompile(`^DES_CBC$`), kEnc, "des"},
	{regexp.MustCompile(`^BLOWFISH_CBC_(\d+)$`), kEnc, "blowfish${1}"},
	{regexp.MustCompile(`^CAST_CBC(?:_\d+)?$`), kEnc, "cast128"},
	{regexp.MustCompile(`^NULL$`), kEnc, "null"},
	{regexp.MustCompile(`^HMAC_MD5_96$`), kInteg, "md5"},
	{regexp.MustCompile(`^HMAC_SHA1_96$`), kInteg, "sha1"},
	{regexp.MustCompile(`^HMAC_SHA1_160$`), kInteg, "sha1_160"},
	{regexp.MustCompile(`^HMAC_SHA2_256_128$`), kInteg, "sha256"},
	{regexp.MustCompile(`^HMAC_SHA2_256_96$`), kInteg, "sha256_96"},
	{regexp.MustCompile(`^HMAC_SHA2_384_192$`), kInteg, "sha384"},
	{regexp.MustCompile(`^HMAC_SHA2_512_256$`), kInteg, "sha512"},
	{regexp.MustCompile(`^AES_XCBC_96$`), kInteg, "aesxcbc"},
	{regexp.MustCompile(`^AES_CMAC_96$`), kInteg, "aescmac"},
	{regexp.MustCompile(`^PRF_HMAC_MD5$`), kPRF, "prfmd5"},
	{regexp.MustCompile(`^PRF_HMAC_SHA1$`), kPRF, "prfsha1"},
	{regexp.MustCompile(`^PRF_HMAC_SHA2_(256|384|512)$`), kPRF, "prfsha${1}"},
	{regexp.MustCompile(`^PRF_AES128_XCBC$`), kPRF, "prfaesxcbc"},
	{regexp.MustCompile(`^PRF_AES128_CMAC$`), kPRF, "prfaescmac"},
	{regexp.MustCompile(`^MODP_(\d+)$`), kDH, "modp${1}"},
	{regexp.MustCompile(`^MODP_(\d+)_(\d+)$`), kDH, "modp${1}s${2}"},
	{regexp.MustCompile(`^ECP_(\d+)$`), kDH, "ecp${1}"},
	{regexp.MustCompile(`^ECP_(\d+)_BP$`), kDH, "ecp${1}bp"},
	{regexp.MustCompile(`^CURVE_(25519|448)$`), kDH, "curve${1}"},
	{regexp.MustCompile(`^MODP_NONE$`), kSkip, ""},
	{regexp.MustCompile(`^NO_EXT_SEQ$`), kSkip, ""},
	{regexp.MustCompile(`^EXT_SEQ$`), kESN, "esn"},
}

// parseCharonProposals reads charon's "%#P" list: "IKE:AES_CBC_128/HMAC_SHA1_96/..., IKE:...".
func parseCharonProposals(s string) []swanProposal {
	var out []swanProposal
	for _, p := range strings.Split(s, ", ") {
		proto, rest, ok := strings.Cut(strings.TrimSpace(p), ":")
		if !ok {
			continue
		}
		sp := swanProposal{Protocol: proto}
		for _, t := range strings.Split(rest, "/") {
			kind, kw := kSkip, ""
			matched := false
			for _, ct := range charonTransforms {
				if m := ct.re.FindStringSubmatchIndex(t); m != nil {
					kind, kw, matched = ct.kind, string(ct.re.ExpandString(nil, ct.kw, t, m)), true
					break
				}
			}
			if !matched { // a transform this table lacks: its name, lower case
				kind, kw = guessKind(t), strings.ToLower(strings.ReplaceAll(t, "_", ""))
			}
			sp.add(kind, kw)
		}
		out = append(out, sp)
	}
	return out
}

func guessKind(charonName string) int {
	switch {
	case strings.HasPrefix(charonName, "PRF_"):
		return kPRF
	case strings.HasPrefix(charonName, "HMAC_"):
		return kInteg
	case strings.HasPrefix(charonName, "MODP_"), strings.HasPrefix(charonName, "ECP_"),
		strings.HasPrefix(charonName, "CURVE_"), strings.HasPrefix(charonName, "ML_KEM"):
		return kDH
	}
	return kEnc
}

func (p *swanProposal) add(kind int, kw string) {
	switch kind {
	case kEnc:
		p.Enc = appendNew(p.Enc, kw)
	case kInteg:
		p.Integ = appendNew(p.Integ, kw)
	case kPRF:
		p.PRF = appendNew(p.PRF, kw)
	case kDH:
		p.DH = appendNew(p.DH, kw)
	case kESN:
		p.ExtendedSequenceNums = true
	}
}

func appendNew(l []string, s string) []string {
	if slices.Contains(l, s) {
		return l
	}
	return append(l, s)
}

// keyword synonyms strongSwan accepts, folded to the names charon's log translates to.
var keywordSynonyms = map[string]string{
	"aes": "aes128", "sha": "sha1", "sha1_96": "sha1",
	"sha2_256": "sha256", "sha256_128": "sha256", "sha2_384": "sha384", "sha384_192": "sha384",
	"sha2_512": "sha512", "sha512_256": "sha512", "prfsha2_256": "prfsha256", "prfsha2_384": "prfsha384",
	"prfsha2_512": "prfsha512", "x25519": "curve25519", "x448": "curve448",
}

var gcmICV = regexp.MustCompile(`^(aes\d+)(gcm|ccm)(64|96|128)$`)

// parseKeywordProposal reads a proposal in strongSwan's configuration notation.
func parseKeywordProposal(protocol, s string) swanProposal {
	p := swanProposal{Protocol: protocol}
	for _, t := range strings.Split(strings.ToLower(strings.TrimSpace(s)), "-") {
		if v, ok := keywordSynonyms[t]; ok {
			t = v
		}
		if m := gcmICV.FindStringSubmatch(t); m != nil {
			t = m[1] + m[2] + map[string]string{"64": "8", "96": "12", "128": "16"}[m[3]]
		}
		switch {
		case t == "esn":
			p.ExtendedSequenceNums = true
		case t == "noesn" || t == "":
		case strings.HasPrefix(t, "prf"):
			p.PRF = appendNew(p.PRF, t)
		case strings.HasPrefix(t, "modp"), strings.HasPrefix(t, "ecp"), strings.HasPrefix(t, "curve"), strings.HasPrefix(t, "mlkem"):
			p.DH = appendNew(p.DH, t)
		case strings.HasPrefix(t, "sha"), strings.HasPrefix(t, "md5"), t == "aesxcbc", t == "aescmac":
			p.Integ = appendNew(p.Integ, t)
		default:
			p.Enc = appendNew(p.Enc, t)
		}
	}
	if p.Protocol == "IKE" && len(p.PRF) == 0 {
		// strongSwan derives the PRFs from the integrity algorithms
		for _, i := range p.Integ {
			p.PRF = appendNew(p.PRF, "prf"+i)
		}
	}
	if p.aead() {
		p.Integ = nil
	}
	return p
}

func (p swanProposal) aead() bool {
	for _, e := range p.Enc {
		if strings.Contains(e, "gcm") || strings.Contains(e, "ccm") || e == "chacha20poly1305" {
			return true
		}
	}
	return false
}

// String is the proposal in strongSwan's keywords; the PRF is left out of a classic IKE
// proposal whose PRFs are its integrity algorithms' (as one writes it in swanctl.conf).
func (p swanProposal) String() string {
	parts := slices.Clone(p.Enc)
	parts = append(parts, p.Integ...)
	implied := !p.aead() && len(p.PRF) == len(p.Integ)
	for i := range p.PRF {
		if implied && p.PRF[i] != "prf"+p.Integ[i] {
			implied = false
		}
	}
	if !implied {
		parts = append(parts, p.PRF...)
	}
	parts = append(parts, p.DH...)
	if p.ExtendedSequenceNums {
		parts = append(parts, "esn")
	}
	return strings.Join(parts, "-")
}

func proposalList(ps []swanProposal) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// weakKeywords are algorithms a gateway should not be made to accept.
var weakKeywords = map[string]bool{
	"des": true, "3des": true, "null": true, "md5": true, "prfmd5": true, "modp768": true,
	"modp1024": true, "modp1536": true, "modp1024s160": true, "sha1": true, "prfsha1": true,
	"blowfish128": true, "cast128": true,
}

// weakIn lists the weak algorithms of the proposals.
func weakIn(ps []swanProposal) []string {
	var out []string
	for _, p := range ps {
		for _, l := range [][]string{p.Enc, p.Integ, p.PRF, p.DH} {
			for _, a := range l {
				if weakKeywords[a] {
					out = appendNew(out, a)
				}
			}
		}
	}
	return out
}

// mismatch names what the client's proposals have in common with the gateway's by transform,
// i.e. why none of them matched: e.g. "no DH group in common (the client offers modp1024)".
func mismatch(client, gateway []swanProposal) string {
	type kind struct {
		name string
		get  func(swanProposal) []string
	}
	kinds := []kind{
		{"encryption algorithm", func(p swanProposal) []string { return p.Enc }},
		{"integrity algorithm", func(p swanProposal) []string { return p.Integ }},
		{"PRF", func(p swanProposal) []string { return p.PRF }},
		{"DH group", func(p swanProposal) []string { return p.DH }},
	}
	var missing []string
	for _, k := range kinds {
		var c, g []string
		for _, p := range client {
			for _, a := range k.get(p) {
				c = appendNew(c, a)
			}
		}
		for _, p := range gateway {
			for _, a := range k.get(p) {
				g = appendNew(g, a)
			}
		}
		if len(c) == 0 || len(g) == 0 {
			// AEAD has no integrity; a CHILD_SA in IKE_AUTH is proposed without DH groups
			continue
		}
		common := false
		for _, a := range c {
			if slices.Contains(g, a) {
				common = true
			}
		}
		if !common {
			missing = append(missing, "no "+k.name+" in common (the client offers "+strings.Join(c, ", ")+")")
		}
	}
	if len(missing) == 0 {
		return "each algorithm is offered by both, but in no proposal combined as the gateway combines them"
	}
	return strings.Join(missing, "; ")
}
