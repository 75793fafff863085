package onnx

// Nodes the exporter's common-subexpression elimination merged, split back.
//
// onnxscript's optimizer merges initializers with equal values, then CSE merges the
// nodes that compute the same thing from the same inputs. GPT-NeoX's parallel
// residual, x + attn(ln1(x)) + mlp(ln2(x)), reads x through two freshly initialised
// LayerNorms: their scales (ones) and biases (zeros) merge, the two LayerNorm nodes
// become one, and PyTorch's second norm is gone from the graph. Training the file
// as written trains one shared norm.
//
// The readers still say what they read: each ONNX node records its FX node, whose
// arguments name the FX values it read ("%layer_norm_1"). A reader of ONNX value X
// (made by a node of FX name X) whose FX node read, instead of X, an FX value Y of
// the same op that no ONNX node makes, read a CSE'd copy of X's node. Y's parameters
// are among the ones no node reads any more (the graph signature still lists them):
// for each parameter of X's node, the unread parameter of the same kind ("weight",
// "bias") whose module shares the longest prefix with the reader's module scope
// (layer 0's post_attention_layernorm for layer 0's MLP). When that pick is unique
// and consistent, Y gets its node back: a copy of X's node, recorded as reading Y's
// parameters, which the reader reads instead of X. planParams then gives the copy
// its own weights as it does for any merged initializer. When the pick is not
// unique, the unread parameters are reported (paramPlan.untrained) and lcc train
// refuses the model.

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
)

// fxNameRE reads an FX node's own name: "%layer_norm : [num_users=1] = ...".
var fxNameRE = regexp.MustCompile(`^%([A-Za-z0-9_]+) :`)

// fxValueRE finds the FX values an FX node's arguments name.
var fxValueRE = regexp.MustCompile(`%([A-Za-z0-9_]+)`)

// nameScopesKey is the metadata key of a node's module scopes, outermost first
// and ending with the FX node's name: [”, 'm', 'm.layers.0', 'm.layers.0.mlp', 'linear_2'].
const nameScopesKey = "pkg.torch.onnx.name_scopes"

// trailingNumber strips an FX name's counter: "layer_norm_1" -> "layer_norm".
var trailingNumber = regexp.MustCompile(`(_[0-9]+)+$`)

// cseSplit is what splitCSE did, for the user.
type cseSplit struct {
	remarks []string
	// unread lists parameters some reader read through a merged node that could not
	// be told apart: training would not train them as PyTorch does.
	unread []string
	// origin[k] is the index in the model of node k of the split graph, which is a
	// copy of that node when copied[k] (nil when nothing was split).
	origin []int
	copied []bool
}

// splitCSE returns m with each CSE'd node that the provenance can tell apart given
// back to its readers (see the file comment), and what it did. m itself is not
// changed.
func splitCSE(m *Model, prov *provenance) (*Model, cseSplit) {
	var out cseSplit
	g := &m.Graph
	made := map[string]int{} // ONNX value -> index of the node making it
	for i, n := range g.Nodes {
		for _, o := range n.Outputs {
			made[o] = i
		}
	}
	known := func(v string) bool {
		_, node := made[v]
		_, init := g.Initializers[v]
		_, param := prov.target[v]
		return node || init || param
	}
	for _, in := range g.Inputs {
		made[in.Name] = -1
	}
	unread := unreadParams(m, prov)
	placeholder := map[string]string{} // parameter -> its placeholder
	for ph, p := range prov.target {
		placeholder[p] = ph
	}

	type copyOf struct {
		node   int               // the node to copy
		params map[string]string // the node's parameter -> the copy's
	}
	copies := map[string]*copyOf{} // Y -> its copy
	reads := map[int]map[string]string{}
	claimed := map[string]bool{}
	for j := range g.Nodes {
		c := &g.Nodes[j]
		args := fxValues(c)
		for _, x := range c.Inputs {
			y := mergedRead(args, x, known)
			if y == "" {
				continue
			}
			i, ok := made[x]
			if _, init := g.Initializers[x]; init {
				// A constant folded from a parameter's arithmetic (Gemma's 1 + w), merged
				// with another's: the reader's module names the parameter it read, but
				// its value in the constant is unknown.
				if p := scopeParam(moduleScope(c), unread); p != "" {
					out.unread = append(out.unread, p)
				}
				continue
			}
			if !ok || i < 0 || fxName(&g.Nodes[i]) != x {
				continue
			}
			own := prov.nodeParams(&g.Nodes[i])
			if len(own) == 0 {
				continue // a copy of a node without parameters computes the same
			}
			cp, done := copies[y]
			if !done {
				params, ok := pickUnread(own, unread, moduleScope(c), claimed)
				if !ok || g.Nodes[i].Outputs[0] != x {
					// Which of the unread parameters of these kinds y read is unknown.
					for _, u := range unread {
						if !claimed[u] && slices.ContainsFunc(own, func(p string) bool {
							return lastComponent(p) == lastComponent(u)
						}) {
							out.unread = append(out.unread, u)
						}
					}
					continue
				}
				cp = &copyOf{node: i, params: params}
				copies[y] = cp
			}
			if reads[j] == nil {
				reads[j] = map[string]string{}
			}
			reads[j][x] = y
		}
	}
	if len(copies) == 0 {
		out.unread = uniqueSorted(out.unread)
		return m, out
	}

	// The copy goes right after the node it copies; readers read it.
	after := map[int][]string{}
	for y, cp := range copies {
		after[cp.node] = append(after[cp.node], y)
	}
	split := *m
	split.Graph.Nodes = nil
	for i, n := range g.Nodes {
		if r := reads[i]; r != nil {
			n.Inputs = append([]string(nil), n.Inputs...)
			for k, in := range n.Inputs {
				if y, ok := r[in]; ok {
					n.Inputs[k] = y
				}
			}
		}
		split.Graph.Nodes = append(split.Graph.Nodes, n)
		out.origin, out.copied = append(out.origin, i), append(out.copied, false)
		sort.Strings(after[i])
		for _, y := range after[i] {
			cp := copies[y]
			split.Graph.Nodes = append(split.Graph.Nodes, copyNode(n, y, cp.params, placeholder))
			out.origin, out.copied = append(out.origin, i), append(out.copied, true)
			var ps []string
			for _, p := range cp.params {
				ps = append(ps, p)
			}
			sort.Strings(ps)
			out.remarks = append(out.remarks, fmt.Sprintf("%s (merged by the exporter's CSE into %s; "+
				"read by the FX value %%%s)", strings.Join(ps, ", "), n.Name, y))
		}
	}
	out.unread = uniqueSorted(out.unread)
	return &split, out
}

// mergedRead returns the FX value a reader whose FX node read args read instead
// of ONNX value x: the one value of x's op (its FX name less the counter) that the
// file does not know; "" when the reader read x itself or that is unclear.
func mergedRead(args []string, x string, known func(string) bool) string {
	if len(args) == 0 || hasString(args, x) {
		return ""
	}
	y := ""
	for _, a := range args {
		if known(a) || trailingNumber.ReplaceAllString(a, "") != trailingNumber.ReplaceAllString(x, "") {
			continue
		}
		if y != "" && y != a {
			return ""
		}
		y = a
	}
	return y
}

// scopeParam is the unread parameter held by the module scope itself, if any.
func scopeParam(scope string, unread []string) string {
	for _, p := range unread {
		if scope != "" && moduleOf(p) == scope {
			return p
		}
	}
	return ""
}

// copyNode is n computing FX value y from the parameters params gives for n's.
func copyNode(n Node, y string, params, placeholder map[string]string) Node {
	c := n
	c.Name = n.Name + "/" + y
	c.Outputs = append([]string{y}, make([]string, len(n.Outputs)-1)...)
	c.Metadata = map[string]string{}
	for k, v := range n.Metadata {
		c.Metadata[k] = v
	}
	fx := fxNameRE.ReplaceAllString(n.Metadata[fxNode], "%"+y+" :")
	for from, to := range params {
		fx = strings.ReplaceAll(fx, "%"+placeholder[from]+",", "%"+placeholder[to]+",")
		fx = strings.ReplaceAll(fx, "%"+placeholder[from]+")", "%"+placeholder[to]+")")
	}
	c.Metadata[fxNode] = fx
	return c
}

// pickUnread chooses, for each parameter of a merged node, the unread parameter of
// the same kind whose module shares the longest prefix with scope; the picks must
// be unique, unclaimed and of one module. It claims them.
func pickUnread(params, unread []string, scope string, claimed map[string]bool) (map[string]string, bool) {
	if len(params) == 0 {
		return nil, false
	}
	out := map[string]string{}
	module := ""
	for _, p := range params {
		best, bestLen, tie := "", -1, false
		for _, u := range unread {
			if claimed[u] || lastComponent(u) != lastComponent(p) {
				continue
			}
			switch n := commonPrefix(moduleOf(u), scope); {
			case n > bestLen:
				best, bestLen, tie = u, n, false
			case n == bestLen:
				tie = true
			}
		}
		if best == "" || tie || (module != "" && moduleOf(best) != module) {
			return nil, false
		}
		module = moduleOf(best)
		out[p] = best
	}
	for _, u := range out {
		claimed[u] = true
	}
	return out, true
}

// unreadParams lists the signature's parameters that no initializer holds by name
// and no node's FX node reads.
func unreadParams(m *Model, prov *provenance) []string {
	read := map[string]bool{}
	for i := range m.Graph.Nodes {
		for _, p := range prov.nodeParams(&m.Graph.Nodes[i]) {
			read[p] = true
		}
	}
	var out []string
	for p := range prov.order {
		if _, init := m.Graph.Initializers[p]; !init && !read[p] {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return prov.order[out[i]] < prov.order[out[j]] })
	return out
}

// fxName is the name of n's FX node ("" without one).
func fxName(n *Node) string {
	if mm := fxNameRE.FindStringSubmatch(n.Metadata[fxNode]); mm != nil {
		return mm[1]
	}
	return ""
}

// fxValues lists the FX values n's FX node reads.
func fxValues(n *Node) []string {
	var out []string
	for _, mm := range fxValueRE.FindAllStringSubmatch(fxArgs(n.Metadata[fxNode]), -1) {
		out = append(out, mm[1])
	}
	return out
}

// moduleScope is the innermost module n's node was made in ("m.layers.0.mlp.fc"),
// from its name scopes, which end with the FX node's own name.
func moduleScope(n *Node) string {
	parts := parseList(n.Metadata[nameScopesKey])
	if len(parts) < 2 {
		return ""
	}
	return parts[len(parts)-2]
}

// parseList reads a Python list literal of strings: "['a', 'b.c']" -> [a b.c].
func parseList(s string) []string {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return nil
	}
	var out []string
	for _, part := range strings.Split(s[1:len(s)-1], ",") {
		if part = strings.TrimSpace(part); len(part) >= 2 {
			out = append(out, strings.Trim(part, "'\""))
		}
	}
	return out
}

// moduleOf is the module holding parameter p: "a.b.weight" -> "a.b".
func moduleOf(p string) string {
	if i := strings.LastIndex(p, "."); i >= 0 {
		return p[:i]
	}
	return ""
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func uniqueSorted(xs []string) []string {
	sort.Strings(xs)
	var out []string
	for i, x := range xs {
		if i == 0 || x != xs[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// splitProto gives the file's nodes the split graph's shape: each node of split
// from its proto (its inputs as split reads them), each copy a clone of its
// original's proto with the copy's name, outputs and FX node.
func splitProto(nodes []*onnxpb.NodeProto, split *Model, cse cseSplit) []*onnxpb.NodeProto {
	out := make([]*onnxpb.NodeProto, len(split.Graph.Nodes))
	for k, n := range split.Graph.Nodes {
		p := nodes[cse.origin[k]]
		if cse.copied[k] {
			p = proto.Clone(p).(*onnxpb.NodeProto)
			p.Name, p.Output = proto.String(n.Name), append([]string(nil), n.Outputs...)
			for _, e := range p.MetadataProps {
				if e.GetKey() == fxNode {
					e.Value = proto.String(n.Metadata[fxNode])
				}
			}
		}
		p.Input = append([]string(nil), n.Inputs...)
		out[k] = p
	}
	return out
}
