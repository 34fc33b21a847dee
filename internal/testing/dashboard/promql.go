package dashboard

import (
	"fmt"
	"strings"
)

// Selector is one vector selector of an expression: the metric it reads and the label names its
// matchers use.
type Selector struct {
	Metric string
	Labels []string
}

// Refs is what a PromQL expression refers to: its selectors, the label names it groups or
// matches on (by, without, on, ignoring, group_left, group_right) and the functions and
// aggregations it calls.
type Refs struct {
	Selectors []Selector
	Grouping  []string
	Functions []string
}

// Parse finds the references of a PromQL expression as Grafana stores it: the interval variables
// ($__rate_interval, $__interval, $__range, ...) may stand where a duration does and any
// variable inside a string; a variable elsewhere is an error (it could stand for a metric). It
// is a lexer, not Prometheus's parser (which this module does not depend on): it knows strings,
// numbers and durations, label matchers, range and subquery brackets, the grouping and binary
// keywords and PromQL's functions, so every other identifier is a metric name. Syntax beyond that
// is left to promtool.
func Parse(expr string) (*Refs, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	refs := &Refs{}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		next := token{}
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		switch t.kind {
		case tokIdent:
			word := strings.ToLower(t.text)
			switch {
			case groupingKeywords[word]:
				if next.kind != tokLParen {
					if word == "group_left" || word == "group_right" {
						continue
					}
					return nil, fmt.Errorf("%q without a label list", t.text)
				}
				j := i + 2
				for ; j < len(toks) && toks[j].kind != tokRParen; j++ {
					switch toks[j].kind {
					case tokIdent, tokString:
						refs.Grouping = append(refs.Grouping, toks[j].text)
					case tokComma:
					default:
						return nil, fmt.Errorf("%q in the label list of %s", toks[j].text, t.text)
					}
				}
				if j == len(toks) {
					return nil, fmt.Errorf("unclosed label list of %s", t.text)
				}
				i = j
			case binaryKeywords[word], word == "inf", word == "nan":
			case next.kind == tokLParen:
				if !functions[t.text] {
					return nil, fmt.Errorf("unknown function %q", t.text)
				}
				refs.Functions = append(refs.Functions, t.text)
			case aggregations[t.text] && next.kind == tokIdent && (strings.EqualFold(next.text, "by") || strings.EqualFold(next.text, "without")):
				refs.Functions = append(refs.Functions, t.text)
			default:
				sel := Selector{Metric: t.text}
				if next.kind == tokLBrace {
					end, name, labels, err := matchers(toks, i+1)
					if err != nil {
						return nil, err
					}
					if name != "" {
						return nil, fmt.Errorf("%s{...} names its metric twice", t.text)
					}
					sel.Labels, i = labels, end
				}
				refs.Selectors = append(refs.Selectors, sel)
			}
		case tokLBrace:
			end, name, labels, err := matchers(toks, i)
			if err != nil {
				return nil, err
			}
			if name == "" {
				return nil, fmt.Errorf("a selector without a metric name: %s", expr)
			}
			refs.Selectors = append(refs.Selectors, Selector{Metric: name, Labels: labels})
			i = end
		case tokLBracket:
			// A range or subquery: durations, a colon and nothing else.
			j := i + 1
			for ; j < len(toks) && toks[j].kind != tokRBracket; j++ {
				if k := toks[j].kind; k != tokNumber && !(k == tokOp && toks[j].text == ":") {
					return nil, fmt.Errorf("%q inside [...]", toks[j].text)
				}
			}
			if j == len(toks) {
				return nil, fmt.Errorf("unclosed [")
			}
			i = j
		case tokRBrace, tokRBracket:
			return nil, fmt.Errorf("unbalanced %q", t.text)
		}
	}
	return refs, nil
}

// matchers reads the label matchers from the '{' at toks[open]: the index of the closing '}',
// the metric's name when the block names it (__name__="x" or a lone quoted name) and the other
// labels.
func matchers(toks []token, open int) (end int, name string, labels []string, err error) {
	i := open + 1
	for ; i < len(toks); i++ {
		t := toks[i]
		switch t.kind {
		case tokRBrace:
			return i, name, labels, nil
		case tokComma:
			continue
		case tokIdent, tokString:
		default:
			return 0, "", nil, fmt.Errorf("%q where a label name belongs", t.text)
		}
		if t.kind == tokString && i+1 < len(toks) && (toks[i+1].kind == tokComma || toks[i+1].kind == tokRBrace) {
			name = t.text // {"metric.name", ...}
			continue
		}
		if i+2 >= len(toks) || toks[i+1].kind != tokOp || !matchOps[toks[i+1].text] || toks[i+2].kind != tokString {
			return 0, "", nil, fmt.Errorf("label matcher on %q is not <label> <op> \"<value>\"", t.text)
		}
		if t.text == "__name__" {
			if toks[i+1].text != "=" {
				return 0, "", nil, fmt.Errorf("__name__%s: a metric name by pattern cannot be checked", toks[i+1].text)
			}
			name = toks[i+2].text
		} else {
			labels = append(labels, t.text)
		}
		i += 2
	}
	return 0, "", nil, fmt.Errorf("unclosed {")
}

type tokenKind int

const (
	tokNone tokenKind = iota
	tokIdent
	tokString
	tokNumber
	tokOp
	tokComma
	tokLParen
	tokRParen
	tokLBrace
	tokRBrace
	tokLBracket
	tokRBracket
)

type token struct {
	kind tokenKind
	text string // a string's value, unquoted
}

// intervalVariables are Grafana's variables that stand for a duration.
var intervalVariables = map[string]bool{
	"__interval": true, "__interval_ms": true, "__rate_interval": true, "__rate_interval_ms": true,
	"__range": true, "__range_s": true, "__range_ms": true,
}

func lex(s string) ([]token, error) {
	var toks []token
	isIdentStart := func(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c == ':' || c >= '0' && c <= '9' }
	isDigit := func(c byte) bool { return c >= '0' && c <= '9' }
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j, val := i+1, strings.Builder{}
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && c != '`' && j+1 < len(s) {
					j++
				}
				val.WriteByte(s[j])
			}
			if j == len(s) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			toks = append(toks, token{tokString, val.String()})
			i = j + 1
		case c == '$':
			j, name := i+1, ""
			if j < len(s) && s[j] == '{' {
				k := strings.IndexByte(s[j:], '}')
				if k < 0 {
					return nil, fmt.Errorf("unclosed ${ at %d", i)
				}
				name, j = strings.SplitN(s[j+1:j+k], ":", 2)[0], j+k+1
			} else {
				for j < len(s) && isIdent(s[j]) && s[j] != ':' {
					j++
				}
				name = s[i+1 : j]
			}
			if !intervalVariables[name] {
				return nil, fmt.Errorf("variable $%s outside a string (only interval variables may stand for a duration)", name)
			}
			toks = append(toks, token{tokNumber, "5m"})
			i = j
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			j := i
			for j < len(s) && (isIdent(s[j]) && s[j] != ':' || s[j] == '.') {
				j++
			}
			toks = append(toks, token{tokNumber, s[i:j]})
			i = j
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			toks = append(toks, token{tokIdent, s[i:j]})
			i = j
		default:
			if k, ok := punct[c]; ok {
				toks = append(toks, token{k, string(c)})
				i++
				continue
			}
			if i+1 < len(s) && twoCharOps[s[i:i+2]] {
				toks = append(toks, token{tokOp, s[i : i+2]})
				i += 2
				continue
			}
			if strings.IndexByte("+-*/%^=<>@:", c) >= 0 {
				toks = append(toks, token{tokOp, string(c)})
				i++
				continue
			}
			return nil, fmt.Errorf("unexpected %q at %d", c, i)
		}
	}
	return toks, nil
}

var punct = map[byte]tokenKind{',': tokComma, '(': tokLParen, ')': tokRParen, '{': tokLBrace, '}': tokRBrace, '[': tokLBracket, ']': tokRBracket}

var twoCharOps = map[string]bool{"==": true, "!=": true, "=~": true, "!~": true, "<=": true, ">=": true}

var matchOps = map[string]bool{"=": true, "!=": true, "=~": true, "!~": true}

var groupingKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

var binaryKeywords = map[string]bool{"and": true, "or": true, "unless": true, "atan2": true, "bool": true, "offset": true}

var aggregations = map[string]bool{
	"sum": true, "avg": true, "count": true, "min": true, "max": true, "group": true, "stddev": true, "stdvar": true,
	"topk": true, "bottomk": true, "quantile": true, "count_values": true, "limitk": true, "limit_ratio": true,
}

// functions are PromQL's functions and aggregations (Prometheus 3), and the @ modifier's
// start() and end().
var functions = func() map[string]bool {
	m := map[string]bool{"start": true, "end": true}
	for a := range aggregations {
		m[a] = true
	}
	for _, f := range strings.Fields(`abs absent absent_over_time acos acosh asin asinh atan atanh
		avg_over_time ceil changes clamp clamp_max clamp_min cos cosh count_over_time day_of_month
		day_of_week day_of_year days_in_month deg delta deriv double_exponential_smoothing exp floor
		histogram_avg histogram_count histogram_fraction histogram_quantile histogram_stddev
		histogram_stdvar histogram_sum holt_winters hour idelta increase info irate label_join
		label_replace last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute
		month pi predict_linear present_over_time quantile_over_time rad rate resets round scalar sgn
		sin sinh sort sort_by_label sort_by_label_desc sort_desc sqrt stddev_over_time
		stdvar_over_time sum_over_time tan tanh time timestamp vector year`) {
		m[f] = true
	}
	return m
}()
