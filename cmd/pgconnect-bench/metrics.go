package main

import (
	"context"
	"database/sql/driver"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/pgconnector/pgconnector"
)

// scramDerivationsMetric is the counter in which the connector counts the SCRAM SaltedPassword
// derivations (PBKDF2-HMAC-SHA-256 of the password, RFC 5802 section 3) it runs: with the
// ClientKey and ServerKey cached per password, salt and iteration count, one per Connector and
// server secret however many connections log in.
const scramDerivationsMetric = "pgconnector.scram.derivations"

// meteredConnector returns a pgconnector Connector for dsn whose metrics go to a meter provider of
// its own, and a function that reads its scramDerivationsMetric (see counterSum).
func meteredConnector(dsn string) (driver.Connector, func() *int64, error) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	c, err := pgconnector.New(dsn, pgconnector.WithMeterProvider(mp))
	if err != nil {
		return nil, nil, err
	}
	return c, func() *int64 { return counterSum(reader, scramDerivationsMetric) }, nil
}

// counterSum collects what reader holds and returns the sum of the data points of the counter
// called name, over every instrumentation scope and attribute set; nil when there is no such
// counter (a library that does not export it, or that never added to it) or the collection
// fails.
func counterSum(reader sdkmetric.Reader, name string) *int64 {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		return nil
	}
	var (
		sum   int64
		found bool
	)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				found = true
				for _, dp := range d.DataPoints {
					sum += dp.Value
				}
			case metricdata.Sum[float64]:
				found = true
				for _, dp := range d.DataPoints {
					sum += int64(dp.Value)
				}
			}
		}
	}
	if !found {
		return nil
	}
	return &sum
}
