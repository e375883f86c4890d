package stripespec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// SearchField is one field a search query may name, and what it takes.
type SearchField struct {
	Numeric bool // takes >, <, >=, <= and unquoted numbers (amount, created)
	Keyed   bool // takes a key: metadata['k']
}

// PaymentIntentSearchFields are the query fields Stripe lists for
// PaymentIntents ("Query fields for PaymentIntents").
var PaymentIntentSearchFields = map[string]SearchField{
	"amount":   {Numeric: true},
	"created":  {Numeric: true},
	"currency": {},
	"customer": {},
	"metadata": {Keyed: true},
	"status":   {},
}

// CheckSearchQuery parses q with the grammar of Stripe's search query
// language and reports the first error: clauses of field, operator and
// value ("-" in front negates), joined by AND or by OR (never both, no
// parentheses), at most ten; a field the resource does not list; a
// substring match (~) under three characters; a comparison on a field that
// is not numeric; a string value not in quotes.
func CheckSearchQuery(q string, fields map[string]SearchField) error {
	p := &queryParser{s: q}
	if strings.TrimSpace(q) == "" {
		return errors.New("the search query is empty")
	}
	var joiner string
	clauses := 0
	for {
		p.space()
		if err := p.clause(fields); err != nil {
			return fmt.Errorf("at character %d: %w", p.i, err)
		}
		clauses++
		if clauses > MaxSearchClauses {
			return fmt.Errorf("at most %d clauses can be combined", MaxSearchClauses)
		}
		if p.space() == 0 {
			if p.i == len(p.s) {
				return nil
			}
			return fmt.Errorf("at character %d: expected a space before the next clause", p.i)
		}
		if p.i == len(p.s) {
			return nil // trailing spaces
		}
		word := p.word()
		if word != "AND" && word != "OR" {
			return fmt.Errorf("at character %d: expected AND or OR, got %q", p.i, word)
		}
		if joiner != "" && joiner != word {
			return errors.New("AND and OR cannot be combined in one query")
		}
		joiner = word
		if p.space() == 0 {
			return fmt.Errorf("at character %d: expected a space after %s", p.i, word)
		}
	}
}

type queryParser struct {
	s string
	i int
}

func (p *queryParser) space() int {
	n := 0
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
		n++
	}
	return n
}

func (p *queryParser) word() string {
	start := p.i
	for p.i < len(p.s) && p.s[p.i] != ' ' {
		p.i++
	}
	return p.s[start:p.i]
}

func (p *queryParser) clause(fields map[string]SearchField) error {
	if p.i < len(p.s) && p.s[p.i] == '-' {
		p.i++
	}
	start := p.i
	for p.i < len(p.s) && (p.s[p.i] == '_' || p.s[p.i] == '.' || isAlnum(p.s[p.i])) {
		p.i++
	}
	name := p.s[start:p.i]
	f, known := fields[name]
	switch {
	case name == "":
		return errors.New("expected a field name")
	case !known:
		return fmt.Errorf("%q is not a field this resource can be searched by", name)
	}
	if f.Keyed {
		if p.i >= len(p.s) || p.s[p.i] != '[' {
			return fmt.Errorf("%s needs a key: %s['key']", name, name)
		}
		p.i++
		key, err := p.quoted()
		if err != nil {
			return fmt.Errorf("%s key: %w", name, err)
		}
		if key == "" {
			return fmt.Errorf("%s key is empty", name)
		}
		if p.i >= len(p.s) || p.s[p.i] != ']' {
			return fmt.Errorf("expected ] after the %s key", name)
		}
		p.i++
	}
	op := ""
	for _, o := range []string{">=", "<=", ":", "~", ">", "<"} {
		if strings.HasPrefix(p.s[p.i:], o) {
			op = o
			break
		}
	}
	if op == "" {
		return fmt.Errorf("expected an operator (: ~ > < >= <=) after %s", name)
	}
	p.i += len(op)
	if (op != ":" && op != "~") && !f.Numeric {
		return fmt.Errorf("%s cannot be compared with %s", name, op)
	}
	if p.i < len(p.s) && (p.s[p.i] == '\'' || p.s[p.i] == '"') {
		v, err := p.quoted()
		if err != nil {
			return err
		}
		if op == "~" && len(v) < 3 {
			return errors.New("a substring match (~) needs at least 3 characters")
		}
		return nil
	}
	v := p.word()
	switch {
	case v == "":
		return fmt.Errorf("expected a value after %s%s", name, op)
	case v == "null" && op == ":":
		return nil
	case f.Numeric:
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		return nil
	default:
		return fmt.Errorf("the string value %q must be in quotes", v)
	}
}

// quoted reads a value in single or double quotes; a backslash escapes the
// quote character.
func (p *queryParser) quoted() (string, error) {
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", errors.New("expected a quoted value")
	}
	q := p.s[p.i]
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '\\' && p.i+1 < len(p.s):
			b.WriteByte(p.s[p.i+1])
			p.i += 2
		case c == q:
			p.i++
			return b.String(), nil
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return "", errors.New("unterminated quoted value")
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
