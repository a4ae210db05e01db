//go:build !race

package pgxpoolsuite

const raceDetector = false
