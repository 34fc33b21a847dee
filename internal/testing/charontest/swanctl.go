package charontest

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// End is one end of a PSK connection: its address, IKE identity and traffic selectors.
type End struct {
	Addr netip.Addr
	ID   string
	TS   []netip.Prefix
}

// PSKConf is a minimal swanctl.conf, as an engineer would write by hand: one IKEv2 connection
// "gw" from local to remote authenticated by psk (AES-256-GCM, ECP-256, DPD every second, no
// MOBIKE), one tunnel-mode child "net" between the ends' traffic selectors. The initiator
// starts it and restarts it on DPD; the other end only answers.
func PSKConf(local, remote End, psk string, initiator bool) string {
	return PSKConfWith(local, remote, psk, initiator, Lifetimes{})
}

// Lifetimes are a connection's rekey and reauthentication times; zero leaves charon's default
// (IKE rekey 4 h, CHILD rekey 1 h, no reauthentication). A time that is set rekeys exactly then
// (rand_time 0).
type Lifetimes struct {
	IKERekey, ChildRekey, Reauth time.Duration
}

func (lt Lifetimes) ike() string {
	var b strings.Builder
	if lt.IKERekey > 0 {
		fmt.Fprintf(&b, "    rekey_time = %ds\n", int(lt.IKERekey.Seconds()))
	}
	if lt.Reauth > 0 {
		fmt.Fprintf(&b, "    reauth_time = %ds\n", int(lt.Reauth.Seconds()))
	}
	if lt.IKERekey > 0 || lt.Reauth > 0 {
		b.WriteString("    rand_time = 0s\n")
	}
	return b.String()
}

func (lt Lifetimes) child() string {
	if lt.ChildRekey <= 0 {
		return ""
	}
	return fmt.Sprintf("        rekey_time = %ds\n        rand_time = 0s\n", int(lt.ChildRekey.Seconds()))
}

// PSKConfWith is PSKConf with lifetimes.
func PSKConfWith(local, remote End, psk string, initiator bool, lt Lifetimes) string {
	start, dpd := "none", "clear"
	if initiator {
		start, dpd = "start", "restart"
	}
	return `connections {
  gw {
    version = 2
    local_addrs = ` + local.Addr.String() + `
    remote_addrs = ` + remote.Addr.String() + `
    proposals = aes256gcm16-prfsha256-ecp256
    dpd_delay = 1s
    mobike = no
` + lt.ike() + `    local { auth = psk
            id = ` + local.ID + ` }
    remote { auth = psk
             id = ` + remote.ID + ` }
    children {
      net {
        local_ts = ` + prefixList(local.TS) + `
        remote_ts = ` + prefixList(remote.TS) + `
        esp_proposals = aes256gcm16-ecp256
` + lt.child() + `        start_action = ` + start + `
        dpd_action = ` + dpd + `
      }
    }
  }
}
secrets {
  ike-gw {
    id-1 = ` + local.ID + `
    id-2 = ` + remote.ID + `
    secret = "` + psk + `"
  }
}
`
}

func prefixList(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
