package wgtest

import (
	"crypto/rand"
	"encoding/binary"

	"golang.org/x/crypto/blake2s"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// WireGuard message types (the protocol's whitepaper, section 5.4).
const (
	MessageInitiation = 1
	MessageResponse   = 2
	MessageCookie     = 3
)

// HandshakeInitiation is a WireGuard handshake initiation to the device whose public key is
// responder, as a flood sends it: random sender index, ephemeral key, encrypted static key and
// timestamp, with a valid mac1 (anyone who knows the device's public key, every peer, can
// compute it) and no mac2. The device spends a Diffie-Hellman on it before it finds the static
// key undecryptable, unless it is under load: then it answers with a cookie reply and spends
// nothing.
func HandshakeInitiation(responder wgtypes.Key) []byte {
	msg := make([]byte, 148)
	binary.LittleEndian.PutUint32(msg, MessageInitiation)
	_, _ = rand.Read(msg[4:116]) // sender index, ephemeral, static, timestamp
	labelled := append([]byte("mac1----"), responder[:]...)
	key := blake2s.Sum256(labelled)
	mac, err := blake2s.New128(key[:])
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	mac.Write(msg[:116])
	copy(msg[116:132], mac.Sum(nil))
	return msg
}
