// Package jsonfields reads the top-level string fields of a JSON object sent by a peer not yet
// trusted (a server's OAUTHBEARER error, an issuer's discovery document) with libpq 18's rules
// (fe-auth-oauth.c and libpq-oauth's oauth-curl.c, their JSON callbacks): the document a single
// object, nested at most a given depth, each field read at most once and of type string; the
// other fields skipped whatever they hold. The caller bounds the input's size.
package jsonfields

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Field is a top-level field to read: Name, the string it goes To, and whether it was Seen.
type Field struct {
	Name string
	To   *string
	Seen bool
}

// Read reads data, which must be one JSON object nested at most maxNesting levels (the object
// itself is level 1), into fields. Its errors, libpq's texts, never hold the input: "invalid
// JSON", "top-level element must be an object", "JSON is too deeply nested", `field "x" must be
// a string`, `field "x" is duplicated`. A field of fields missing from data is not an error:
// its Seen stays false.
func Read(data []byte, maxNesting int, fields []Field) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	depth := 0
	top := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return errors.New("invalid JSON")
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				if depth == 0 && d == '[' {
					return errors.New("top-level element must be an object")
				}
				depth++
				top = true
				if depth > maxNesting {
					return errors.New("JSON is too deeply nested")
				}
			default:
				depth--
				if depth == 0 && dec.More() {
					return errors.New("invalid JSON")
				}
			}
			continue
		}
		if depth == 0 {
			return errors.New("top-level element must be an object")
		}
		name, isKey := tok.(string)
		if depth != 1 || !isKey {
			continue // a value of a field not read, or a nested key
		}
		f := find(fields, name)
		if f == nil {
			if err := skipValue(dec, depth, maxNesting); err != nil {
				return err
			}
			continue
		}
		v, err := dec.Token()
		if err != nil {
			return errors.New("invalid JSON")
		}
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("field %q must be a string", name)
		}
		if f.Seen {
			return fmt.Errorf("field %q is duplicated", name)
		}
		f.Seen = true
		*f.To = s
	}
	if depth != 0 || !top {
		return errors.New("invalid JSON")
	}
	return nil
}

func find(fields []Field, name string) *Field {
	for i := range fields {
		if fields[i].Name == name {
			return &fields[i]
		}
	}
	return nil
}

// skipValue reads one value of dec (a scalar, or an object or array with what it holds),
// holding the nesting limit: depth is the nesting the value is at.
func skipValue(dec *json.Decoder, depth, maxNesting int) error {
	level := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return errors.New("invalid JSON")
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				level++
				if depth+level > maxNesting {
					return errors.New("JSON is too deeply nested")
				}
			} else {
				level--
			}
		}
		if level == 0 {
			return nil
		}
	}
}
