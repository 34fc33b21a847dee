package labcloud

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// FaultRequest is the admin API's fault: the cloud answers matching calls with Status
// (5xx, or 409 with an OverQuota body, ...) and/or after Delay (a client timeout) for Window,
// or until DELETE /faults when Window is empty.
type FaultRequest struct {
	// Method ("GET", "POST", ...; empty: any) and Resource (neutronfake's kinds: "ports",
	// "floatingips", "security-groups", "security-group-rules", "tokens", ...; empty: any).
	Method   string `json:"method,omitempty"`
	Resource string `json:"resource,omitempty"`
	Status   int    `json:"status,omitempty"`
	Delay    string `json:"delay,omitempty"`
	Window   string `json:"window,omitempty"`
	// Commit carries a write out and loses its answer.
	Commit bool   `json:"commit,omitempty"`
	Body   string `json:"body,omitempty"`
}

// QuotaRequest limits a resource ("port", "security_group", "security_group_rule",
// "floatingip"); a negative Limit lifts it.
type QuotaRequest struct {
	Resource string `json:"resource"`
	Limit    int    `json:"limit"`
}

// VMPortRequest is a server's NIC as Nova creates it on the VM network: a port named Name with
// device_id ServerID, device_owner compute:nova, and with Trunk the parent port of a trunk of
// its own (a server booted with a trunk port).
type VMPortRequest struct {
	Name     string `json:"name"`
	ServerID string `json:"server_id"`
	Trunk    bool   `json:"trunk"`
}

// State is what GET /state answers: everything the cloud holds.
type State struct {
	Inventory      neutronfake.Inventory       `json:"inventory"`
	Ports          []neutronfake.Port          `json:"ports"`
	FloatingIPs    []neutronfake.FloatingIP    `json:"floatingips"`
	SecurityGroups []neutronfake.SecurityGroup `json:"security_groups"`
	Trunks         []neutronfake.Trunk         `json:"trunks"`
}

// StateOf is everything c holds.
func StateOf(c *neutronfake.Server) State {
	return State{Inventory: c.Inventory(), Ports: c.PortList(), FloatingIPs: c.FloatingIPList(), SecurityGroups: c.SecurityGroupList(), Trunks: c.TrunkList()}
}

// Admin is the lab cloud's control API (served on its own address, never the one the
// operator is given): POST /faults (FaultRequest), DELETE /faults, POST /quota
// (QuotaRequest), POST /vm-ports (VMPortRequest; answers 201 and the port, a
// neutronfake.Port, created on vmNetworkID), GET /state.
func Admin(c *neutronfake.Server, vmNetworkID string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /vm-ports", func(w http.ResponseWriter, r *http.Request) {
		var req VMPortRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Name == "" || req.ServerID == "" {
			http.Error(w, fmt.Sprintf("want {\"name\": ..., \"server_id\": ..., \"trunk\": bool}: %v", err), http.StatusBadRequest)
			return
		}
		p, err := c.AddVMPort(vmNetworkID, req.Name, req.ServerID, req.Trunk)
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(p)
	})
	mux.HandleFunc("POST /faults", func(w http.ResponseWriter, r *http.Request) {
		var req FaultRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f, window, err := req.fault()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		remove := c.Inject(f)
		if window > 0 {
			time.AfterFunc(window, remove)
		}
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("DELETE /faults", func(w http.ResponseWriter, _ *http.Request) {
		c.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /quota", func(w http.ResponseWriter, r *http.Request) {
		var req QuotaRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Resource == "" {
			http.Error(w, fmt.Sprintf("want {\"resource\": ..., \"limit\": n}: %v", err), http.StatusBadRequest)
			return
		}
		c.SetQuota(req.Resource, req.Limit)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(StateOf(c))
	})
	return mux
}

func (req FaultRequest) fault() (neutronfake.Fault, time.Duration, error) {
	f := neutronfake.Fault{Method: strings.ToUpper(req.Method), Resource: req.Resource, Status: req.Status, Count: -1, Commit: req.Commit, Body: req.Body}
	var window time.Duration
	var err error
	if req.Delay != "" {
		if f.Delay, err = time.ParseDuration(req.Delay); err != nil {
			return f, 0, fmt.Errorf("delay: %w", err)
		}
	}
	if req.Window != "" {
		if window, err = time.ParseDuration(req.Window); err != nil {
			return f, 0, fmt.Errorf("window: %w", err)
		}
	}
	if f.Status == 0 && f.Delay == 0 {
		return f, 0, fmt.Errorf("a fault needs a status or a delay")
	}
	if f.Status != 0 && (f.Status < 400 || f.Status > 599) {
		return f, 0, fmt.Errorf("status %d is not an error", f.Status)
	}
	return f, window, nil
}
