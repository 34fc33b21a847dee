package firewall

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// A ruleset change that keeps the table's structure (nft.Diff) is applied as one nf_tables
// netlink transaction of counter and element additions and deletions: the kernel applies a
// batch all or nothing, exactly as it does the `nft -f` of a whole ruleset, and the counters
// that stay are never touched, so they keep counting.
//
// The batch is encoded here rather than with google/nftables: its SetElement (v0.3.0) cannot
// carry NFTA_SET_ELEM_OBJREF, the named counter an element of a counter map selects, and one
// transaction must hold every part of the change. The encoding follows what nft 1.0.6
// itself sends (nft --debug=netlink): a mark (a grant class) in the host's byte order, the
// other types in the network's; for a plain interval set a start element carrying the
// value and an end element (flag INTERVAL_END) at the address after the range; for an
// interval set of concatenations one element with KEY and KEY_END; each field of a
// concatenation padded to 4 bytes.

const (
	nftaSetElemKeyEnd = 10 // NFTA_SET_ELEM_KEY_END (linux 5.6)
	// maxDeltaChanges bounds a delta: a larger one is loaded whole (nft -f), which costs the
	// same whatever the change, and keeps every batch well inside a netlink socket's buffers.
	maxDeltaChanges = 2000
	// maxElementList is the most bytes of elements one message carries (its element list is
	// one attribute, whose length has 16 bits).
	maxElementList = 60000
	// sendBuffer holds a batch of maxDeltaChanges changes (under 100 bytes each, encoded).
	sendBuffer = 1 << 20
)

// fieldType is one data type of a set's key or a map's value.
type fieldType struct {
	name string
	size int // bytes in the kernel's key, before padding
}

var fieldTypes = map[string]fieldType{
	"mark":         {"mark", 4}, // a grant class: host byte order, as nft keeps a mark
	"ipv4_addr":    {"ipv4_addr", 4},
	"inet_proto":   {"inet_proto", 1},
	"inet_service": {"inet_service", 2},
}

// setCodec encodes the elements of one set or map.
type setCodec struct {
	key, value []fieldType
	objref     bool // the value is a named counter
	interval   bool
}

// typeofFields are the key expressions of the renderer's typeof sets (kernel ESP: reqids,
// tunnel_sources) as data types.
var typeofFields = map[string]fieldType{
	"ipsec in reqid": {"reqid", 4},
	"ip saddr":       fieldTypes["ipv4_addr"],
	"ip daddr":       fieldTypes["ipv4_addr"],
}

func newSetCodec(s nft.SetContents) (*setCodec, error) {
	if exprs, ok := strings.CutPrefix(s.Type, "typeof "); ok {
		return newTypeofCodec(s, exprs)
	}
	keyPart, valuePart, isMap := strings.Cut(s.Type, " : ")
	if isMap != s.Map {
		return nil, fmt.Errorf("set %s: type %q", s.Name, s.Type)
	}
	c := &setCodec{interval: s.Interval}
	var err error
	if c.key, err = fields(keyPart); err != nil {
		return nil, fmt.Errorf("set %s: %w", s.Name, err)
	}
	switch {
	case !isMap:
	case valuePart == "counter":
		c.objref = true
	default:
		if c.value, err = fields(valuePart); err != nil {
			return nil, fmt.Errorf("map %s: %w", s.Name, err)
		}
	}
	if c.interval && len(c.key) == 1 && c.key[0].name != "ipv4_addr" {
		return nil, fmt.Errorf("set %s: interval of %s", s.Name, c.key[0].name)
	}
	return c, nil
}

// newTypeofCodec encodes a set keyed by expressions. A reqid is a host-order integer in the
// kernel's key, but nft stores it in network order in an interval set of concatenations (so
// that ranges compare as numbers): what nft --debug=netlink shows it sending. A reqid in any
// other kind of set is not encoded here (a whole load does it).
func newTypeofCodec(s nft.SetContents, exprs string) (*setCodec, error) {
	if s.Map {
		return nil, fmt.Errorf("map %s: typeof maps are not encoded here", s.Name)
	}
	c := &setCodec{interval: s.Interval}
	parts := strings.Split(exprs, " . ")
	for _, e := range parts {
		ft, ok := typeofFields[e]
		if !ok {
			return nil, fmt.Errorf("set %s: expression %q is not encoded here", s.Name, e)
		}
		if ft.name == "reqid" {
			// nft turns host-endian fields big-endian in a concatenated interval set
			// (pipapo matches ranges bytewise) and leaves them as they are elsewhere.
			switch {
			case len(parts) > 1 && s.Interval:
				ft.name = "reqid_be"
			case !s.Interval:
				ft.name = "reqid_host"
			default:
				return nil, fmt.Errorf("set %s: a reqid in this kind of set is not encoded here", s.Name)
			}
		}
		c.key = append(c.key, ft)
	}
	if c.interval && len(c.key) == 1 && c.key[0].name != "ipv4_addr" {
		return nil, fmt.Errorf("set %s: interval of %s", s.Name, c.key[0].name)
	}
	return c, nil
}

func fields(types string) ([]fieldType, error) {
	var out []fieldType
	for _, t := range strings.Split(types, " . ") {
		ft, ok := fieldTypes[t]
		if !ok {
			return nil, fmt.Errorf("data type %q is not encoded here", t)
		}
		out = append(out, ft)
	}
	return out, nil
}

// nlElement is one netlink set element.
type nlElement struct {
	key, keyEnd, value []byte
	objref             string
	flags              uint32
}

// encode returns the netlink elements of one element as the text writes it; for a deletion
// without the value (the kernel finds an element by its key).
func (c *setCodec) encode(elem string, deletion bool) ([]nlElement, error) {
	keyText, valueText, hasValue := strings.Cut(elem, " : ")
	if hasValue != (c.objref || c.value != nil) {
		return nil, fmt.Errorf("element %q: key and value do not fit the type", elem)
	}
	parts := strings.Split(keyText, " . ")
	if len(parts) != len(c.key) {
		return nil, fmt.Errorf("element %q: %d fields, the type has %d", elem, len(parts), len(c.key))
	}
	concat := len(c.key) > 1
	var lo, hi []byte
	for i, p := range parts {
		l, h, err := encodeField(c.key[i], p, c.interval)
		if err != nil {
			return nil, fmt.Errorf("element %q: %w", elem, err)
		}
		lo, hi = appendField(lo, l, concat), appendField(hi, h, concat)
	}
	start := nlElement{key: lo}
	if !deletion && hasValue {
		if c.objref {
			name, err := strconv.Unquote(valueText)
			if err != nil || name == "" {
				return nil, fmt.Errorf("element %q: counter %s is not a quoted name", elem, valueText)
			}
			start.objref = name
		} else {
			vparts := strings.Split(valueText, " . ")
			if len(vparts) != len(c.value) {
				return nil, fmt.Errorf("element %q: %d value fields, the type has %d", elem, len(vparts), len(c.value))
			}
			for i, p := range vparts {
				v, _, err := encodeField(c.value[i], p, false)
				if err != nil {
					return nil, fmt.Errorf("element %q: %w", elem, err)
				}
				start.value = appendField(start.value, v, len(c.value) > 1)
			}
		}
	}
	switch {
	case !c.interval:
		return []nlElement{start}, nil
	case concat:
		start.keyEnd = hi
		return []nlElement{start}, nil
	}
	// A plain interval: the range [lo, hi] is a start element at lo and an end element at
	// hi+1. nft writes a range starting at 0.0.0.0 or ending at 255.255.255.255 otherwise.
	l, h := binary.BigEndian.Uint32(lo), binary.BigEndian.Uint32(hi)
	if l == 0 || h == ^uint32(0) {
		return nil, fmt.Errorf("element %q: a range at the end of the address space is loaded whole", elem)
	}
	return []nlElement{start, {key: binary.BigEndian.AppendUint32(nil, h+1), flags: unix.NFT_SET_ELEM_INTERVAL_END}}, nil
}

// appendField appends one field, padded to 4 bytes in a concatenation.
func appendField(b, field []byte, concat bool) []byte {
	b = append(b, field...)
	if concat {
		for pad := (4 - len(field)%4) % 4; pad > 0; pad-- {
			b = append(b, 0)
		}
	}
	return b
}

// encodeField returns the lowest and highest value a field's text covers (equal but for a
// prefix of an interval set).
func encodeField(t fieldType, text string, interval bool) (lo, hi []byte, err error) {
	switch t.name {
	case "ipv4_addr":
		if strings.Contains(text, "/") {
			p, err := netip.ParsePrefix(text)
			if err != nil || !p.Addr().Is4() || p != p.Masked() || !interval {
				return nil, nil, fmt.Errorf("%q is not an address of this set", text)
			}
			a := p.Addr().As4()
			first := binary.BigEndian.Uint32(a[:])
			last := first | uint32(uint64(1)<<(32-p.Bits())-1)
			return binary.BigEndian.AppendUint32(nil, first), binary.BigEndian.AppendUint32(nil, last), nil
		}
		a, err := netip.ParseAddr(text)
		if err != nil || !a.Is4() {
			return nil, nil, fmt.Errorf("%q is not an IPv4 address", text)
		}
		b := a.As4()
		return b[:], b[:], nil
	case "inet_proto":
		var v uint64
		switch text {
		case "tcp":
			v = unix.IPPROTO_TCP
		case "udp":
			v = unix.IPPROTO_UDP
		default:
			if v, err = strconv.ParseUint(text, 10, 8); err != nil {
				return nil, nil, fmt.Errorf("%q is not a protocol", text)
			}
		}
		return []byte{byte(v)}, []byte{byte(v)}, nil
	case "reqid_host", "reqid_be":
		v, err := strconv.ParseUint(text, 10, 32)
		if err != nil {
			return nil, nil, fmt.Errorf("%q is not a reqid", text)
		}
		var b []byte
		if t.name == "reqid_be" {
			b = binary.BigEndian.AppendUint32(nil, uint32(v))
		} else {
			b = binary.NativeEndian.AppendUint32(nil, uint32(v))
		}
		return b, b, nil
	case "mark":
		v, err := strconv.ParseUint(text, 0, 32)
		if err != nil {
			return nil, nil, fmt.Errorf("%q is not a mark", text)
		}
		b := binary.NativeEndian.AppendUint32(nil, uint32(v))
		return b, b, nil
	case "inet_service":
		v, err := strconv.ParseUint(text, 10, 16)
		if err != nil {
			return nil, nil, fmt.Errorf("%q is not a port", text)
		}
		b := binary.BigEndian.AppendUint16(nil, uint16(v))
		return b, b, nil
	}
	return nil, nil, fmt.Errorf("data type %s is not encoded here", t.name)
}

// deltaMessages are the messages of one transaction applying d to the table (between the
// batch's begin and end): counters created, elements deleted, elements added, counters
// deleted — each step only refers to what exists by then. Every message asks the kernel to
// fail rather than tolerate a surprise: an element or counter added that exists already, one
// deleted that does not.
func deltaMessages(d nft.Delta) ([]netlink.Message, error) {
	var msgs []netlink.Message
	add := func(msgType uint16, flags netlink.HeaderFlags, encode func(ae *netlink.AttributeEncoder)) error {
		ae := netlink.NewAttributeEncoder()
		ae.ByteOrder = binary.BigEndian
		ae.String(unix.NFTA_OBJ_TABLE, nft.Table) // == NFTA_SET_ELEM_LIST_TABLE: both 1
		encode(ae)
		data, err := ae.Encode()
		if err != nil {
			return err
		}
		msgs = append(msgs, netlink.Message{
			Header: netlink.Header{
				Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | msgType),
				Flags: netlink.Request | flags,
			},
			Data: append([]byte{unix.NFPROTO_IPV4, unix.NFNETLINK_V0, 0, 0}, data...),
		})
		return nil
	}
	counter := func(msgType uint16, flags netlink.HeaderFlags, name string) error {
		return add(msgType, flags, func(ae *netlink.AttributeEncoder) {
			ae.String(unix.NFTA_OBJ_NAME, name)
			ae.Uint32(unix.NFTA_OBJ_TYPE, unix.NFT_OBJECT_COUNTER)
			if msgType == unix.NFT_MSG_NEWOBJ {
				ae.Nested(unix.NFTA_OBJ_DATA, func(nae *netlink.AttributeEncoder) error {
					nae.Uint64(unix.NFTA_COUNTER_BYTES, 0)
					nae.Uint64(unix.NFTA_COUNTER_PACKETS, 0)
					return nil
				})
			}
		})
	}
	elements := func(msgType uint16, flags netlink.HeaderFlags, s nft.SetDelta, elems []string) error {
		if len(elems) == 0 {
			return nil
		}
		c, err := newSetCodec(s.Set)
		if err != nil {
			return err
		}
		// The element list is one netlink attribute, at most 64 KiB: elements go in as many
		// messages as they fill, an element's start and end always in the same one.
		var chunks [][]byte
		var chunk []byte
		for _, e := range elems {
			enc, err := c.encode(e, msgType == unix.NFT_MSG_DELSETELEM)
			if err != nil {
				return fmt.Errorf("set %s: %w", s.Set.Name, err)
			}
			b, err := encodeElements(enc)
			if err != nil {
				return fmt.Errorf("set %s: %w", s.Set.Name, err)
			}
			if len(chunk) > 0 && len(chunk)+len(b) > maxElementList {
				chunks, chunk = append(chunks, chunk), nil
			}
			chunk = append(chunk, b...)
		}
		for _, list := range append(chunks, chunk) {
			if err := add(msgType, flags, func(ae *netlink.AttributeEncoder) {
				ae.String(unix.NFTA_SET_ELEM_LIST_SET, s.Set.Name)
				ae.Do(unix.NFTA_SET_ELEM_LIST_ELEMENTS|netlink.Nested, func() ([]byte, error) { return list, nil })
			}); err != nil {
				return err
			}
		}
		return nil
	}

	create := netlink.Create | netlink.Excl
	for _, name := range d.AddCounters {
		if err := counter(unix.NFT_MSG_NEWOBJ, create, name); err != nil {
			return nil, err
		}
	}
	for _, s := range d.Sets {
		if err := elements(unix.NFT_MSG_DELSETELEM, 0, s, s.Del); err != nil {
			return nil, err
		}
	}
	for _, s := range d.Sets {
		if err := elements(unix.NFT_MSG_NEWSETELEM, create, s, s.Add); err != nil {
			return nil, err
		}
	}
	for _, name := range d.DelCounters {
		if err := counter(unix.NFT_MSG_DELOBJ, 0, name); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// encodeElements returns the NFTA_LIST_ELEM attributes of elements, one after the other.
func encodeElements(elements []nlElement) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	for _, e := range elements {
		ae.Nested(unix.NFTA_LIST_ELEM, func(ne *netlink.AttributeEncoder) error {
			if e.flags != 0 {
				ne.Uint32(unix.NFTA_SET_ELEM_FLAGS, e.flags)
			}
			dataValue(ne, unix.NFTA_SET_ELEM_KEY, e.key)
			if e.keyEnd != nil {
				dataValue(ne, nftaSetElemKeyEnd, e.keyEnd)
			}
			if e.value != nil {
				dataValue(ne, unix.NFTA_SET_ELEM_DATA, e.value)
			}
			if e.objref != "" {
				ne.String(unix.NFTA_SET_ELEM_OBJREF, e.objref)
			}
			return nil
		})
	}
	return ae.Encode()
}

func dataValue(ae *netlink.AttributeEncoder, typ uint16, value []byte) {
	ae.Nested(typ, func(nae *netlink.AttributeEncoder) error {
		nae.Bytes(unix.NFTA_DATA_VALUE, value)
		return nil
	})
}

// batch wraps messages into one nf_tables transaction.
func batch(msgs []netlink.Message) []netlink.Message {
	mark := func(t uint16) netlink.Message {
		return netlink.Message{
			Header: netlink.Header{Type: netlink.HeaderType(t), Flags: netlink.Request},
			Data:   []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, unix.NFNL_SUBSYS_NFTABLES}, // res_id, big endian
		}
	}
	out := make([]netlink.Message, 0, len(msgs)+2)
	out = append(out, mark(unix.NFNL_MSG_BATCH_BEGIN))
	out = append(out, msgs...)
	return append(out, mark(unix.NFNL_MSG_BATCH_END))
}

// transact sends msgs as one transaction through conn and waits for the kernel's verdict:
// nil when it committed them all, else the first error it reported (then it committed none).
// Only the last message asks for an acknowledgement: the kernel reports every refused
// message whatever its flags, in order, and the answer to the last one comes after them all —
// one answer for a batch that succeeds, however many elements it holds.
func transact(conn *netlink.Conn, msgs []netlink.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	size := 64
	for i := range msgs {
		msgs[i].Header.Flags &^= netlink.Acknowledge
		size += 20 + len(msgs[i].Data)
	}
	msgs[len(msgs)-1].Header.Flags |= netlink.Acknowledge
	// The batch is one datagram: room for it whatever the host's default (without the
	// privilege to make room, a batch too large fails, and nothing is applied).
	if raw, err := conn.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, max(size, sendBuffer))
		})
	}
	sent, err := conn.SendMessages(batch(msgs))
	if err != nil {
		return fmt.Errorf("sending the nftables batch: %w", err)
	}
	last := sent[len(sent)-2].Header.Sequence // the last message before the batch's end
	for {
		replies, err := conn.Receive()
		if err != nil {
			var op *netlink.OpError
			if errors.As(err, &op) && op.Err != nil {
				return fmt.Errorf("nftables refused the change: %w", op.Err)
			}
			return fmt.Errorf("reading the nftables answer: %w", err)
		}
		for _, r := range replies {
			if r.Header.Type == netlink.Error && r.Header.Sequence == last {
				return nil // acknowledged, and no error reported before
			}
		}
	}
}
