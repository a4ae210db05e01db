package pgconnector_test

import (
	"os"
	"reflect"
	"regexp"
	"testing"

	"github.com/pgconnector/pgconnector"
)

// TestAliasDocsListFields checks that the doc comment of each type settings.go re-exports lists
// every exported field of the type, with its type: go doc shows an alias's comment, not the
// fields of the type behind it.
func TestAliasDocsListFields(t *testing.T) {
	src, err := os.ReadFile("settings.go")
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{"Settings": pgconnector.Settings{}, "Keepalives": pgconnector.Keepalives{},
		"ParseError": pgconnector.ParseError{}, "Keyword": pgconnector.Keyword{}, "OAuthKeys": pgconnector.OAuthKeys{}} {
		typ := reflect.TypeOf(v)
		block := regexp.MustCompile(`((?://[^\n]*\n)+)type ` + name + ` = `).FindSubmatch(src)
		if block == nil {
			t.Errorf("settings.go: no doc comment for %s", name)
			continue
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			if !regexp.MustCompile(`(?m)^//\t` + f.Name + ` +\S`).Match(block[1]) {
				t.Errorf("the doc comment of %s does not list its field %s", name, f.Name)
			}
		}
	}
}
