package swanconf

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	src := `# header
connections {
    a-b_c {   # trailing comment
        version = "2"
        list = "x, y,z"
        plain = some words   here
        mixed = "q" tail
        esc = "a\"b\\c\}\n\t"
        braces = "{}=#,:."
        local {
            id = "C=DE, O=Example"
        }
    }
}
empty {
}
`
	root, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	conns := root.Sub("connections")
	if conns == nil || len(root.Entries) != 2 || root.Sub("empty") == nil {
		t.Fatalf("top level: %s", root)
	}
	c := conns.Sub("a-b_c")
	if c == nil {
		t.Fatalf("connection missing: %s", root)
	}
	want := map[string]string{
		"version": "2",
		"list":    "x, y,z",
		"plain":   "some words here",
		"mixed":   "q tail",
		"esc":     "a\"b\\c}\n\t",
		"braces":  "{}=#,:.",
	}
	for k, v := range want {
		got, ok := c.Get(k)
		if !ok || got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if got := c.Keys(); strings.Join(got, " ") != "version list plain mixed esc braces" {
		t.Errorf("keys %v", got)
	}
	if id, _ := c.Sub("local").Get("id"); id != "C=DE, O=Example" {
		t.Errorf("local.id = %q", id)
	}
	if got := SplitList("x, y,z"); strings.Join(got, "|") != "x|y|z" {
		t.Errorf("SplitList = %q", got)
	}
}

// An unquoted value ends at '#' and '}', which is how an unquoted hostile value would inject.
func TestParseUnquotedValueEndsAtBraceAndHash(t *testing.T) {
	root, err := Parse("s {\n a = x } b = y\n c = z # w = v\n}\n")
	if err == nil {
		// "a = x }" closes s, then "b = y" is a top-level key and the final '}' is stray.
		t.Fatalf("expected an error, got %s", root)
	}
	root, err = Parse("s {\n a = x } b = y\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := root.Get("b"); !ok {
		t.Fatalf("b should be a top-level key: %s", root)
	}
	root, err = Parse("c = z # w = v\n")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := root.Get("c"); v != "z" || len(root.Entries) != 1 {
		t.Fatalf("comment not stripped: %s", root)
	}
}

func TestParseErrors(t *testing.T) {
	for _, src := range []string{
		"a {\n",
		"}\n",
		"a.b = c\n",
		"a : b {\n}\n",
		"include /etc/x.conf\n",
		"\"a\" = b\n",
		"a = \"unterminated\n",
		"a = \"x\\",
		"a = b\r\n",
		"a\n",
		"a b = c\n",
		"a = \"x\r\"\n",
	} {
		if root, err := Parse(src); err == nil {
			t.Errorf("Parse(%q) = %s, want an error", src, root)
		}
	}
	// "include" followed by '=' is an ordinary key.
	if _, err := Parse("include = x\n"); err != nil {
		t.Errorf("include as a key: %v", err)
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "peer-1", "peer_1", "p~2", "A9"} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "include", "a.b", "a b", "a{", "a}", "a=", "a#", "a\"", "a,b", "a:b", "a\n", "ä", strings.Repeat("a", 256)} {
		if err := CheckName(bad); err == nil {
			t.Errorf("CheckName(%q) accepted", bad)
		}
	}
}

func TestQuoteRefusesControlCharacters(t *testing.T) {
	for _, bad := range []string{"a\nb", "a\rb", "a\x00b", "\x7f", "a\u0085b", "\xff"} {
		if q, err := Quote(bad); err == nil {
			t.Errorf("Quote(%q) = %s, want an error", bad, q)
		}
	}
	for _, bad := range []string{"", "a,b", "a b", "a\tb"} {
		if err := CheckListItem(bad); err == nil {
			t.Errorf("CheckListItem(%q) accepted", bad)
		}
	}
}

// FuzzQuote: whatever Quote accepts parses back to exactly one key with the same value.
func FuzzQuote(f *testing.F) {
	for _, s := range []string{"plain", `a"b`, `a\b`, `\`, `"`, `\"`, "}\nx {", "# c", "{}=,:.", `\n`, "ü € 漢", `x" }` + "\n" + `evil = "1`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := Quote(s)
		if err != nil {
			return
		}
		root, err := Parse("k = " + q + "\n")
		if err != nil {
			t.Fatalf("Quote(%q) = %s does not parse: %v", s, q, err)
		}
		if len(root.Entries) != 1 || root.Entries[0].Section != nil || root.Entries[0].Key != "k" || root.Entries[0].Value != s {
			t.Fatalf("Quote(%q) = %s parses to %s", s, q, root)
		}
	})
}
