// Command kubectl-vpn is the engineer's kubectl plugin for bnerd-vpn-operator: on PATH it runs
// as `kubectl vpn ...`. It writes a client device's configuration for a VPNPeer (peer-config)
// and turns a parameter sheet into VPNGateway/VPNPeer/Secret manifests (import). It talks to
// the API server only; it links none of the operator's reconcilers or cloud clients.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// version is set at build time (make kubectl-vpn).
var version = "dev"

func main() {
	cmd := newRootCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
}
