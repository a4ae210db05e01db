package scram

import "testing"

// BenchmarkExchange measures one whole exchange (Start, ClientFirst, ServerFirst, ServerFinal)
// against xdg-go/scram's server in the process, with PostgreSQL's default 4096 iterations: cold
// (a new Keys each time: PBKDF2 runs) and warm (the keys are cached and verified). The server's
// part (a nonce, two HMACs, a hash) is in both.
func BenchmarkExchange(b *testing.B) {
	p := passwordPeer(b, testPassword, testSalt, 4096)
	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if mustExchange(b, NewKeys(Config{}), p, attempt{}) {
				b.Fatal("cold exchange Cached")
			}
		}
	})
	b.Run("warm", func(b *testing.B) {
		k := NewKeys(Config{})
		mustExchange(b, k, p, attempt{})
		b.ReportAllocs()
		for b.Loop() {
			if !mustExchange(b, k, p, attempt{}) {
				b.Fatal("warm exchange not Cached")
			}
		}
	})
}
