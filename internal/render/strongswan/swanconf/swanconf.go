// Package swanconf holds the lexical rules of strongSwan's settings syntax (swanctl.conf,
// strongswan.conf) that the renderer relies on: which section names and keys are safe, how a
// value is quoted, how swanctl splits list values, and a strict parser that reads rendered text
// back into a tree. The parser follows libstrongswan's settings lexer (5.7 and later: '.', ',' and
// ':' are tokens, quoted strings know \n, \r, \t and backslash-escapes) closely enough that an
// injection the real parser would see shows up as an extra or different entry here; syntax the
// renderer never emits (references, dotted keys, include) is an error rather than interpreted.
package swanconf

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen is the longest section name or key accepted: VICI encodes key names with a one-byte
// length.
const MaxNameLen = 255

// nameForbidden are the bytes the settings lexer does not accept in a NAME token
// ([^#{}:.,="\r\n\t ]).
const nameForbidden = "#{}:.,=\"\r\n\t "

// CheckName reports whether s can be written as a section name or key without quoting: ASCII
// graphic characters except those the lexer treats specially, at most MaxNameLen bytes, and not
// the keyword "include".
func CheckName(s string) error {
	if s == "" {
		return errors.New("empty name")
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("name is %d bytes long, at most %d allowed", len(s), MaxNameLen)
	}
	if s == "include" {
		return errors.New(`"include" is a keyword of the settings syntax`)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(nameForbidden, c) >= 0 {
			return fmt.Errorf("name %q contains %q, which is not allowed in a section name or key", s, c)
		}
	}
	return nil
}

// CheckValue reports whether s can be written as a quoted value: valid UTF-8 without control
// characters. Everything else (quotes, backslashes, '#', '{', '}', '=', ',') is escaped or
// harmless inside double quotes.
func CheckValue(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("value is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return fmt.Errorf("value contains the control character %U", r)
		}
	}
	return nil
}

// CheckListItem reports whether s can be one element of a comma-separated list value (swanctl
// splits such values at ',' and trims spaces): a valid value, non-empty, without ',' or
// whitespace.
func CheckListItem(s string) error {
	if s == "" {
		return errors.New("empty list element")
	}
	if err := CheckValue(s); err != nil {
		return err
	}
	for _, r := range s {
		if r == ',' || unicode.IsSpace(r) {
			return fmt.Errorf("list element %q contains %q", s, r)
		}
	}
	return nil
}

// Quote returns s as a double-quoted value: backslash and double quote are escaped with a
// backslash, which the settings lexer reverses. It refuses what CheckValue refuses.
func Quote(s string) (string, error) {
	if err := CheckValue(s); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String(), nil
}

// QuoteList returns items joined as one quoted list value ("a, b"), refusing what CheckListItem
// refuses.
func QuoteList(items []string) (string, error) {
	for i, it := range items {
		if err := CheckListItem(it); err != nil {
			return "", fmt.Errorf("element %d: %w", i, err)
		}
	}
	return Quote(strings.Join(items, ", "))
}

// SplitList splits a list value the way swanctl does before sending it over VICI: at ',' with
// spaces trimmed from each element.
func SplitList(v string) []string {
	parts := strings.Split(v, ",")
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		out = append(out, strings.Trim(p, " "))
	}
	return out
}

// CheckComment reports whether s can follow '#' on a comment line: a comment runs to the end
// of the line, so only line breaks (and other control characters) could end it early.
func CheckComment(s string) error {
	if err := CheckValue(s); err != nil {
		return fmt.Errorf("comment: %w", err)
	}
	return nil
}

// ConnectionName maps a peer name (a Kubernetes object name: lowercase DNS subdomain) to the
// name of its connection in the gateway's charon: a name the settings syntax accepts.
func ConnectionName(peer string) (string, error) {
	if len(peer) > 253 || !dnsSubdomain.MatchString(peer) {
		return "", fmt.Errorf("%q is not a Kubernetes object name (lowercase DNS subdomain)", peer)
	}
	name := strings.ReplaceAll(peer, ".", "_")
	if err := CheckName(name); err != nil {
		return "", err
	}
	return name, nil
}

var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
