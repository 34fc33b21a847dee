package swanconf

import (
	"fmt"
	"strings"
)

// Section is a parsed section: its name (empty for the file itself) and its entries in file order.
// Duplicate keys and sections are kept as they appear (strongSwan would merge them), so a
// comparison against an expected tree notices them.
type Section struct {
	Name    string
	Entries []Entry
}

// Entry is either a key-value setting (Section == nil) or a subsection.
type Entry struct {
	Key     string
	Value   string
	Section *Section
}

// Sub returns the first subsection named name, or nil.
func (s *Section) Sub(name string) *Section {
	for _, e := range s.Entries {
		if e.Section != nil && e.Section.Name == name {
			return e.Section
		}
	}
	return nil
}

// Get returns the value of the first setting named key.
func (s *Section) Get(key string) (string, bool) {
	for _, e := range s.Entries {
		if e.Section == nil && e.Key == key {
			return e.Value, true
		}
	}
	return "", false
}

// Sections returns the subsections in order.
func (s *Section) Sections() []*Section {
	var out []*Section
	for _, e := range s.Entries {
		if e.Section != nil {
			out = append(out, e.Section)
		}
	}
	return out
}

// Keys returns the setting keys in order (duplicates included).
func (s *Section) Keys() []string {
	var out []string
	for _, e := range s.Entries {
		if e.Section == nil {
			out = append(out, e.Key)
		}
	}
	return out
}

// String renders the tree in a compact, unambiguous form for test failure messages.
func (s *Section) String() string {
	var b strings.Builder
	s.write(&b, "")
	return b.String()
}

func (s *Section) write(b *strings.Builder, indent string) {
	for _, e := range s.Entries {
		if e.Section != nil {
			fmt.Fprintf(b, "%s%q {\n", indent, e.Section.Name)
			e.Section.write(b, indent+"  ")
			fmt.Fprintf(b, "%s}\n", indent)
			continue
		}
		fmt.Fprintf(b, "%s%q = %q\n", indent, e.Key, e.Value)
	}
}

// SyntaxError is a parse failure with its 1-based line.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

type tokKind int

const (
	tokEOF tokKind = iota
	tokName
	tokOpen   // {
	tokClose  // }
	tokAssign // =
	tokDot
	tokComma
	tokColon
	tokInclude
	tokStrayQuote
)

type token struct {
	kind tokKind
	text string
	line int
}

type lexer struct {
	src  string
	pos  int
	line int
}

func (l *lexer) errf(format string, args ...any) error {
	return &SyntaxError{Line: l.line, Msg: fmt.Sprintf(format, args...)}
}

// next lexes one token in the initial state of the settings lexer. Raw carriage returns are
// rejected outright: the renderer never emits them and the real lexer treats them
// inconsistently (whitespace here, a comment terminator there).
func (l *lexer) next() (token, error) {
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '\r':
			return token{}, l.errf("carriage return")
		case c == ' ' || c == '\t':
			l.pos++
		case c == '\n':
			l.line++
			l.pos++
		case c == '#':
			// A comment runs to the end of the line (the newline itself is handled above).
			for l.pos < len(l.src) && l.src[l.pos] != '\n' {
				if l.src[l.pos] == '\r' {
					return token{}, l.errf("carriage return in a comment")
				}
				l.pos++
			}
		default:
			return l.token()
		}
	}
	return token{kind: tokEOF, line: l.line}, nil
}

func (l *lexer) token() (token, error) {
	c := l.src[l.pos]
	t := token{line: l.line, text: string(c)}
	switch c {
	case '{':
		t.kind = tokOpen
	case '}':
		t.kind = tokClose
	case '=':
		t.kind = tokAssign
	case '.':
		t.kind = tokDot
	case ',':
		t.kind = tokComma
	case ':':
		t.kind = tokColon
	case '"':
		t.kind = tokStrayQuote
	default:
		start := l.pos
		for l.pos < len(l.src) && strings.IndexByte(nameForbidden, l.src[l.pos]) < 0 {
			l.pos++
		}
		t.kind, t.text = tokName, l.src[start:l.pos]
		// "include"[\t ]+/[^=] starts an include directive.
		if t.text == "include" {
			j := l.pos
			for j < len(l.src) && (l.src[j] == ' ' || l.src[j] == '\t') {
				j++
			}
			if j > l.pos && j < len(l.src) && l.src[j] != '=' {
				t.kind = tokInclude
			}
		}
		return t, nil
	}
	l.pos++
	return t, nil
}

// value lexes a value after '=' (the lexer's val state): unquoted parts and quoted strings up to
// a newline, '#', '}' or the end of input, joined by single spaces as the grammar does.
func (l *lexer) value() (string, error) {
	var parts []string
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '\r':
			return "", l.errf("carriage return in a value")
		case c == ' ' || c == '\t':
			l.pos++
		case c == '\n' || c == '#' || c == '}':
			// The terminator is left for the initial state.
			return strings.Join(parts, " "), nil
		case c == '"':
			l.pos++
			s, err := l.str()
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		default:
			start := l.pos
			for l.pos < len(l.src) && strings.IndexByte("#}\"\r\n\t ", l.src[l.pos]) < 0 {
				l.pos++
			}
			parts = append(parts, l.src[start:l.pos])
		}
	}
	return strings.Join(parts, " "), nil
}

// str lexes a quoted string after its opening quote (the lexer's str state).
func (l *lexer) str() (string, error) {
	var b strings.Builder
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch c {
		case '"':
			l.pos++
			return b.String(), nil
		case '\r':
			return "", l.errf("carriage return in a quoted string")
		case '\\':
			if l.pos+1 >= len(l.src) {
				return "", l.errf("unterminated string")
			}
			e := l.src[l.pos+1]
			l.pos += 2
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case '\n':
				l.line++ // escaped line break: lines are merged
			case '\r':
				return "", l.errf("carriage return in a quoted string")
			default:
				b.WriteByte(e)
			}
		default:
			if c == '\n' {
				l.line++
			}
			b.WriteByte(c)
			l.pos++
		}
	}
	return "", l.errf("unterminated string")
}

// Parse reads settings text into a tree. It accepts sections (`name {`), settings
// (`key = value`, values quoted or not) and comments; anything else the strongSwan grammar
// knows (include, section references, dotted names) is an error.
func Parse(src string) (*Section, error) {
	l := &lexer{src: src, line: 1}
	root := &Section{}
	stack := []*Section{root}
	for {
		t, err := l.next()
		if err != nil {
			return nil, err
		}
		top := stack[len(stack)-1]
		switch t.kind {
		case tokEOF:
			if len(stack) > 1 {
				return nil, &SyntaxError{Line: t.line, Msg: fmt.Sprintf("section %q is not closed", top.Name)}
			}
			return root, nil
		case tokClose:
			if len(stack) == 1 {
				return nil, &SyntaxError{Line: t.line, Msg: "unexpected '}'"}
			}
			stack = stack[:len(stack)-1]
		case tokName:
			n, err := l.next()
			if err != nil {
				return nil, err
			}
			switch n.kind {
			case tokOpen:
				s := &Section{Name: t.text}
				top.Entries = append(top.Entries, Entry{Section: s})
				stack = append(stack, s)
			case tokAssign:
				v, err := l.value()
				if err != nil {
					return nil, err
				}
				top.Entries = append(top.Entries, Entry{Key: t.text, Value: v})
			default:
				return nil, &SyntaxError{Line: n.line, Msg: fmt.Sprintf("unexpected %q after name %q", n.text, t.text)}
			}
		case tokInclude:
			return nil, &SyntaxError{Line: t.line, Msg: "include is not supported"}
		default:
			return nil, &SyntaxError{Line: t.line, Msg: fmt.Sprintf("unexpected %q", t.text)}
		}
	}
}
