package charontest

import (
	"net/netip"
	"strings"
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
    local { auth = psk
            id = ` + local.ID + ` }
    remote { auth = psk
             id = ` + remote.ID + ` }
    children {
      net {
        local_ts = ` + prefixList(local.TS) + `
        remote_ts = ` + prefixList(remote.TS) + `
        esp_proposals = aes256gcm16-ecp256
        start_action = ` + start + `
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
