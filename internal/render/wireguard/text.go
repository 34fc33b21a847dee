package wireguard

import (
	"fmt"
	"strconv"
	"strings"
)

// Text writes c in wg-quick's format for the gateway's ConfigMap, without secrets: the
// PrivateKey and PresharedKey lines are comments naming the Secret they come from. Every value
// is re-checked against the characters the format treats specially ('#' starts a comment, a
// line break ends the value, whitespace is dropped), so a value that would change the
// structure is an error, never written.
func (c *Config) Text() (string, error) {
	var b strings.Builder
	line := func(s string) { b.WriteString(s); b.WriteByte('\n') }
	comment := func(s string) error {
		if err := checkText(s); err != nil {
			return fmt.Errorf("comment %q: %w", s, err)
		}
		line("# " + s)
		return nil
	}
	kv := func(key, value string) error {
		if value == "" || strings.ContainsAny(value, "#[]\r\n\t ") && !isBracketedEndpoint(key, value) {
			return fmt.Errorf("%s: value %q cannot be written safely", key, value)
		}
		if err := checkText(value); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		line(key + " = " + value)
		return nil
	}

	if err := comment("WireGuard configuration of VPNGateway " + c.Gateway + ", rendered by bnerd-vpn-operator."); err != nil {
		return "", err
	}
	line("# The gateway agent applies it; keys are read from Kubernetes Secrets, never written here.")
	line("")
	line("[Interface]")
	i := c.Interface
	if err := comment(fmt.Sprintf("PrivateKey from Secret %q key %q", i.PrivateKey.Name, i.PrivateKey.Key)); err != nil {
		return "", err
	}
	fields := []struct{ k, v string }{
		{"Address", i.Address.String()},
		{"ListenPort", strconv.Itoa(int(i.ListenPort))},
		{"MTU", strconv.Itoa(int(i.MTU))},
	}
	if i.FirewallMark != 0 {
		fields = append(fields, struct{ k, v string }{"FwMark", fmt.Sprintf("%#x", i.FirewallMark)})
	}
	for _, e := range fields {
		if err := kv(e.k, e.v); err != nil {
			return "", fmt.Errorf("interface: %w", err)
		}
	}
	for _, p := range c.Peers {
		line("")
		if err := comment("peer " + p.Name); err != nil {
			return "", err
		}
		line("[Peer]")
		if err := kv("PublicKey", p.PublicKey); err != nil {
			return "", fmt.Errorf("peer %q: %w", p.Name, err)
		}
		if p.PresharedKey != nil {
			if err := comment(fmt.Sprintf("PresharedKey from Secret %q key %q", p.PresharedKey.Name, p.PresharedKey.Key)); err != nil {
				return "", err
			}
		}
		if len(p.AllowedIPs) > 0 {
			ips := make([]string, len(p.AllowedIPs))
			for j, a := range p.AllowedIPs {
				if !a.IsValid() {
					return "", fmt.Errorf("peer %q: invalid allowed IP", p.Name)
				}
				ips[j] = a.String()
			}
			line("AllowedIPs = " + strings.Join(ips, ", "))
		}
		if len(p.WithheldIPs) > 0 {
			ips := make([]string, len(p.WithheldIPs))
			for j, a := range p.WithheldIPs {
				ips[j] = a.String()
			}
			if err := comment("not routed to this peer (overlap an authorized peer's subnets): " + strings.Join(ips, ", ")); err != nil {
				return "", err
			}
		}
		if p.Endpoint != "" {
			if err := kv("Endpoint", p.Endpoint); err != nil {
				return "", fmt.Errorf("peer %q: %w", p.Name, err)
			}
		}
		if p.PersistentKeepalive > 0 {
			if err := kv("PersistentKeepalive", strconv.Itoa(int(p.PersistentKeepalive))); err != nil {
				return "", fmt.Errorf("peer %q: %w", p.Name, err)
			}
		}
	}
	return b.String(), nil
}

// isBracketedEndpoint allows the brackets of an IPv6 endpoint ([2001:db8::1]:51820).
func isBracketedEndpoint(key, value string) bool {
	if key != "Endpoint" || !strings.HasPrefix(value, "[") || strings.ContainsAny(value, "#\r\n\t ") {
		return false
	}
	return checkEndpoint(value) == nil
}
