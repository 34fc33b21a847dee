package labcloud_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/lab/labcloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

func adminCall(t *testing.T, url, method, path string, body any) int {
	t.Helper()
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	req, err := http.NewRequest(method, url+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}

// The admin API makes the cloud fail for a window (5xx, a timeout, a quota) and the operator's
// provider converges afterwards, leaving nothing behind once the gateway is deleted.
func TestAdminFaultWindows(t *testing.T) {
	c := newLabCloud(t)
	admin := httptest.NewServer(labcloud.Admin(c.Server, c.provNet))
	t.Cleanup(admin.Close)
	baseline := c.Inventory()
	p := c.provider(t)
	req := gatewayRequest()
	ctx := context.Background()

	for _, tc := range []struct {
		name  string
		fault labcloud.FaultRequest
		quota *labcloud.QuotaRequest
		want  string
	}{
		{name: "5xx", fault: labcloud.FaultRequest{Method: "POST", Resource: neutronfake.Ports, Status: 503, Window: "1s"}, want: "503"},
		{name: "timeout", fault: labcloud.FaultRequest{Method: "POST", Resource: neutronfake.SecurityGroups, Delay: "3s", Window: "1s"}, want: "timed out"},
		{name: "quota", quota: &labcloud.QuotaRequest{Resource: "floatingip", Limit: 0}, want: "quota"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.quota != nil {
				if code := adminCall(t, admin.URL, "POST", "/quota", tc.quota); code != http.StatusNoContent {
					t.Fatalf("POST /quota: %d", code)
				}
			} else if code := adminCall(t, admin.URL, "POST", "/faults", tc.fault); code != http.StatusCreated {
				t.Fatalf("POST /faults: %d", code)
			}
			res, err := p.Ensure(ctx, req)
			msg := res.Message
			if err != nil {
				msg += " " + err.Error()
			}
			if res.Ready || !strings.Contains(strings.ToLower(msg), tc.want) {
				t.Fatalf("during the fault: ready=%v %s: %s", res.Ready, res.Reason, msg)
			}
			t.Logf("during the fault: %s: %s", res.Reason, msg)
			if tc.quota != nil {
				tc.quota.Limit = -1
				adminCall(t, admin.URL, "POST", "/quota", tc.quota)
			} // a fault's window ends by itself
			ensureReady(t, p, req)
			if leaks := labcloud.Leaks(labcloud.StateOf(c.Server)); labcloud.Leaked(leaks) != 3 {
				t.Fatalf("a live gateway's port, group and floating IP are not all listed:\n%s", labcloud.LeakTable(leaks))
			}
			if err := p.Delete(ctx, req); err != nil {
				t.Fatal(err)
			}
			c.WaitIdle()
			if err := netns.Eventually(10*time.Second, func() error {
				var st labcloud.State
				resp, err := http.Get(admin.URL + "/state")
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
					return err
				}
				if d := st.Inventory.Sub(baseline); d.Total() != 0 || labcloud.Leaked(labcloud.Leaks(st)) != 0 {
					// a delayed create the client gave up on lands later: the next Delete takes it
					_ = p.Delete(ctx, req)
					return &leak{d}
				}
				t.Logf("after the %s window and the gateway's deletion:\n%s", tc.name, labcloud.LeakTable(labcloud.Leaks(st)))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if code := adminCall(t, admin.URL, "DELETE", "/faults", nil); code != http.StatusNoContent {
		t.Fatalf("DELETE /faults: %d", code)
	}
	if code := adminCall(t, admin.URL, "POST", "/faults", labcloud.FaultRequest{Status: 200}); code != http.StatusBadRequest {
		t.Fatalf("a fault with status 200 was accepted: %d", code)
	}
}

type leak struct{ d neutronfake.Inventory }

func (l *leak) Error() string { return "left behind: " + l.d.String() }

// POST /vm-ports creates a server's NIC as Nova does (device_id the server, compute:nova), as a
// trunk's parent when asked, and answers the port; GET /state lists the trunks.
func TestAdminCreatesVMPorts(t *testing.T) {
	c := newLabCloud(t)
	admin := httptest.NewServer(labcloud.Admin(c.Server, c.provNet))
	t.Cleanup(admin.Close)
	post := func(body string) (int, neutronfake.Port) {
		t.Helper()
		resp, err := http.Post(admin.URL+"/vm-ports", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p neutronfake.Port
		if resp.StatusCode == http.StatusCreated {
			if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, p
	}
	code, node := post(`{"name": "lab-node-2", "server_id": "5ab0de00-0000-4000-8000-000000000002", "trunk": true}`)
	if code != http.StatusCreated || node.DeviceID != "5ab0de00-0000-4000-8000-000000000002" || node.DeviceOwner != "compute:nova" ||
		node.NetworkID != c.provNet || node.TrunkDetails == nil || node.MACAddress == "" || len(node.FixedIPs) != 1 {
		t.Fatalf("POST /vm-ports (trunk): %d %+v", code, node)
	}
	code, vm := post(`{"name": "vm", "server_id": "5ab0de00-0000-4000-8000-0000000000aa"}`)
	if code != http.StatusCreated || vm.TrunkDetails != nil || !vm.PortSecurityEnabled {
		t.Fatalf("POST /vm-ports: %d %+v", code, vm)
	}
	if code, _ := post(`{"name": "no-server"}`); code != http.StatusBadRequest {
		t.Fatalf("POST /vm-ports without a server ID: %d", code)
	}
	resp, err := http.Get(admin.URL + "/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st labcloud.State
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if len(st.Trunks) != 1 || st.Trunks[0].PortID != node.ID || st.Trunks[0].ID != node.TrunkDetails.TrunkID {
		t.Fatalf("GET /state trunks: %+v, want the trunk of port %s", st.Trunks, node.ID)
	}
}
