//go:build race

package pgxpoolsuite

// raceDetector: the suite runs with the race detector when this test does.
const raceDetector = true
