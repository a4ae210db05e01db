//go:build !race

package pgconnector_test

const raceDetector = false
