//go:build !go1.27

package pgconnector_test

import "reflect"

// driverInterfacesRelease are the interfaces of database/sql/driver newer than Go 1.26: none.
var driverInterfacesRelease []reflect.Type
