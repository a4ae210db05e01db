package pgconnector_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/ngrok/sqlmw"

	"github.com/pgconnector/pgconnector"
)

// driverTypes are the types of what a database/sql connection hands out, by what it is.
type driverTypes map[string]reflect.Type

// typesOf opens a connection of db and records the types of the connection, a prepared
// statement, the rows of a query and of a prepared statement's query, and a transaction.
func typesOf(t *testing.T, db *sql.DB) driverTypes {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	types := driverTypes{}
	err = conn.Raw(func(dc any) error {
		types["conn"] = reflect.TypeOf(dc)
		rows, err := dc.(driver.QueryerContext).QueryContext(ctx, "select 1", nil)
		if err != nil {
			return err
		}
		types["rows"] = reflect.TypeOf(rows)
		rows.Close()
		st, err := dc.(driver.ConnPrepareContext).PrepareContext(ctx, "select $1::int")
		if err != nil {
			return err
		}
		defer st.Close()
		types["stmt"] = reflect.TypeOf(st)
		rows, err = st.(driver.StmtQueryContext).QueryContext(ctx, []driver.NamedValue{{Ordinal: 1, Value: int64(1)}})
		if err != nil {
			return err
		}
		types["stmt rows"] = reflect.TypeOf(rows)
		rows.Close()
		tx, err := dc.(driver.ConnBeginTx).BeginTx(ctx, driver.TxOptions{})
		if err != nil {
			return err
		}
		types["tx"] = reflect.TypeOf(tx)
		return tx.Rollback()
	})
	if err != nil {
		t.Fatal(err)
	}
	return types
}

// methods lists the exported methods of typ with their signatures, receiver left out.
func methods(typ reflect.Type) []string {
	var out []string
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		in := make([]string, 0, m.Type.NumIn()-1)
		for j := 1; j < m.Type.NumIn(); j++ {
			in = append(in, m.Type.In(j).String())
		}
		outs := make([]string, 0, m.Type.NumOut())
		for j := range m.Type.NumOut() {
			outs = append(outs, m.Type.Out(j).String())
		}
		out = append(out, m.Name+"("+strings.Join(in, ", ")+") ("+strings.Join(outs, ", ")+")")
	}
	return out
}

// implemented lists the interfaces of database/sql/driver among driverInterfaces that typ
// implements.
func implemented(typ reflect.Type) []string {
	var out []string
	for _, it := range driverInterfaces {
		if typ.Implements(it) {
			out = append(out, it.Name())
		}
	}
	return out
}

// The connections of a Connector with statement spans (the default), and the statements, rows
// and transactions they hand out, have the methods of pgx's driver types and no other, under
// the Go release the test is built with: database/sql finds the same optional interfaces on
// both (as of Go 1.27, driver.RowsColumnScanner on the rows, which scans arrays into slices).
// A Go release or a pgx release that adds an optional interface makes this fail until the
// statement tracer (tracing/sqlconn.go) has it too.
//
// The same with sqlmw interceptors (WithInterceptor), with and without statement spans: their
// wrappers must hide nothing either.
func TestDriverTypesMatchPgx(t *testing.T) {
	plain, _ := servers(t)
	cfg, err := pgx.ParseConfig(plain.DSN())
	if err != nil {
		t.Fatal(err)
	}
	theirs := stdlib.OpenDB(*cfg)
	defer theirs.Close()
	want := typesOf(t, theirs)
	for _, tc := range []struct {
		name  string
		spans bool
		opts  []pgconnector.Option
	}{
		{"statement spans", true, nil},
		{"interceptors", true, []pgconnector.Option{pgconnector.WithInterceptor(sqlmw.NullInterceptor{}), pgconnector.WithInterceptor(sqlmw.NullInterceptor{})}},
		{"interceptors without spans", false, []pgconnector.Option{pgconnector.WithInterceptor(sqlmw.NullInterceptor{}), pgconnector.WithStatementSpans(false)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, tp := newRecorder()
			c := newConnector(t, plain.DSN(), append([]pgconnector.Option{pgconnector.WithTracerProvider(tp)}, tc.opts...)...)
			ours := sql.OpenDB(c)
			defer ours.Close()
			compareDriverTypes(t, typesOf(t, ours), want)
			n := 0
			for _, s := range rec.Ended() {
				if spanAttrs(s)["db.operation.name"] != "" {
					n++
				}
			}
			if tc.spans != (n > 0) {
				t.Errorf("statement spans %v, %d statement spans ended", tc.spans, n)
			}
		})
	}
}

// compareDriverTypes fails t when a type of got has not the methods and driver interfaces of
// pgx's in want.
func compareDriverTypes(t *testing.T, got, want driverTypes) {
	t.Helper()
	if got["conn"] == want["conn"] || got["rows"] == want["rows"] {
		t.Fatalf("the connector's connection is %v with rows %v, pgx's own: statement spans should wrap them", got["conn"], got["rows"])
	}
	for _, what := range []string{"conn", "stmt", "rows", "stmt rows", "tx"} {
		g, w := got[what], want[what]
		if gi, wi := implemented(g), implemented(w); !slices.Equal(gi, wi) {
			t.Errorf("%s (%s): %v implements %v, pgx's %v implements %v", what, runtime.Version(), g, gi, w, wi)
		}
		gm, wm := methods(g), methods(w)
		for _, m := range wm {
			if !slices.Contains(gm, m) {
				t.Errorf("%s (%s): %v lacks %s of pgx's %v", what, runtime.Version(), g, m, w)
			}
		}
		for _, m := range gm {
			if !slices.Contains(wm, m) {
				t.Errorf("%s (%s): %v has %s, which pgx's %v has not", what, runtime.Version(), g, m, w)
			}
		}
		t.Logf("%s: %v", what, implemented(w))
	}
}

// driverInterfaces lists every interface of database/sql/driver that a connection, statement,
// rows or transaction may implement (driverInterfacesRelease adds those of newer Go releases).
var driverInterfaces = append([]reflect.Type{
	reflect.TypeFor[driver.Conn](),
	reflect.TypeFor[driver.ConnBeginTx](),
	reflect.TypeFor[driver.ConnPrepareContext](),
	reflect.TypeFor[driver.Execer](), //nolint:staticcheck // database/sql still uses it
	reflect.TypeFor[driver.ExecerContext](),
	reflect.TypeFor[driver.Queryer](), //nolint:staticcheck // as Execer
	reflect.TypeFor[driver.QueryerContext](),
	reflect.TypeFor[driver.Pinger](),
	reflect.TypeFor[driver.SessionResetter](),
	reflect.TypeFor[driver.Validator](),
	reflect.TypeFor[driver.NamedValueChecker](),
	reflect.TypeFor[driver.Stmt](),
	reflect.TypeFor[driver.StmtExecContext](),
	reflect.TypeFor[driver.StmtQueryContext](),
	reflect.TypeFor[driver.ColumnConverter](), //nolint:staticcheck // as Execer
	reflect.TypeFor[driver.Rows](),
	reflect.TypeFor[driver.RowsNextResultSet](),
	reflect.TypeFor[driver.RowsColumnTypeDatabaseTypeName](),
	reflect.TypeFor[driver.RowsColumnTypeLength](),
	reflect.TypeFor[driver.RowsColumnTypeNullable](),
	reflect.TypeFor[driver.RowsColumnTypePrecisionScale](),
	reflect.TypeFor[driver.RowsColumnTypeScanType](),
	reflect.TypeFor[driver.Tx](),
}, driverInterfacesRelease...)

// notOnAConnection are the interfaces of database/sql/driver that none of a connection's types
// implements: a driver's, a connector's, a result's, and the value interfaces.
var notOnAConnection = []string{"Driver", "DriverContext", "Connector", "Result", "ValueConverter", "Valuer"}

// driverInterfaces holds every interface database/sql/driver of this Go release declares, as its
// source says: an interface a later release adds fails this until the list has it.
func TestDriverInterfacesListed(t *testing.T) {
	pkg, err := build.Import("database/sql/driver", "", build.FindOnly)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(pkg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, filepath.Join(pkg.Dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	listed := map[string]bool{}
	for _, it := range driverInterfaces {
		listed[it.Name()] = true
	}
	for _, name := range notOnAConnection {
		listed[name] = true
	}
	n := 0
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, s := range gd.Specs {
				ts := s.(*ast.TypeSpec)
				if _, ok := ts.Type.(*ast.InterfaceType); !ok || !ts.Name.IsExported() {
					continue
				}
				n++
				if !listed[ts.Name.Name] {
					t.Errorf("database/sql/driver of %s declares %s, which driverInterfaces does not list", runtime.Version(), ts.Name.Name)
				}
			}
		}
	}
	if n < len(driverInterfaces) {
		t.Errorf("found %d interfaces in %s, fewer than the %d listed", n, pkg.Dir, len(driverInterfaces))
	}
}
