// Package e2e holds end-to-end tests: the example programs run as built, against a real
// PostgreSQL server and a real Jaeger from the test harness, and what they traced is read back
// through Jaeger's query API; and the harness's Jaeger itself fed by the OTLP exporters. It is
// in the examples' module, which requires what the examples and the exporters need.
//
// The first run on a machine builds Jaeger from source (internal/harness, JaegerBinary: about 16
// minutes on two cores), so run these tests with a -timeout that leaves room for that, for
// example (in examples/) go test -timeout 60m ./e2e/.
package e2e
