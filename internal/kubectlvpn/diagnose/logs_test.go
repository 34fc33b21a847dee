package diagnose

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/deviceconfig"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gatewaypod"
)

func TestLogFilterNeverPrintsSecrets(t *testing.T) {
	base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	charon, dropped := parseCharon(splitLog(gatewaypod.Log(base, gatewaypod.CharonSecretLines()...)))
	var out strings.Builder
	for _, e := range charon {
		out.WriteString(e.String() + "\n")
	}
	if dropped != len(gatewaypod.CharonSecretLines()) {
		t.Errorf("charon: %d lines dropped, want all %d; kept %v", dropped, len(gatewaypod.CharonSecretLines()), charon)
	}
	agent, _ := parseAgent(splitLog(gatewaypod.Log(base, gatewaypod.AgentSecretLines()...)))
	for _, e := range agent {
		out.WriteString(e.String() + "\n")
	}
	if len(agent) != 4 {
		t.Errorf("agent: %d entries, want the 4 error/failure lines (shown without their free text)", len(agent))
	}
	if strings.Contains(out.String(), gatewaypod.SecretValue) || strings.Contains(out.String(), "SuperSecret") {
		t.Fatalf("a secret got through the log filter:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "applying configuration failed; keeping the last good one retryIn=2s") {
		t.Errorf("the known agent error is not shown:\n%s", out.String())
	}

	// and through the whole command: see cmd/kubectl-vpn's TestDiagnoseWithAgent, which feeds the same lines
}

func TestParseCharon(t *testing.T) {
	base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	lines := splitLog(gatewaypod.Log(base,
		`09[NET] <7> received packet: from 198.51.100.26[500] to 192.0.2.1[500] (240 bytes)`,
		`09[ENC] <7> parsed IKE_SA_INIT request 0 [ SA KE No N(NATD_S_IP) N(NATD_D_IP) N(FRAG_SUP) N(HASH_ALG) N(REDIR_SUP) ]`,
		`09[IKE] <7> 198.51.100.26 is initiating an IKE_SA`,
		`09[CFG] <7> received proposals: IKE:AES_CBC_128/HMAC_SHA1_96/PRF_HMAC_SHA1/MODP_1024`,
		`09[CFG] <7> configured proposals: IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/ECP_256, IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048`,
		`09[IKE] <7> received proposals unacceptable`,
		`10[IKE] <mismatch|8> initiating IKE_SA mismatch[8] to 198.51.100.26`,
		`11[IKE] <mismatch|8> received NO_PROPOSAL_CHOSEN notify error`,
		`Jan  1 12:00:00 12[IKE] <hq_site|9> received AUTHENTICATION_FAILED notify error`,
		`13[DMN] Starting IKE charon daemon (strongSwan 5.9.8, Linux 6.1.0, x86_64)`,
		`May 13 11:50:03 intra charon: 12[CFG1] <C1|3> no proposal found`,
	))
	entries, dropped := parseCharon(lines)
	if dropped != 2 {
		t.Errorf("dropped %d, want 2 (the parsed-request and the daemon line)", dropped)
	}
	shapes := []string{}
	for _, e := range entries {
		shapes = append(shapes, e.Shape)
	}
	want := "packet-received remote-initiating proposals-received proposals-configured proposals-unacceptable initiating notify notify no-proposal"
	if strings.Join(shapes, " ") != want {
		t.Errorf("shapes %v\nwant  %s", shapes, want)
	}
	if e := entries[7]; e.Conn != "hq_site" || e.SA != 9 || e.String() != "<hq_site|9> received AUTHENTICATION_FAILED notify error" {
		t.Errorf("entry %+v %q", e, e.String())
	}
	sas := charonSAs(entries)
	if sa := sas[7]; sa.remoteAddr != "198.51.100.26" || sa.packetsFromRemote != 1 || sa.conn != "" {
		t.Errorf("SA 7: %+v", sa)
	}
	if got := peerSAs(sas, "mismatch", "198.51.100.26", "mismatch.acme.example"); len(got) != 2 {
		t.Errorf("mismatch's SAs: %d, want 2 (by address while unnamed, by name)", len(got))
	}
	if got := peerSAs(sas, "hq", "198.51.100.26", "hq.acme.example"); len(got) != 1 {
		t.Errorf("hq's SAs: %d, want 1 (the unnamed one at its address; not mismatch's named one)", len(got))
	}
	if got := peerSAs(sas, "hq.site", "203.0.113.1", "x"); len(got) != 1 || got[0] != sas[9] {
		t.Errorf("hq.site's SAs: %v", got)
	}
}

func TestProposals(t *testing.T) {
	for _, tc := range []struct{ charon, want string }{
		{"IKE:AES_CBC_128/HMAC_SHA1_96/PRF_HMAC_SHA1/MODP_1024", "aes128-sha1-modp1024"},
		{"IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/ECP_256", "aes256gcm16-prfsha256-ecp256"},
		{"IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_384/MODP_2048/ECP_256", "aes256-sha256-prfsha384-modp2048-ecp256"},
		{"ESP:AES_GCM_16_256/NO_EXT_SEQ", "aes256gcm16"},
		{"ESP:AES_CBC_128/HMAC_SHA2_256_128/MODP_2048/EXT_SEQ", "aes128-sha256-modp2048-esn"},
		{"IKE:CHACHA20_POLY1305_256/PRF_HMAC_SHA2_512/CURVE_25519", "chacha20poly1305-prfsha512-curve25519"},
		{"IKE:3DES_CBC/HMAC_MD5_96/PRF_HMAC_MD5/MODP_768, IKE:AES_CTR_128/AES_XCBC_96/PRF_AES128_XCBC/ECP_256_BP",
			"3des-md5-modp768, aes128ctr-aesxcbc-ecp256bp"},
		{"IKE:SOMETHING_NEW/PRF_HMAC_SHA2_256/ML_KEM_768", "somethingnew-prfsha256-mlkem768"},
	} {
		if got := proposalList(deviceconfig.ParseCharonProposals(tc.charon)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.charon, got, tc.want)
		}
	}
	gw := []deviceconfig.Transforms{deviceconfig.ReadProposal("IKE", "aes256gcm16-prfsha256-ecp256"), deviceconfig.ReadProposal("IKE", "aes256-sha2_256-modp2048")}
	if got := proposalList(gw); got != "aes256gcm16-prfsha256-ecp256, aes256-sha256-modp2048" {
		t.Errorf("keyword proposals: %s", got)
	}
	for _, tc := range []struct{ client, want string }{
		{"IKE:AES_CBC_128/HMAC_SHA1_96/PRF_HMAC_SHA1/MODP_1024",
			"no encryption algorithm in common (the client offers aes128); no integrity algorithm in common (the client offers sha1); no PRF in common (the client offers prfsha1); no DH group in common (the client offers modp1024)"},
		{"IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/ECP_384", "no DH group in common (the client offers ecp384)"},
		{"IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/ECP_256", "each algorithm is offered by both, but in no proposal combined as the gateway combines them"},
	} {
		if got := mismatch(deviceconfig.ParseCharonProposals(tc.client), gw); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.client, got, tc.want)
		}
	}
	if w := weakIn(deviceconfig.ParseCharonProposals("IKE:AES_CBC_128/HMAC_SHA1_96/PRF_HMAC_SHA1/MODP_1024")); strings.Join(w, ",") != "sha1,prfsha1,modp1024" {
		t.Errorf("weak: %v", w)
	}
}

// The agent's messages diagnose knows are still the agent's: each one is a string literal in
// internal/agent or cmd/gateway-agent.
func TestAgentMessagesExist(t *testing.T) {
	src := gatewaypod.AgentSource(t, repoRoot)
	for _, m := range agentMessages {
		if !strings.Contains(src, `"`+m+`"`) {
			t.Errorf("the agent no longer logs %q", m)
		}
	}
}

// repoRoot is the repository's top directory, from the package's directory (where go test
// runs its tests).
var repoRoot = filepath.Join("..", "..", "..")
