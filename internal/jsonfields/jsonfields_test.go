package jsonfields

import (
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	for _, tt := range []struct {
		in, want string // want: the error, or the fields a and b read as "a|b" (- when not seen)
	}{
		{`{"a":"x","b":"y"}`, "x|y"},
		{`{"b":"y","c":{"a":"nested","d":[1,{"e":null}]},"e":[]}`, "-|y"},
		{` { } `, "-|-"},
		{`{"a":"x","a":"z"}`, `field "a" is duplicated`},
		{`{"a":1}`, `field "a" must be a string`},
		{`{"a":null}`, `field "a" must be a string`},
		{`{"a":["x"]}`, `field "a" must be a string`},
		{`["a"]`, "top-level element must be an object"},
		{`"a"`, "top-level element must be an object"},
		{`{"a":"x"}{"b":"y"}`, "invalid JSON"},
		{`{"a":"x"`, "invalid JSON"},
		{``, "invalid JSON"},
		{`{"c":` + strings.Repeat("[", 3) + strings.Repeat("]", 3) + `}`, "-|-"},
		{`{"c":` + strings.Repeat("[", 4) + strings.Repeat("]", 4) + `}`, "JSON is too deeply nested"},
		{`{"c":{"d":{"e":{}}}}`, "-|-"},
		{`{"c":{"d":{"e":{"f":{}}}}}`, "JSON is too deeply nested"},
	} {
		var a, b string
		fields := []Field{{Name: "a", To: &a}, {Name: "b", To: &b}}
		got := ""
		if err := Read([]byte(tt.in), 4, fields); err != nil {
			got = err.Error()
		} else {
			for i, f := range fields {
				v := *f.To
				if !f.Seen {
					v = "-"
				}
				if i > 0 {
					got += "|"
				}
				got += v
			}
		}
		if got != tt.want {
			t.Errorf("Read(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
