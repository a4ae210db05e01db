package intercept

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/ngrok/sqlmw"
)

// fakeConn answers every query with two rows of one column and every exec with a result of 3
// rows affected, without a server.
type fakeConn struct{}

func (fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not supported") }
func (fakeConn) Close() error                        { return nil }
func (fakeConn) Begin() (driver.Tx, error)           { return nil, errors.New("not supported") }
func (fakeConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return &fakeRows{}, nil
}
func (fakeConn) ExecContext(context.Context, string, []driver.NamedValue) (driver.Result, error) {
	return driver.RowsAffected(3), nil
}

type fakeRows struct{ n int }

func (*fakeRows) Columns() []string                     { return []string{"n"} }
func (*fakeRows) Close() error                          { return nil }
func (*fakeRows) ColumnTypeDatabaseTypeName(int) string { return "INT8" }
func (r *fakeRows) Next(dest []driver.Value) error {
	if r.n == 2 {
		return io.EOF
	}
	r.n++
	dest[0] = int64(r.n)
	return nil
}

type fakeConnector struct{}

func (fakeConnector) Connect(context.Context) (driver.Conn, error) { return fakeConn{}, nil }
func (fakeConnector) Driver() driver.Driver                        { return nil }

// ownRows is an interceptor's own wrapper of the rows it is given, as sqlmw lets it have one
// (sqlmw.RowsUnwrapper); it doubles every value read through it.
type ownRows struct{ driver.Rows }

func (o ownRows) Unwrap() driver.Rows { return o.Rows }
func (o ownRows) Next(dest []driver.Value) error {
	err := o.Rows.Next(dest)
	if err == nil {
		dest[0] = dest[0].(int64) * 2
	}
	return err
}

type wrapping struct{ sqlmw.NullInterceptor }

func (wrapping) ConnQueryContext(ctx context.Context, conn driver.QueryerContext, query string, args []driver.NamedValue) (context.Context, driver.Rows, error) {
	rows, err := conn.QueryContext(ctx, query, args)
	return ctx, ownRows{rows}, err
}

// counting counts ResultRowsAffected.
type counting struct {
	sqlmw.NullInterceptor
	n *int
}

func (c counting) ResultRowsAffected(res driver.Result) (int64, error) {
	*c.n++
	return res.RowsAffected()
}

// An interceptor's own rows wrapper is read through (its Next runs) and looked through for the
// driver's column types; DriverResult reads the driver's result without the interceptors.
func TestOwnRowsAndDriverResult(t *testing.T) {
	var affected int
	ch := Chain{counting{n: &affected}, wrapping{}, sqlmw.NullInterceptor{}}
	conn, err := ch.Connect(context.Background(), fakeConnector{})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := conn.(driver.QueryerContext).QueryContext(context.Background(), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := rows.(driver.RowsColumnTypeDatabaseTypeName).ColumnTypeDatabaseTypeName(0); got != "INT8" {
		t.Errorf("column type %q, want the driver's INT8", got)
	}
	var got []driver.Value
	dest := make([]driver.Value, 1)
	for rows.Next(dest) == nil {
		got = append(got, dest[0])
	}
	if want := []driver.Value{int64(2), int64(4)}; !reflect.DeepEqual(got, want) {
		t.Errorf("read %v, want %v through the interceptor's rows", got, want)
	}
	res, err := conn.(driver.ExecerContext).ExecContext(context.Background(), "e", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := DriverResult(res).RowsAffected(); n != 3 || err != nil || affected != 0 {
		t.Errorf("DriverResult: %d, %v, %d interceptor calls; want 3 and none", n, err, affected)
	}
	if n, _ := res.RowsAffected(); n != 3 || affected != 1 {
		t.Errorf("RowsAffected: %d with %d interceptor calls, want 3 with 1", n, affected)
	}
}
