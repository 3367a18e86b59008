// Command go-type-schema writes the type schema that kthena-controller's Go-identical
// revision hash reads (kthena-controller/src/serving/revision/go_types.json): every Go type
// reachable from []v1alpha1.Role, keyed by reflect.Type.String() (the type string go-spew
// prints), with its kind and, for structs, the fields in Go order (Go name, JSON name,
// inline, type), unexported ones included. Types that decode JSON with their own
// UnmarshalJSON carry "json": the name of that decoder.
//
// Regenerate: cd scripts/go-type-schema && go run . > ../../kthena-controller/src/serving/revision/go_types.json
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"kthena.local/go-type-schema/v1alpha1"
)

type field struct {
	Go     string `json:"go"`
	JSON   string `json:"json,omitempty"`
	Inline bool   `json:"inline,omitempty"`
	Type   string `json:"type"`
}

type typ struct {
	Kind   string  `json:"kind"`
	JSON   string  `json:"json,omitempty"`
	Bits   int     `json:"bits,omitempty"`
	Elem   string  `json:"elem,omitempty"`
	Key    string  `json:"key,omitempty"`
	Fields []field `json:"fields,omitempty"`
}

// customJSON names the types with their own UnmarshalJSON that can appear under a Role.
var customJSON = map[string]string{
	"k8s.io/apimachinery/pkg/api/resource.Quantity":   "quantity",
	"k8s.io/apimachinery/pkg/util/intstr.IntOrString": "intorstring",
	"k8s.io/apimachinery/pkg/apis/meta/v1.Time":       "time",
	"k8s.io/apimachinery/pkg/apis/meta/v1.FieldsV1":   "fieldsv1",
	"k8s.io/apimachinery/pkg/apis/meta/v1.MicroTime":  "time",
	"k8s.io/apimachinery/pkg/apis/meta/v1.Duration":   "duration",
}

var unmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

type schema struct {
	Root  string         `json:"root"`
	Types map[string]typ `json:"types"`
	full  map[string]string
}

func (s *schema) add(t reflect.Type, decoded bool) string {
	name := t.String()
	full := t.PkgPath() + "." + t.Name()
	if t.Name() == "" {
		full = name
	}
	if prev, ok := s.full[name]; ok {
		if prev != full {
			panic(fmt.Sprintf("type string %s names %s and %s", name, prev, full))
		}
		return name
	}
	s.full[name] = full
	out := typ{}
	custom := ""
	if reflect.PointerTo(t).Implements(unmarshaler) && t.Kind() != reflect.Pointer {
		var ok bool
		custom, ok = customJSON[full]
		if !ok && decoded {
			panic("no decoder for " + full)
		}
		out.JSON = custom
	}
	inner := decoded && custom == ""
	switch t.Kind() {
	case reflect.Bool, reflect.String:
		out.Kind = t.Kind().String()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		out.Kind, out.Bits = "int", t.Bits()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		out.Kind, out.Bits = "uint", t.Bits()
	case reflect.Float32, reflect.Float64:
		out.Kind, out.Bits = "float", t.Bits()
	case reflect.Pointer, reflect.Slice:
		out.Kind = strings.ToLower(t.Kind().String())
		if out.Kind == "pointer" {
			out.Kind = "ptr"
		}
		s.Types[name] = out
		out.Elem = s.add(t.Elem(), inner)
	case reflect.Map:
		out.Kind = "map"
		s.Types[name] = out
		out.Key = s.add(t.Key(), inner)
		out.Elem = s.add(t.Elem(), inner)
	case reflect.Struct:
		out.Kind = "struct"
		s.Types[name] = out
		out.Fields = s.fields(t, inner)
	default:
		panic(fmt.Sprintf("unsupported kind %s of %s", t.Kind(), full))
	}
	s.Types[name] = out
	return name
}

func (s *schema) fields(t reflect.Type, decoded bool) []field {
	fields := []field{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		out := field{Go: f.Name}
		tag := strings.Split(f.Tag.Get("json"), ",")[0]
		exported := f.IsExported()
		switch {
		case tag == "-" || (!exported && !f.Anonymous):
		case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
			out.Inline = true
		case tag == "":
			out.JSON = f.Name
		default:
			out.JSON = tag
		}
		fieldDecoded := decoded && (out.JSON != "" || out.Inline)
		out.Type = s.add(f.Type, fieldDecoded)
		fields = append(fields, out)
	}
	return fields
}

func main() {
	s := &schema{Types: map[string]typ{}, full: map[string]string{}}
	s.Root = s.add(reflect.TypeOf([]v1alpha1.Role{}), true)
	keys := make([]string, 0, len(s.Types))
	for k := range s.Types {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
}
