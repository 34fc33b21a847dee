// Package gatewaypod holds what the tests of kubectl-vpn's readers of a gateway pod share: the
// pod's container logs as the API server returns them (Log), lines charon and the gateway agent
// may write around a pre-shared key, which no output may repeat (CharonSecretLines,
// AgentSecretLines), and the agent's source (AgentSource), in which the tests find each log
// message and metric name the readers know.
//
// Only tests import this package: hack/layout_test.go fails when a shipped binary links it.
package gatewaypod

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Log is a container's log as the API server returns it with timestamps=true: each line
// prefixed with its time in RFC 3339, one second apart from base.
func Log(base time.Time, lines ...string) []byte {
	var b strings.Builder
	for i, l := range lines {
		b.WriteString(base.Add(time.Duration(i) * time.Second).UTC().Format(time.RFC3339Nano))
		b.WriteString(" ")
		b.WriteString(l)
		b.WriteString("\n")
	}
	return []byte(b.String())
}

// SecretValue is the pre-shared key in CharonSecretLines and AgentSecretLines.
const SecretValue = "lab-hq-SuperSecret0123456789"

// CharonSecretLines is what charon may log around a key, at debug levels or by mistake: the key
// as it is or hex-encoded, and SecretValue where charon writes proposals and addresses.
func CharonSecretLines() []string {
	return []string{
		`11[CFG] <hq|9> loaded IKE shared key with id 'hq-psk' for: 'hq.acme.example'`,
		`11[LIB] <hq|9> psk = ` + SecretValue,
		`11[IKE] <hq|9> shared key => 0x` + "6c61622d68712d5375706572536563726574",
		`11[CFG] <hq|9> received proposals: IKE:` + SecretValue,
		`11[CFG] <hq|9> secret: "` + SecretValue + `"`,
		`11[IKE] <9> ` + SecretValue + ` is initiating an IKE_SA`,
		SecretValue,
		`11[CFG] <hq|9> configured proposals: IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048 ` + SecretValue,
	}
}

// AgentSecretLines is what the agent may log around a key by mistake: SecretValue in a
// message, an error, a field, or a panic. Three of the lines are at level error.
func AgentSecretLines() []string {
	return []string{
		`{"level":"error","ts":"2025-01-01T12:00:00Z","msg":"applying configuration failed; keeping the last good one","error":"psk ` + SecretValue + ` rejected","retryIn":"2s"}`,
		`{"level":"error","ts":"2025-01-01T12:00:00Z","msg":"` + SecretValue + ` leaked"}`,
		`{"level":"info","ts":"2025-01-01T12:00:00Z","msg":"tunnel negotiation failed","connection":"hq","state":"AuthFailed","message":"secret ` + SecretValue + `"}`,
		`{"level":"error","ts":"2025-01-01T12:00:00Z","msg":"initiate failed","connection":"hq","state":"` + SecretValue + ` x"}`,
		`panic: ` + SecretValue,
	}
}

// AgentSource is the gateway agent's Go source without its tests (internal/agent and
// cmd/gateway-agent below root, the repository's top directory) as one string: a name the
// agent logs or exports stands in it as a string literal, "name".
func AgentSource(t testing.TB, root string) string {
	t.Helper()
	var src strings.Builder
	for _, dir := range []string{"internal/agent", "cmd/gateway-agent"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			src.Write(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return src.String()
}
