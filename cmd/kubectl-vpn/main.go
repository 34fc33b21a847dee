// Command kubectl-vpn is the engineer's kubectl plugin for bnerd-vpn-operator: on PATH it runs
// as `kubectl vpn ...`. It writes a client device's configuration for a VPNPeer (peer-config),
// turns a parameter sheet into VPNGateway/VPNPeer/Secret manifests (import), shows the gateways
// (status), judges them (diagnose) and moves a legacy IPsecGateway (migrate). It talks to the
// API server only; it links none of the operator's reconcilers or cloud clients. This package
// is the commands' flags and arguments; what they do is in internal/kubectlvpn.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// version, when set at link time (-X main.version=...), overrides the shared version
// (internal/version: its own -X variable, else the build's VCS information). Kept so that
// builds passing -X main.version keep working.
var version string

func main() {
	cmd := newRootCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
}
