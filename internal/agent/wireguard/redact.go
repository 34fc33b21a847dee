package wireguard

import (
	"fmt"
	"regexp"

	"github.com/go-logr/logr"
	"golang.zx2c4.com/wireguard/device"
)

// keyShaped matches what a WireGuard key looks like in text: 32 bytes in standard base64
// (43 characters and '=') or in hex (64 digits, the UAPI's form).
var keyShaped = regexp.MustCompile(`[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=|\b[0-9a-fA-F]{64}\b`)

// Redacted replaces key-shaped text.
const Redacted = "[redacted]"

// redact replaces anything shaped like a key. Applied to the userspace device's log and to
// errors coming from below the driver, so that no key reaches a log line or a status even if
// a library were to print one. Public keys are redacted too; the driver names peers instead.
func redact(s string) string { return keyShaped.ReplaceAllString(s, Redacted) }

// deviceLogger routes wireguard-go's log to log: errors at V(0), the rest at V(1), every
// line redacted.
func deviceLogger(log logr.Logger) *device.Logger {
	return &device.Logger{
		Verbosef: func(format string, args ...any) {
			if l := log.V(1); l.Enabled() {
				l.Info(redact(fmt.Sprintf(format, args...)))
			}
		},
		Errorf: func(format string, args ...any) {
			log.Info(redact(fmt.Sprintf(format, args...)), "level", "error")
		},
	}
}
