package netns

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// TCPResult is one iperf3 TCP test as its client reported it.
type TCPResult struct {
	// Sent and Received are the bytes of the test (omitted seconds excluded).
	Sent, Received int64
	// BitsPerSecond is the rate the receiver measured.
	BitsPerSecond float64
	// MSS is the client's TCP maximum segment size on the test's control connection when the
	// test started (iperf3's tcp_mss_default): what the SYNs' MSS options agreed after any
	// clamp on the path, not what path MTU discovery found later.
	MSS int
}

// Mbits is the receiver's rate in Mbit/s.
func (r TCPResult) Mbits() float64 { return r.BitsPerSecond / 1e6 }

// Iperf3 runs an iperf3 TCP client in the namespace against server (an iperf3 -s) with args
// (e.g. "-t", "2", "-O", "1" for a timed test, "-n", "8M", "-R" for a fixed download) and
// returns what it reported. A test that fails (exit status, or an error in its report) is
// retried for up to 10 s (a tunnel that is just coming up); one that starts but does not
// finish within CommandTimeout is an error.
func (n *NS) Iperf3(server string, args ...string) (TCPResult, error) {
	var res TCPResult
	err := Eventually(10*time.Second, func() error {
		out, stderr, err := n.Exec("", append([]string{"iperf3", "-c", server, "-J", "--connect-timeout", "1000"}, args...)...)
		if err != nil || iperfError(out) != "" {
			return fmt.Errorf("iperf3 -c %s %s: %v: %s%s", server, strings.Join(args, " "), err, stderr, iperfError(out))
		}
		res, err = parseIperf3(out)
		return err
	})
	return res, err
}

func parseIperf3(out string) (TCPResult, error) {
	var res struct {
		Start struct {
			MSS int `json:"tcp_mss_default"`
		} `json:"start"`
		End struct {
			SumSent struct {
				Bytes int64 `json:"bytes"`
			} `json:"sum_sent"`
			SumReceived struct {
				Bytes         int64   `json:"bytes"`
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return TCPResult{}, fmt.Errorf("iperf3 output: %v\n%s", err, out)
	}
	return TCPResult{Sent: res.End.SumSent.Bytes, Received: res.End.SumReceived.Bytes,
		BitsPerSecond: res.End.SumReceived.BitsPerSecond, MSS: res.Start.MSS}, nil
}

// iperfError is the "error" field of iperf3's JSON output, if any.
func iperfError(out string) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(out), &e) == nil && e.Error != "" {
		return e.Error
	}
	return ""
}

// IPStats returns the namespace's IPv4 counters from /proc/net/snmp (its "Ip:" lines), keyed
// by name: FragCreates (fragments made here) and ReasmReqds (fragments received here) count IP
// fragmentation, FragFails the packets dropped here because they were too big for the next
// link and carried DF (each answered by an ICMP "fragmentation needed": path MTU discovery at
// work, or a black hole where that ICMP is lost).
func (n *NS) IPStats() (map[string]int64, error) {
	out, err := n.Run("cat", "/proc/net/snmp")
	if err != nil {
		return nil, fmt.Errorf("%s: /proc/net/snmp: %v: %s", n.Name, err, out)
	}
	var names, values []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "Ip:" {
			continue
		}
		if names == nil {
			names = f[1:]
		} else {
			values = f[1:]
		}
	}
	if len(names) == 0 || len(names) != len(values) {
		return nil, fmt.Errorf("%s: no Ip: counters in /proc/net/snmp:\n%s", n.Name, out)
	}
	stats := make(map[string]int64, len(names))
	for i, name := range names {
		v, err := strconv.ParseInt(values[i], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: /proc/net/snmp Ip %s = %q", n.Name, name, values[i])
		}
		stats[name] = v
	}
	return stats, nil
}

// Fragments is the number of IP fragments made or received (FragCreates + ReasmReqds of
// IPStats).
func Fragments(stats map[string]int64) int64 {
	return stats["FragCreates"] + stats["ReasmReqds"]
}
