package deviceconfig

import (
	"strings"
	"testing"
)

func TestParseCharonProposals(t *testing.T) {
	for _, tc := range []struct{ charon, want string }{
		{"IKE:AES_CBC_128/HMAC_SHA1_96/PRF_HMAC_SHA1/MODP_1024", "aes128-sha1-modp1024"},
		{"IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/ECP_256", "aes256gcm16-prfsha256-ecp256"},
		{"ESP:AES_GCM_16_256/NO_EXT_SEQ", "aes256gcm16"},
		{"ESP:AES_CBC_128/HMAC_SHA2_256_128/MODP_2048/EXT_SEQ", "aes128-sha256-modp2048-esn"},
		{"IKE:CURVE_448/AES_CCM_12_128/PRF_HMAC_SHA2_384", "aes128ccm12-prfsha384-curve448"},
	} {
		var got []string
		for _, p := range ParseCharonProposals(tc.charon) {
			got = append(got, p.String())
		}
		if strings.Join(got, ", ") != tc.want {
			t.Errorf("%s: %s, want %s", tc.charon, strings.Join(got, ", "), tc.want)
		}
	}
	p := ParseCharonProposals("ESP:AES_CBC_256/HMAC_SHA2_512_256/NO_EXT_SEQ")[0]
	if p.Protocol != "ESP" || strings.Join(p.Of(Encryption), ",") != "aes256" || strings.Join(p.Of(Integrity), ",") != "sha512" || len(p.Of(DH)) != 0 {
		t.Errorf("%+v", p)
	}
}

// A configured proposal reads as charon reads it, strongSwan's synonyms folded into the
// table's names; algorithms the table lacks keep their keyword.
func TestReadProposal(t *testing.T) {
	for _, tc := range []struct{ protocol, in, want string }{
		{"IKE", "aes256gcm16-prfsha256-ecp256", "aes256gcm16-prfsha256-ecp256"},
		{"IKE", "AES256-SHA2_256-MODP2048", "aes256-sha256-modp2048"},
		{"IKE", "aes256gcm128-sha384-x25519", "aes256gcm16-prfsha384-curve25519"},
		{"IKE", "aes-sha-x448", "aes128-sha1-curve448"},
		{"ESP", "aes256gcm16-sha256-ecp256-esn", "aes256gcm16-ecp256-esn"},
		{"ESP", "aes128ccm96-noesn", "aes128ccm12"},
		{"ESP", "3des-md5-modp768", "3des-md5-modp768"},
	} {
		if got := ReadProposal(tc.protocol, tc.in).String(); got != tc.want {
			t.Errorf("%s %q: %s, want %s", tc.protocol, tc.in, got, tc.want)
		}
	}
	// the device configurations read strongSwan's synonyms alike
	if p, err := ParseProposal(IKE, "aes-sha256-modp2048"); err != nil || p.String(IKE) != "aes128-sha256-modp2048" {
		t.Errorf("aes-sha256-modp2048: %q, %v", p.String(IKE), err)
	}
}

// Weak are the table's weak rows and the words the operator refuses; nothing else.
func TestWeakness(t *testing.T) {
	for _, kw := range []string{"sha1", "prfsha1", "modp1024", "modp1536", "des", "3des", "null", "md5", "prfmd5",
		"modp768", "modp1024s160", "blowfish128", "cast128", "aes128gcm8"} {
		if why, weak := Weakness(kw); !weak || why == "" {
			t.Errorf("%s is not weak", kw)
		}
	}
	for _, kw := range []string{"aes128", "aes256gcm16", "sha256", "prfsha256", "modp2048", "ecp256", "curve25519", "camellia128", "somethingnew"} {
		if why, weak := Weakness(kw); weak {
			t.Errorf("%s is weak: %s", kw, why)
		}
	}
	for _, a := range algorithms {
		if why, weak := Weakness(a.Name); weak != (a.Weak != "") || why != a.Weak {
			t.Errorf("%s: Weakness %q %v, row %q", a.Name, why, weak, a.Weak)
		}
	}
}
