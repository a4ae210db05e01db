package main

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// counterSum adds up a counter's data points over scopes and attribute sets, and says nil for a
// counter that does not exist: the cold herd's derivations before and after the library exports
// pgconnector.scram.derivations.
func TestCounterSum(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	if got := counterSum(reader, scramDerivationsMetric); got != nil {
		t.Errorf("nothing recorded: %d, want nil", *got)
	}
	ctx := context.Background()
	for _, scope := range []string{"github.com/pgconnector/pgconnector", "other"} {
		c, err := mp.Meter(scope).Int64Counter(scramDerivationsMetric)
		if err != nil {
			t.Fatal(err)
		}
		c.Add(ctx, 1, metric.WithAttributes(attribute.String("server.address", "a")))
		c.Add(ctx, 2, metric.WithAttributes(attribute.String("server.address", "b")))
	}
	other, err := mp.Meter("x").Int64Counter("pgconnector.other")
	if err != nil {
		t.Fatal(err)
	}
	other.Add(ctx, 100)
	if got := counterSum(reader, scramDerivationsMetric); got == nil || *got != 6 {
		t.Errorf("counterSum = %v, want 6", got)
	}
	if got := counterSum(reader, "pgconnector.missing"); got != nil {
		t.Errorf("a missing counter: %d, want nil", *got)
	}
}
