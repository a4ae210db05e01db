//go:build !race

package tlspolicy

const raceEnabled = false
