package deviceconfig

import (
	"regexp"
	"slices"
	"strings"
)

// Transforms is one proposal as strongSwan negotiates it, without the device configurations'
// rules: what a client proposed (charon's log) or what a gateway is configured with. Each
// algorithm is its strongSwan keyword, the table's canonical one where the table has the
// algorithm; one the table lacks keeps the keyword it was read as.
type Transforms struct {
	// Protocol is IKE, ESP or AH.
	Protocol            string
	Enc, Integ, PRF, DH []string
	// ExtendedSequenceNumbers: esn.
	ExtendedSequenceNumbers bool
}

// ParseCharonProposals reads a list of proposals as charon's log prints them
// ("IKE:AES_CBC_128/HMAC_SHA1_96/PRF_HMAC_SHA1/MODP_1024, IKE:..."). A transform name
// charonTransforms does not know becomes its name in lower case without '_', of the kind its
// prefix says.
func ParseCharonProposals(s string) []Transforms {
	var out []Transforms
	for _, p := range strings.Split(s, ", ") {
		proto, rest, ok := strings.Cut(strings.TrimSpace(p), ":")
		if !ok {
			continue
		}
		tr := Transforms{Protocol: proto}
		for _, t := range strings.Split(rest, "/") {
			switch t {
			case "EXT_SEQ":
				tr.ExtendedSequenceNumbers = true
				continue
			case "NO_EXT_SEQ", "MODP_NONE":
				continue
			}
			kind, kw, matched := Encryption, "", false
			for _, ct := range charonTransforms {
				if m := ct.re.FindStringSubmatchIndex(t); m != nil {
					kind, kw, matched = ct.kind, string(ct.re.ExpandString(nil, ct.kw, t, m)), true
					break
				}
			}
			if !matched {
				kind, kw = charonKind(t), strings.ToLower(strings.ReplaceAll(t, "_", ""))
			}
			tr.add(kind, canonicalKeyword(kw))
		}
		out = append(out, tr)
	}
	return out
}

// charonKind is the kind of a transform charonTransforms does not know, by its prefix.
func charonKind(name string) Kind {
	switch {
	case strings.HasPrefix(name, "PRF_"):
		return PRF
	case strings.HasPrefix(name, "HMAC_"):
		return Integrity
	case strings.HasPrefix(name, "MODP_"), strings.HasPrefix(name, "ECP_"),
		strings.HasPrefix(name, "CURVE_"), strings.HasPrefix(name, "ML_KEM"):
		return DH
	}
	return Encryption
}

// icvBits is an AES-GCM or AES-CCM keyword with its ICV in bits (aes256gcm128), which
// strongSwan reads as the keyword with the ICV in octets (aes256gcm16).
var icvBits = regexp.MustCompile(`^(aes\d+)(gcm|ccm)(64|96|128)$`)

// canonicalKeyword is the keyword the table names the algorithm by (its synonyms folded),
// else the keyword as strongSwan reads it.
func canonicalKeyword(kw string) string {
	if m := icvBits.FindStringSubmatch(kw); m != nil {
		kw = m[1] + m[2] + map[string]string{"64": "8", "96": "12", "128": "16"}[m[3]]
	}
	if a := byName[kw]; a != nil {
		return a.Name
	}
	if name, ok := synonyms[kw]; ok {
		return name
	}
	return kw
}

// keywordKind is the kind of a keyword: the table's, else what its prefix says.
func keywordKind(kw string) Kind {
	if a := byName[kw]; a != nil {
		return a.Kind
	}
	switch {
	case strings.HasPrefix(kw, "prf"):
		return PRF
	case strings.HasPrefix(kw, "modp"), strings.HasPrefix(kw, "ecp"), strings.HasPrefix(kw, "curve"), strings.HasPrefix(kw, "mlkem"):
		return DH
	case strings.HasPrefix(kw, "sha"), strings.HasPrefix(kw, "md5"), kw == "aesxcbc", kw == "aescmac":
		return Integrity
	}
	return Encryption
}

// ReadProposal reads a proposal in strongSwan notation (aes256gcm16-prfsha256-ecp256) for
// protocol IKE or ESP as charon does, whatever algorithms it names: an IKE proposal without a
// PRF takes its integrity algorithms' hashes as PRFs, and AEAD encryption drops the integrity
// algorithms. ParseProposal is the same reading with the device configurations' rules.
func ReadProposal(protocol, s string) Transforms {
	tr := Transforms{Protocol: protocol}
	for _, t := range strings.Split(strings.ToLower(strings.TrimSpace(s)), "-") {
		switch t {
		case "esn":
			tr.ExtendedSequenceNumbers = true
			continue
		case "noesn", "":
			continue
		}
		kw := canonicalKeyword(t)
		tr.add(keywordKind(kw), kw)
	}
	if protocol == "IKE" && len(tr.PRF) == 0 {
		for _, i := range tr.Integ {
			tr.PRF = appendNewName(tr.PRF, "prf"+i)
		}
	}
	if tr.AEAD() {
		tr.Integ = nil
	}
	return tr
}

func (t *Transforms) add(k Kind, kw string) {
	switch k {
	case Encryption:
		t.Enc = appendNewName(t.Enc, kw)
	case Integrity:
		t.Integ = appendNewName(t.Integ, kw)
	case PRF:
		t.PRF = appendNewName(t.PRF, kw)
	case DH:
		t.DH = appendNewName(t.DH, kw)
	}
}

func appendNewName(l []string, s string) []string {
	if slices.Contains(l, s) {
		return l
	}
	return append(l, s)
}

// AEAD reports whether the proposal's encryption is authenticated.
func (t Transforms) AEAD() bool {
	for _, e := range t.Enc {
		if a := byName[e]; a != nil {
			if a.AEAD {
				return true
			}
			continue
		}
		if strings.Contains(e, "gcm") || strings.Contains(e, "ccm") {
			return true
		}
	}
	return false
}

// Of is the proposal's algorithms of one kind.
func (t Transforms) Of(k Kind) []string {
	switch k {
	case Encryption:
		return t.Enc
	case Integrity:
		return t.Integ
	case PRF:
		return t.PRF
	}
	return t.DH
}

// String is the proposal in strongSwan notation; the PRFs are left out of a classic proposal
// whose PRFs are its integrity algorithms' (as one writes it in swanctl.conf).
func (t Transforms) String() string {
	parts := slices.Clone(t.Enc)
	parts = append(parts, t.Integ...)
	implied := !t.AEAD() && len(t.PRF) == len(t.Integ)
	for i := range t.PRF {
		if implied && t.PRF[i] != "prf"+t.Integ[i] {
			implied = false
		}
	}
	if !implied {
		parts = append(parts, t.PRF...)
	}
	parts = append(parts, t.DH...)
	if t.ExtendedSequenceNumbers {
		parts = append(parts, "esn")
	}
	return strings.Join(parts, "-")
}
