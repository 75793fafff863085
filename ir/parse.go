package ir

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/lcc-dev/lcc/tensor"
)

// maxParsedSplat bounds a splat constant in text IR: the text is small but the
// tensor it declares is materialised, so its size must be capped before allocating.
const maxParsedSplat = 1 << 24

// Parse reads one function in the text form written by Print and verifies it.
// Errors give the line and column.
func Parse(src string) (*Func, error) {
	p := &parser{src: src, line: 1, col: 1, vals: make(map[string]*Value)}
	f, err := p.parseFunc()
	if err != nil {
		return nil, err
	}
	if err := Verify(f); err != nil {
		return nil, err
	}
	return f, nil
}

type parser struct {
	src       string
	pos       int
	line, col int
	vals      map[string]*Value
}

type parseError struct {
	line, col int
	msg       string
}

func (e *parseError) Error() string { return fmt.Sprintf("line %d:%d: %s", e.line, e.col, e.msg) }

func (p *parser) errf(format string, args ...any) error {
	return &parseError{p.line, p.col, fmt.Sprintf(format, args...)}
}

func (p *parser) skipSpace() {
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == '\n':
			p.line++
			p.col = 1
			p.pos++
		case c == ' ' || c == '\t' || c == '\r':
			p.pos++
			p.col++
		case c == '/' && strings.HasPrefix(p.src[p.pos:], "//"):
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		default:
			return
		}
	}
}

func (p *parser) advance(n int) {
	p.pos += n
	p.col += n
}

// peek returns the next punctuation byte without consuming it (0 at EOF).
func (p *parser) peek() byte {
	p.skipSpace()
	if p.pos >= len(p.src) {
		return 0
	}
	return p.src[p.pos]
}

func (p *parser) expect(s string) error {
	p.skipSpace()
	if !strings.HasPrefix(p.src[p.pos:], s) {
		got := p.src[p.pos:min(len(p.src), p.pos+12)]
		if got == "" {
			got = "end of input"
		}
		return p.errf("expected %q, found %q", s, got)
	}
	p.advance(len(s))
	return nil
}

func (p *parser) accept(s string) bool {
	p.skipSpace()
	if strings.HasPrefix(p.src[p.pos:], s) {
		p.advance(len(s))
		return true
	}
	return false
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func (p *parser) ident() (string, error) {
	p.skipSpace()
	start := p.pos
	for p.pos < len(p.src) && isIdentByte(p.src[p.pos]) {
		p.pos++
	}
	if start == p.pos {
		return "", p.errf("expected a name, found %q", p.src[start:min(len(p.src), start+12)])
	}
	p.col += p.pos - start
	return p.src[start:p.pos], nil
}

func (p *parser) str() (string, error) {
	p.skipSpace()
	if p.pos >= len(p.src) || p.src[p.pos] != '"' {
		return "", p.errf("expected a quoted string")
	}
	end := p.pos + 1
	for end < len(p.src) && p.src[end] != '"' {
		if p.src[end] == '\\' {
			end++
		}
		if end < len(p.src) && p.src[end] == '\n' {
			return "", p.errf("unterminated string")
		}
		end++
	}
	if end >= len(p.src) {
		return "", p.errf("unterminated string")
	}
	s, err := strconv.Unquote(p.src[p.pos : end+1])
	if err != nil {
		return "", p.errf("bad string %s: %v", p.src[p.pos:end+1], err)
	}
	p.advance(end + 1 - p.pos)
	return s, nil
}

// number reads an integer or float token as text.
func (p *parser) number() (string, error) {
	p.skipSpace()
	start := p.pos
	if p.pos < len(p.src) && (p.src[p.pos] == '-' || p.src[p.pos] == '+') {
		p.pos++
	}
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		if isIdentByte(c) || ((c == '-' || c == '+') && (p.src[p.pos-1] == 'e' || p.src[p.pos-1] == 'E')) {
			p.pos++
			continue
		}
		break
	}
	if start == p.pos {
		return "", p.errf("expected a number")
	}
	p.col += p.pos - start
	return p.src[start:p.pos], nil
}

func (p *parser) int64() (int64, error) {
	s, err := p.number()
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, p.errf("bad integer %q", s)
	}
	return v, nil
}

func parseFloatText(s string) (float64, error) {
	switch s {
	case "inf", "+inf":
		return math.Inf(1), nil
	case "-inf":
		return math.Inf(-1), nil
	case "nan":
		return math.NaN(), nil
	}
	return strconv.ParseFloat(s, 64)
}

func (p *parser) float() (float64, error) {
	s, err := p.number()
	if err != nil {
		return 0, err
	}
	v, err := parseFloatText(s)
	if err != nil {
		return 0, p.errf("bad number %q", s)
	}
	return v, nil
}

func (p *parser) valueRef() (string, error) {
	if err := p.expect("%"); err != nil {
		return "", err
	}
	start := p.pos
	for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
		p.pos++
	}
	if start == p.pos {
		return "", p.errf("expected a value number after %%")
	}
	p.col += p.pos - start
	return p.src[start:p.pos], nil
}

func (p *parser) use() (*Value, error) {
	id, err := p.valueRef()
	if err != nil {
		return nil, err
	}
	v, ok := p.vals[id]
	if !ok {
		return nil, p.errf("%%%s used before its definition", id)
	}
	return v, nil
}

func (p *parser) define(id string, v *Value) error {
	if _, dup := p.vals[id]; dup {
		return p.errf("%%%s defined twice", id)
	}
	p.vals[id] = v
	return nil
}

func (p *parser) parseType() (Type, error) {
	dts, err := p.ident()
	if err != nil {
		return Type{}, err
	}
	dt, err := tensor.ParseDType(dts)
	if err != nil {
		return Type{}, p.errf("%v", err)
	}
	t := Type{DType: dt, Shape: []int64{}}
	if err := p.expect("["); err != nil {
		return Type{}, err
	}
	var labels []string
	for !p.accept("]") {
		if len(t.Shape) > 0 {
			if err := p.expect(","); err != nil {
				return Type{}, err
			}
		}
		label := ""
		if c := p.peek(); c != 0 && !unicode.IsDigit(rune(c)) && c != '-' {
			if label, err = p.ident(); err != nil {
				return Type{}, err
			}
			if err := p.expect("="); err != nil {
				return Type{}, err
			}
		}
		d, err := p.int64()
		if err != nil {
			return Type{}, err
		}
		t.Shape = append(t.Shape, d)
		labels = append(labels, label)
	}
	for _, l := range labels {
		if l != "" {
			t.Labels = labels
			break
		}
	}
	if err := checkType(t); err != nil {
		return Type{}, p.errf("type %v: %v", t, err)
	}
	return t, nil
}

func (p *parser) parseFunc() (*Func, error) {
	if err := p.expect("func"); err != nil {
		return nil, err
	}
	if err := p.expect("@"); err != nil {
		return nil, err
	}
	f := &Func{}
	var err error
	if p.peek() == '"' {
		f.Name, err = p.str()
	} else {
		f.Name, err = p.ident()
	}
	if err != nil {
		return nil, err
	}
	if err := p.expect("("); err != nil {
		return nil, err
	}
	for !p.accept(")") {
		if err := p.parseParam(f); err != nil {
			return nil, err
		}
		if !p.accept(",") && p.peek() != ')' {
			return nil, p.errf("expected ',' or ')' after a parameter")
		}
	}
	if p.accept("attributes") {
		if err := p.parseFuncAttrs(f); err != nil {
			return nil, err
		}
	}
	if err := p.expect("{"); err != nil {
		return nil, err
	}
	for {
		if p.accept("return") {
			break
		}
		n, err := p.parseNode()
		if err != nil {
			return nil, err
		}
		f.Body = append(f.Body, n)
	}
	for p.peek() == '%' {
		v, err := p.use()
		if err != nil {
			return nil, err
		}
		name, err := p.str()
		if err != nil {
			return nil, err
		}
		f.Outputs = append(f.Outputs, Output{Name: name, Value: v})
		if !p.accept(",") {
			break
		}
	}
	if err := p.expect("}"); err != nil {
		return nil, err
	}
	if p.peek() != 0 {
		return nil, p.errf("unexpected text after the function")
	}
	return f, nil
}

func (p *parser) parseParam(f *Func) error {
	id, err := p.valueRef()
	if err != nil {
		return err
	}
	if err := p.expect(":"); err != nil {
		return err
	}
	t, err := p.parseType()
	if err != nil {
		return err
	}
	rs, err := p.ident()
	if err != nil {
		return err
	}
	role := Role(255)
	for r, n := range roleNames {
		if n == rs {
			role = Role(r)
		}
	}
	if role == 255 {
		return p.errf("unknown parameter role %q (want input, weight, label or state)", rs)
	}
	name, err := p.str()
	if err != nil {
		return err
	}
	v := f.AddParam(name, role, t, nil)
	if p.accept("frozen") {
		v.Param.Frozen = true
	}
	if p.accept("origin") {
		if v.Param.Origin, err = p.str(); err != nil {
			return err
		}
		v.Param.OriginTransposed = p.accept("transposed")
	}
	if p.accept("sources") {
		if v.Param.Sources, err = p.strList(); err != nil {
			return err
		}
	}
	return p.define(id, v)
}

// parseFuncAttrs reads a function's {notes=[...], remarks=[...]}.
func (p *parser) parseFuncAttrs(f *Func) error {
	if err := p.expect("{"); err != nil {
		return err
	}
	for !p.accept("}") {
		key, err := p.ident()
		if err != nil {
			return err
		}
		if err := p.expect("="); err != nil {
			return err
		}
		var dst *[]string
		switch key {
		case "notes":
			dst = &f.Notes
		case "remarks":
			dst = &f.Remarks
		default:
			return p.errf("unknown function attribute %q (want notes or remarks)", key)
		}
		if *dst != nil {
			return p.errf("function attribute %s given twice", key)
		}
		if *dst, err = p.strList(); err != nil {
			return err
		}
		if !p.accept(",") && p.peek() != '}' {
			return p.errf("expected ',' or '}' after a function attribute")
		}
	}
	return nil
}

// strList reads ["a", "b"] (at least one string).
func (p *parser) strList() ([]string, error) {
	if err := p.expect("["); err != nil {
		return nil, err
	}
	var out []string
	for {
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
		if p.accept("]") {
			return out, nil
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseNode() (*Node, error) {
	var ids []string
	for {
		id, err := p.valueRef()
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
		if !p.accept(",") {
			break
		}
	}
	if err := p.expect("="); err != nil {
		return nil, err
	}
	opName, err := p.ident()
	if err != nil {
		return nil, err
	}
	op, ok := LookupOp(opName)
	if !ok {
		return nil, p.errf("unknown op %q", opName)
	}
	n := &Node{Op: op}
	if err := p.expect("("); err != nil {
		return nil, err
	}
	for !p.accept(")") {
		if len(n.Args) > 0 {
			if err := p.expect(","); err != nil {
				return nil, err
			}
		}
		v, err := p.use()
		if err != nil {
			return nil, err
		}
		n.Args = append(n.Args, v)
	}
	if p.accept("{") {
		for !p.accept("}") {
			if len(n.Attrs) > 0 {
				if err := p.expect(","); err != nil {
					return nil, err
				}
			}
			if err := p.parseAttr(n); err != nil {
				return nil, err
			}
		}
	}
	if err := p.expect(":"); err != nil {
		return nil, err
	}
	for i := range ids {
		if i > 0 {
			if err := p.expect(","); err != nil {
				return nil, err
			}
		}
		t, err := p.parseType()
		if err != nil {
			return nil, err
		}
		v := &Value{Type: t, Def: n, Index: i}
		n.Results = append(n.Results, v)
	}
	if p.accept("loc(") {
		if n.Name, err = p.str(); err != nil {
			return nil, err
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
	}
	for i, id := range ids {
		if err := p.define(id, n.Results[i]); err != nil {
			return nil, err
		}
	}
	return n, nil
}

func (p *parser) parseAttr(n *Node) error {
	name, err := p.ident()
	if err != nil {
		return err
	}
	spec, ok := n.Op.Info().attr(name)
	if !ok {
		return p.errf("op %s has no attribute %q", n.Op, name)
	}
	if _, dup := n.Attrs.Get(name); dup {
		return p.errf("attribute %q given twice", name)
	}
	if spec.Kind == AttrBool {
		n.Attrs = n.Attrs.With(name, true)
		return nil
	}
	if err := p.expect("="); err != nil {
		return err
	}
	var v any
	switch spec.Kind {
	case AttrInt:
		v, err = p.int64()
	case AttrFloat:
		v, err = p.float()
	case AttrString:
		v, err = p.str()
	case AttrDType:
		var s string
		if s, err = p.ident(); err == nil {
			if v, err = tensor.ParseDType(s); err != nil {
				err = p.errf("%v", err)
			}
		}
	case AttrInts:
		v, err = parseList(p, p.int64)
	case AttrFloats:
		v, err = parseList(p, p.float)
	case AttrTensor:
		v, err = p.parseTensor()
	}
	if err != nil {
		return err
	}
	n.Attrs = n.Attrs.With(name, v)
	return nil
}

func parseList[E any](p *parser, elem func() (E, error)) ([]E, error) {
	if err := p.expect("["); err != nil {
		return nil, err
	}
	out := []E{}
	for !p.accept("]") {
		if len(out) > 0 {
			if err := p.expect(","); err != nil {
				return nil, err
			}
		}
		e, err := elem()
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func (p *parser) parseTensor() (*tensor.Tensor, error) {
	t, err := p.parseType()
	if err != nil {
		return nil, err
	}
	if t.Labels != nil {
		return nil, p.errf("a constant's type has no dim labels")
	}
	n := t.Numel()
	if err := p.expect("{"); err != nil {
		return nil, err
	}
	var vals []string
	if p.accept("splat") {
		if n > maxParsedSplat {
			return nil, p.errf("splat constant of %d elements is larger than %d", n, maxParsedSplat)
		}
		s, err := p.number()
		if err != nil {
			return nil, err
		}
		vals = []string{s}
		if err := p.expect("}"); err != nil {
			return nil, err
		}
	} else {
		for !p.accept("}") {
			if len(vals) > 0 {
				if err := p.expect(","); err != nil {
					return nil, err
				}
			}
			s, err := p.number()
			if err != nil {
				return nil, err
			}
			vals = append(vals, s)
			if int64(len(vals)) > n {
				return nil, p.errf("constant %v has more than %d elements", t, n)
			}
		}
		if int64(len(vals)) != n {
			return nil, p.errf("constant %v has %d elements, expected %d", t, len(vals), n)
		}
	}
	out := tensor.New(t.DType, t.Shape...)
	for i := 0; i < int(n); i++ {
		s := vals[0]
		if len(vals) > 1 {
			s = vals[i]
		}
		if t.DType.IsFloat() {
			if out.F[i], err = parseFloatText(s); err != nil {
				return nil, p.errf("bad number %q", s)
			}
		} else if out.I[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return nil, p.errf("bad integer %q", s)
		}
	}
	out.RoundTo(t.DType)
	return out, nil
}
