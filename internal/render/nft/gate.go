package nft

import (
	"fmt"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// GateTable is the table of the startup gate.
const GateTable = "bnerd_vpn_gate"

// OpenStartupGate removes the startup gate (and does nothing where there is none).
const OpenStartupGate = "table " + Family + " " + GateTable + " {}\ndelete table " + Family + " " + GateTable + "\n"

// RemoveRuleset deletes the gateway's table (and does nothing where there is none).
const RemoveRuleset = "table " + Family + " " + Table + " {}\ndelete table " + Family + " " + Table + "\n"

// StartupGate is what the gateway agent's init step loads after the ruleset for an IPsec
// gateway: a table dropping inbound IKE (UDP 500 and 4500) until the agent has loaded the peers
// into charon and removed it (OpenStartupGate). Without it, a client's device that reaches a
// freshly started charon first is refused with NO_PROPOSAL_CHOSEN, and many devices then stop
// trying; with it, the device's next retransmission is answered. WireGuard gateways need none
// (the agent configures the device before it answers): "".
func StartupGate(gw *model.Gateway) string {
	if gw.Protocol != model.ProtocolIPsec {
		return ""
	}
	return fmt.Sprintf(`# Startup gate of VPN gateway %s/%s: inbound IKE waits until the gateway agent has loaded the
# peers into charon, then the agent deletes this table.
%s
table %s %s {
	chain input {
		type filter hook input priority filter - 10; policy accept;
		udp dport { 500, 4500 } counter drop
	}
}
`, gw.Namespace, gw.Name, OpenStartupGate, Family, GateTable)
}
