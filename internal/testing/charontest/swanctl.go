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
	// ChildPerTS (the local end): one child per local traffic selector, "net0", "net1", ...,
	// as FortiGate, PAN-OS and MikroTik configure phase 2; otherwise one child "net" for all.
	ChildPerTS bool
}

// PSKConf is a minimal swanctl.conf, as an engineer would write by hand: one IKEv2 connection
// "gw" from local to remote authenticated by psk (AES-256-GCM, ECP-256, DPD every second, no
// MOBIKE), one tunnel-mode child "net" between the ends' traffic selectors. The initiator
// starts it and restarts it on DPD; the other end only answers.
func PSKConf(local, remote End, psk string, initiator bool) string {
	return PSKConfWith(local, remote, psk, initiator, ConnOptions{})
}

// ConnOptions are a connection's IKE version (0: 2) and its rekey and reauthentication times;
// a zero time leaves charon's default (IKE rekey 4 h, CHILD rekey 1 h, no reauthentication). A
// time that is set rekeys exactly then (rand_time 0).
type ConnOptions struct {
	IKEVersion                   int
	IKERekey, ChildRekey, Reauth time.Duration
}

func (lt ConnOptions) version() int {
	if lt.IKEVersion == 0 {
		return 2
	}
	return lt.IKEVersion
}

// ikeProposal is AES-256-GCM with ECP-256 for IKEv2; IKEv1 SAs have no AEAD: AES-256 with
// SHA-256 then.
func (lt ConnOptions) ikeProposal() string {
	if lt.version() == 1 {
		return IKEv1Proposal
	}
	return "aes256gcm16-prfsha256-ecp256"
}

// IKEv1Proposal is PSKConfWith's IKE proposal for IKEv1.
const IKEv1Proposal = "aes256-sha256-ecp256"

func (lt ConnOptions) ike() string {
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

func (lt ConnOptions) child() string {
	if lt.ChildRekey <= 0 {
		return ""
	}
	return fmt.Sprintf("        rekey_time = %ds\n        rand_time = 0s\n", int(lt.ChildRekey.Seconds()))
}

// PSKConfWith is PSKConf with the connection's options.
func PSKConfWith(local, remote End, psk string, initiator bool, lt ConnOptions) string {
	start, dpd := "none", "clear"
	if initiator {
		start, dpd = "start", "restart"
	}
	return `connections {
  gw {
    version = ` + fmt.Sprint(lt.version()) + `
    local_addrs = ` + local.Addr.String() + `
    remote_addrs = ` + remote.Addr.String() + `
    proposals = ` + lt.ikeProposal() + `
    dpd_delay = 1s
    mobike = no
` + lt.ike() + `    local { auth = psk
            id = ` + local.ID + ` }
    remote { auth = psk
             id = ` + remote.ID + ` }
    children {
` + children(local, remote, lt, start, dpd) + `    }
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

func children(local, remote End, lt ConnOptions, start, dpd string) string {
	one := func(name string, ts []netip.Prefix) string {
		return `      ` + name + ` {
        local_ts = ` + prefixList(ts) + `
        remote_ts = ` + prefixList(remote.TS) + `
        esp_proposals = aes256gcm16-ecp256
` + lt.child() + `        start_action = ` + start + `
        dpd_action = ` + dpd + `
      }
`
	}
	if !local.ChildPerTS {
		return one("net", local.TS)
	}
	var b strings.Builder
	for i, ts := range local.TS {
		b.WriteString(one(fmt.Sprintf("net%d", i), []netip.Prefix{ts}))
	}
	return b.String()
}

func prefixList(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
