package strongswan

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan/swanconf"
)

// SwanctlConf writes c as swanctl.conf text for the gateway's ConfigMap. It walks the same
// vici-tagged structures the agent marshals for load-conn, with govici's rules (tag names as
// keys, empty elements left out, bools as yes/no, []string as comma-separated lists, structs
// and maps as sections, map keys sorted but children in the order charon gets them), so the text shows exactly what charon runs. Every
// value is double-quoted and escaped; a name or value that cannot be written safely is an
// error naming its path. Pre-shared keys appear only as comments naming their Secret.
func (c *Config) SwanctlConf() (string, error) {
	w := &confWriter{}
	if err := w.comment("swanctl.conf of VPNGateway " + c.Gateway + ", rendered by bnerd-vpn-operator."); err != nil {
		return "", err
	}
	w.line("# The gateway agent loads this configuration over VICI; editing it changes nothing.")
	w.line("")
	w.open("connections")
	for _, conn := range c.Connections {
		path := "connections." + conn.Name
		if err := swanconf.CheckName(conn.Name); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if err := w.comment("peer " + conn.Peer); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		w.open(conn.Name)
		w.children = conn.ChildNames()
		if err := w.body(reflect.ValueOf(conn.IKE), path); err != nil {
			return "", err
		}
		w.children = nil
		w.close()
	}
	w.close()
	if len(c.SharedKeys) > 0 {
		w.line("")
		w.line("# Pre-shared keys are not part of this file: the gateway agent loads each from its")
		w.line("# Kubernetes Secret (load-shared) under the id shown.")
		w.line("# secrets {")
		for _, k := range c.SharedKeys {
			owners := make([]string, len(k.Owners))
			for i, o := range k.Owners {
				owners[i] = strconv.Quote(o)
			}
			if err := w.comment(fmt.Sprintf("    %s: Secret %q key %q, owners %s",
				k.ID, k.Secret.Name, k.Secret.Key, strings.Join(owners, ", "))); err != nil {
				return "", fmt.Errorf("shared key %s: %w", k.ID, err)
			}
		}
		w.line("# }")
	}
	return w.b.String(), nil
}

type confWriter struct {
	b      strings.Builder
	indent int
	// children is the order of the connection being written's children.
	children []string
}

func (w *confWriter) line(s string) {
	if s != "" {
		w.b.WriteString(strings.Repeat("    ", w.indent))
	}
	w.b.WriteString(s)
	w.b.WriteByte('\n')
}

func (w *confWriter) comment(s string) error {
	if err := swanconf.CheckComment(s); err != nil {
		return err
	}
	w.line("# " + s)
	return nil
}

func (w *confWriter) open(name string) {
	w.line(name + " {")
	w.indent++
}

func (w *confWriter) close() {
	w.indent--
	w.line("}")
}

// viciTag mirrors govici's struct tag rules: `vici:"name"` or `vici:",inline"`; no tag, an
// empty name without inline, or "-" skip the field.
func viciTag(f reflect.StructField) (name string, inline, skip bool) {
	tag, ok := f.Tag.Lookup("vici")
	if !ok || !f.IsExported() {
		return "", false, true
	}
	parts := strings.Split(tag, ",")
	name = parts[0]
	inline = slices.Contains(parts[1:], "inline")
	skip = (!inline && name == "") || name == "-"
	return name, inline, skip
}

// emptyElement mirrors govici: empty strings, nil or empty slices and maps, nil pointers and
// structs whose fields are all empty are left out; numbers and bools never are.
func emptyElement(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice, reflect.Map:
		return v.Len() == 0
	case reflect.Pointer, reflect.Interface:
		return v.IsNil()
	case reflect.String:
		return v.Len() == 0
	case reflect.Struct:
		for i := range v.NumField() {
			if !emptyElement(v.Field(i)) {
				return false
			}
		}
		return true
	}
	return false
}

func (w *confWriter) body(v reflect.Value, path string) error {
	t := v.Type()
	for i := range t.NumField() {
		name, inline, skip := viciTag(t.Field(i))
		if skip {
			continue
		}
		fv := v.Field(i)
		if inline {
			if fv.Kind() != reflect.Struct {
				return fmt.Errorf("%s: inline field %s is not a struct", path, t.Field(i).Name)
			}
			if err := w.body(fv, path); err != nil {
				return err
			}
			continue
		}
		if emptyElement(fv) {
			continue
		}
		if err := w.field(name, fv, path+"."+name); err != nil {
			return err
		}
	}
	return nil
}

func (w *confWriter) field(name string, v reflect.Value, path string) error {
	if err := swanconf.CheckName(name); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	var value string
	switch v.Kind() {
	case reflect.String:
		value = v.String()
	case reflect.Bool:
		value = "no"
		if v.Bool() {
			value = "yes"
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		value = strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		value = strconv.FormatUint(v.Uint(), 10)
	case reflect.Slice:
		items, ok := v.Interface().([]string)
		if !ok {
			return fmt.Errorf("%s: unsupported list type %s", path, v.Type())
		}
		q, err := swanconf.QuoteList(items)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		w.line(name + " = " + q)
		return nil
	case reflect.Struct:
		w.open(name)
		if err := w.body(v, path); err != nil {
			return err
		}
		w.close()
		return nil
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return fmt.Errorf("%s: map keys must be strings", path)
		}
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		slices.Sort(keys)
		if name == "children" && w.children != nil {
			keys = w.children // the order charon gets them in over VICI (Connection.ChildNames)
		}
		w.open(name)
		for _, k := range keys {
			if err := w.field(k, v.MapIndex(reflect.ValueOf(k).Convert(v.Type().Key())), path+"."+k); err != nil {
				return err
			}
		}
		w.close()
		return nil
	default:
		return fmt.Errorf("%s: unsupported type %s", path, v.Type())
	}
	q, err := swanconf.Quote(value)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	w.line(name + " = " + q)
	return nil
}
