package firewall

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// nf_tables netlink ABI (linux/netfilter/nfnetlink.h, linux/netfilter/nf_tables.h).
const (
	nfnlSubsysNFTables = 10
	nftMsgNewGen       = 15
	nftMsgGetGen       = 16
	nftaGenID          = 1
	nlaTypeMask        = 0x3fff // NLA_TYPE_MASK: the attribute type without its nested / byte-order flags
)

// KernelGeneration returns the nftables ruleset generation of the calling thread's network
// namespace (NFT_MSG_GETGEN, one netlink round trip): the kernel increments it with every
// committed change to any table of the namespace — a deleted table, `flush ruleset`, one rule
// inserted — so an unchanged generation means an unchanged table, without listing it.
func KernelGeneration() (uint32, error) {
	req := nl.NewNetlinkRequest(nfnlSubsysNFTables<<8|nftMsgGetGen, 0)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: nl.NFNETLINK_V0})
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, nfnlSubsysNFTables<<8|nftMsgNewGen)
	if err != nil {
		return 0, fmt.Errorf("reading the nftables generation: %w", err)
	}
	for _, m := range msgs {
		if len(m) < nl.SizeofNfgenmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofNfgenmsg:])
		if err != nil {
			return 0, fmt.Errorf("reading the nftables generation: %w", err)
		}
		for _, a := range attrs {
			if a.Attr.Type&nlaTypeMask == nftaGenID && len(a.Value) >= 4 {
				return binary.BigEndian.Uint32(a.Value), nil
			}
		}
	}
	return 0, errors.New("reading the nftables generation: no generation in the kernel's answer")
}
