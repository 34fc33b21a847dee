package cluster

import (
	"strings"
	"testing"
	"time"
)

// nodeRoutes is the node's IPv4 main routing table and its policy rules, as text: what a
// host-network gateway must leave alone (its routes into the tunnel live in charon's table 220
// and its WireGuard routes are its own, proto 98).
func nodeRoutes(t *testing.T) string {
	t.Helper()
	routes, err := L.run(10*time.Second, "ip", "-4", "route", "show", "table", "main")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := L.run(10*time.Second, "ip", "-4", "rule", "show")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(routes) + "\n--- rules\n" + strings.TrimSpace(rules)
}

// routesWhileRunning is the node's routing while the lab's host-network gateway runs (read at
// the start of the suite), compared with the routing once it is deleted (step 9).
var routesWhileRunning string

// compareNodeRoutes: the node's routes and rules are the same with and without the gateway.
func compareNodeRoutes(t *testing.T) {
	after := nodeRoutes(t)
	if routesWhileRunning == "" {
		t.Fatal("the routes while the gateway ran were not read")
	}
	if after != routesWhileRunning {
		t.Errorf("the node's routing differs with the host-network gateway running:\n%s\nand after it was deleted:\n%s", routesWhileRunning, after)
		return
	}
	t.Logf("the node's main table and rules are the same with the host-network gateway running and after it was deleted (%d lines)", strings.Count(after, "\n")+1)
}
