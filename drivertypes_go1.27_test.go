//go:build go1.27

package pgconnector_test

import (
	"database/sql/driver"
	"reflect"
)

// driverInterfacesRelease are the interfaces Go 1.27 added to database/sql/driver.
var driverInterfacesRelease = []reflect.Type{reflect.TypeFor[driver.RowsColumnScanner]()}
