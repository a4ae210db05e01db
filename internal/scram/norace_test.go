//go:build !race

package scram

const raceEnabled = false
