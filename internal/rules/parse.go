package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxFileBytes bounds a rules file.
const MaxFileBytes = 1 << 20

// rulesFile is the top level of a rules file.
type rulesFile struct {
	Rules []Rule `yaml:"rules"`
}

// Parse reads a rules file: a YAML mapping with one key, rules, a list of
// rules. Parsing is strict: an unknown key anywhere is an error naming its
// line and the valid keys, as is a value of the wrong type, a duplicate key,
// a second YAML document or an empty list. Every returned rule has its
// defaults filled in (DefaultRule, then EnsureDefaults); it is not yet
// validated. name is used in messages only.
func Parse(name string, data []byte) ([]Rule, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("rules: %s: %d bytes, at most %d", name, len(data), MaxFileBytes)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("rules: %s: empty file, want a mapping with a rules list", name)
		}
		return nil, fmt.Errorf("rules: %s: %w", name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("rules: %s: more than one YAML document (only one is read)", name)
	}
	root := resolve(&doc)
	if root == nil || root.Kind == yaml.DocumentNode && len(root.Content) == 0 {
		return nil, fmt.Errorf("rules: %s: empty file, want a mapping with a rules list", name)
	}
	if root.Kind == yaml.DocumentNode {
		root = resolve(root.Content[0])
	}
	var errs []error
	c := &keyChecker{name: name, errs: &errs, budget: maxVisits}
	c.check(root, reflect.TypeFor[rulesFile](), "", nil, 0)
	if c.budget < 0 {
		return nil, errTooComplex(name)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	list := resolve(mappingValue(root, "rules"))
	if list == nil || list.Kind != yaml.SequenceNode || len(list.Content) == 0 {
		line := root.Line
		if list != nil {
			line = list.Line
		}
		return nil, fmt.Errorf("rules: %s: line %d: rules must be a non-empty list of rules", name, line)
	}
	rules := make([]Rule, 0, len(list.Content))
	budget := maxVisits
	for i, item := range list.Content {
		item = resolve(item)
		r := DefaultRule()
		if err := item.Decode(&r); err != nil {
			errs = append(errs, fmt.Errorf("rules: %s: rule #%d (line %d): %w", name, i+1, item.Line, err))
			continue
		}
		r.file, r.index, r.line = name, i, item.Line
		r.pos = map[string]int{}
		positions(item, "", r.pos, 0, &budget)
		if budget < 0 {
			return nil, errTooComplex(name)
		}
		r.EnsureDefaults()
		rules = append(rules, r)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rules, nil
}

// ReadFile reads and parses the rules file at path.
func ReadFile(path string) ([]Rule, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("rules: read %s: %w", path, err)
	}
	return Parse(path, data)
}

// maxDepth bounds alias chains and nesting while walking nodes (the schema
// is three levels deep); maxVisits bounds the nodes a walk visits, since
// aliases and merge keys can make a small document exponentially large.
const (
	maxDepth  = 16
	maxVisits = 100_000
)

func errTooComplex(name string) error {
	return fmt.Errorf("rules: %s: document too complex: more than %d nodes once aliases and merge keys are expanded", name, maxVisits)
}

// resolve follows aliases.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < maxDepth; i++ {
		n = n.Alias
	}
	if n != nil && n.Kind == yaml.AliasNode {
		return nil
	}
	return n
}

func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// mergedMappings returns the mappings a merge key (<<) brings in.
func mergedMappings(v *yaml.Node) []*yaml.Node {
	v = resolve(v)
	if v == nil {
		return nil
	}
	if v.Kind == yaml.SequenceNode {
		var out []*yaml.Node
		for _, x := range v.Content {
			if x = resolve(x); x != nil && x.Kind == yaml.MappingNode {
				out = append(out, x)
			}
		}
		return out
	}
	if v.Kind == yaml.MappingNode {
		return []*yaml.Node{v}
	}
	return nil
}

// keyChecker reports unknown and repeated keys of mappings decoded into
// structs, with their lines and the valid keys.
type keyChecker struct {
	name   string
	errs   *[]error
	budget int // nodes left to visit; < 0: gave up
	fields map[reflect.Type]map[string]reflect.Type
}

func (c *keyChecker) check(n *yaml.Node, t reflect.Type, path string, seen map[string]int, depth int) {
	n = resolve(n)
	if c.budget--; n == nil || depth > maxDepth || c.budget < 0 {
		return
	}
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		fields := c.fields[t]
		if fields == nil {
			if c.fields == nil {
				c.fields = map[reflect.Type]map[string]reflect.Type{}
			}
			fields = yamlFields(t)
			c.fields[t] = fields
		}
		if seen == nil {
			seen = map[string]int{}
		}
		for i := 0; i+1 < len(n.Content) && c.budget >= 0; i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" || k.Value == "<<" && k.Kind == yaml.ScalarNode && k.Style == 0 {
				// Merged keys may be overridden by explicit ones: they are
				// checked on their own.
				for _, m := range mergedMappings(v) {
					if c.budget < 0 {
						break
					}
					c.check(m, t, path, nil, depth+1)
				}
				continue
			}
			ft, ok := fields[k.Value]
			if !ok {
				valid := make([]string, 0, len(fields))
				for f := range fields {
					valid = append(valid, f)
				}
				slices.Sort(valid)
				*c.errs = append(*c.errs, fmt.Errorf("rules: %s: line %d: %s: unknown key %q (valid: %s)",
					c.name, k.Line, orTop(path), k.Value, strings.Join(valid, ", ")))
				continue
			}
			if first, dup := seen[k.Value]; dup && first != k.Line {
				*c.errs = append(*c.errs, fmt.Errorf("rules: %s: line %d: %s: key %q given twice (first at line %d)",
					c.name, k.Line, orTop(path), k.Value, first))
				continue
			}
			seen[k.Value] = k.Line
			c.check(v, ft, join(path, k.Value), nil, depth+1)
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, item := range n.Content {
			c.check(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i), nil, depth+1)
		}
	}
	// Anything else is a scalar or a type mismatch, which Decode reports.
}

func orTop(path string) string {
	if path == "" {
		return "top level"
	}
	return path
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// yamlFields maps the YAML keys of struct type t to their field types;
// types with their own UnmarshalYAML are leaves.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || tag == "" || tag == "-" {
			continue
		}
		ft := f.Type
		if reflect.PointerTo(ft).Implements(reflect.TypeFor[yaml.Unmarshaler]()) {
			ft = reflect.TypeFor[string]() // a leaf
		}
		out[tag] = ft
	}
	return out
}

// positions records the line of every key under n (a rule's mapping),
// as dotted paths relative to the rule.
func positions(n *yaml.Node, path string, pos map[string]int, depth int, budget *int) {
	n = resolve(n)
	if *budget--; n == nil || n.Kind != yaml.MappingNode || depth > maxDepth || *budget < 0 {
		return
	}
	// Explicit keys first: they override merged ones (<<).
	for i := 0; i+1 < len(n.Content) && *budget >= 0; i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Tag == "!!merge" {
			continue
		}
		p := join(path, k.Value)
		if _, ok := pos[p]; !ok {
			pos[p] = k.Line
		}
		positions(v, p, pos, depth+1, budget)
	}
	for i := 0; i+1 < len(n.Content) && *budget >= 0; i += 2 {
		if k := n.Content[i]; k.Tag == "!!merge" {
			for _, m := range mergedMappings(n.Content[i+1]) {
				if *budget < 0 {
					break
				}
				positions(m, path, pos, depth+1, budget)
			}
		}
	}
}
