package main

import (
	"strconv"
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
)

func TestScratch(t *testing.T) {
	noKerberos(t)
	port := harness.FreePort(t)
	explainT(t, "host=127.0.0.1 port="+strconv.Itoa(port))
	explainT(t, "host=localhost port="+strconv.Itoa(port))
	p := harness.StartT(t, harness.Options{})
	explainT(t, "host=127.0.0.1,127.0.0.1 port="+strconv.Itoa(port)+","+strconv.Itoa(p.Port)+" user=app dbname=app")
}
