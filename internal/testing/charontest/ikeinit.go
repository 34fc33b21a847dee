package charontest

import (
	"encoding/binary"
	"fmt"
)

// IKEv2 numbers (RFC 7296 and IANA's IKEv2 registry) the IKE_SA_INIT flood uses.
const (
	ikeExchangeSAInit  = 34
	ikeFlagInitiator   = 0x08
	ikeFlagResponse    = 0x20
	ikePayloadNone     = 0
	ikePayloadSA       = 33
	ikePayloadKE       = 34
	ikePayloadNonce    = 40
	ikePayloadNotify   = 41
	ikeProtocolIKE     = 1
	ikeAttrKeyLength   = 14
	ikeNotifyCookie    = 16390
	ikeTransformEncr   = 1
	ikeTransformPRF    = 2
	ikeTransformInteg  = 3
	ikeTransformDH     = 4
	ikeHeaderLength    = 28
	ikeGenericHdrBytes = 4
)

// IKEProposal is one IKE proposal by IANA transform IDs; Integ 0 leaves integrity out (an AEAD
// cipher such as AES-GCM-16, 20).
type IKEProposal struct {
	Encr        uint16
	EncrKeyBits uint16
	PRF         uint16
	Integ       uint16
	DH          uint16
}

// IKESAInit is an IKEv2 IKE_SA_INIT request as an initiator sends it first: header (the
// initiator's SPI, no responder SPI, message ID 0), an SA payload with one proposal, the KE
// payload (the group's public value, as the group encodes it) and a Nonce payload. A responder
// that accepts the proposal answers it and holds a half-open IKE_SA until IKE_AUTH or its
// timeout; one above its cookie threshold answers with a COOKIE notify and holds nothing.
func IKESAInit(spi [8]byte, p IKEProposal, ke, nonce []byte) []byte {
	type transform struct {
		kind, id uint16
		keyBits  uint16
	}
	ts := []transform{{ikeTransformEncr, p.Encr, p.EncrKeyBits}, {ikeTransformPRF, p.PRF, 0}}
	if p.Integ != 0 {
		ts = append(ts, transform{ikeTransformInteg, p.Integ, 0})
	}
	ts = append(ts, transform{ikeTransformDH, p.DH, 0})

	var transforms []byte
	for i, tr := range ts {
		last := byte(3) // more transforms follow
		if i == len(ts)-1 {
			last = 0
		}
		b := []byte{last, 0, 0, 0, byte(tr.kind), 0, 0, 0}
		binary.BigEndian.PutUint16(b[6:], tr.id)
		if tr.keyBits != 0 {
			b = binary.BigEndian.AppendUint16(b, 0x8000|ikeAttrKeyLength) // TV format
			b = binary.BigEndian.AppendUint16(b, tr.keyBits)
		}
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		transforms = append(transforms, b...)
	}
	proposal := []byte{0, 0, 0, 0, 1, ikeProtocolIKE, 0, byte(len(ts))} // last, #1, no SPI
	proposal = append(proposal, transforms...)
	binary.BigEndian.PutUint16(proposal[2:], uint16(len(proposal)))

	keBody := binary.BigEndian.AppendUint16(nil, p.DH)
	keBody = append(append(keBody, 0, 0), ke...)

	msg := make([]byte, ikeHeaderLength)
	copy(msg, spi[:])
	msg[16], msg[17], msg[18], msg[19] = ikePayloadSA, 0x20, ikeExchangeSAInit, ikeFlagInitiator
	msg = appendPayload(msg, ikePayloadKE, proposal)
	msg = appendPayload(msg, ikePayloadNonce, keBody)
	msg = appendPayload(msg, ikePayloadNone, nonce)
	binary.BigEndian.PutUint32(msg[24:], uint32(len(msg)))
	return msg
}

// appendPayload appends a payload with the generic header naming the next payload's type.
func appendPayload(msg []byte, next byte, body []byte) []byte {
	hdr := []byte{next, 0, 0, 0}
	binary.BigEndian.PutUint16(hdr[2:], uint16(ikeGenericHdrBytes+len(body)))
	return append(append(msg, hdr...), body...)
}

// IKEInitAnswer is what a responder's answer to an IKE_SA_INIT request was.
type IKEInitAnswer int

const (
	// AnswerOther is anything else: another notify (NO_PROPOSAL_CHOSEN, INVALID_KE_PAYLOAD, ...).
	AnswerOther IKEInitAnswer = iota
	// AnswerCookie is a COOKIE notify: the responder holds no state for the request.
	AnswerCookie
	// AnswerSA is a full response (an SA payload first): the responder holds a half-open IKE_SA.
	AnswerSA
)

// ParseIKEInitAnswer classifies a responder's IKE_SA_INIT response.
func ParseIKEInitAnswer(b []byte) (IKEInitAnswer, error) {
	if len(b) < ikeHeaderLength || b[18] != ikeExchangeSAInit || b[19]&ikeFlagResponse == 0 {
		return AnswerOther, fmt.Errorf("not an IKE_SA_INIT response (%d bytes)", len(b))
	}
	switch first := b[16]; first {
	case ikePayloadSA:
		return AnswerSA, nil
	case ikePayloadNotify:
		// generic header (4), protocol ID, SPI size, notify type
		if len(b) < ikeHeaderLength+8 {
			return AnswerOther, fmt.Errorf("short notify payload")
		}
		if binary.BigEndian.Uint16(b[ikeHeaderLength+6:]) == ikeNotifyCookie {
			return AnswerCookie, nil
		}
	}
	return AnswerOther, nil
}
