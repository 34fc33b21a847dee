package model

import "time"

// GatewayTerminationGrace is the gateway pod's termination grace period. Normally charon and
// the agent are gone within a second of the pod's deletion; the grace only bounds a slow stop.
const GatewayTerminationGrace = 30 * time.Second

// TeardownWait bounds how long a stopping host-network agent waits for its tunnels to go
// (charon, in its own container, stopping with the pod) before it takes the gateway's ruleset
// and address off the node; tunnels still up after it mean the agent alone is restarting, and
// everything stays. Well inside GatewayTerminationGrace, so that on a loaded node a charon slow
// to stop does not leave the ruleset behind (the kubelet kills both at the grace's end).
const TeardownWait = GatewayTerminationGrace - 5*time.Second
