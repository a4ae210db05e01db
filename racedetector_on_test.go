//go:build race

package pgconnector_test

// raceDetector: the race detector makes PBKDF2 and the connect flow several times slower.
const raceDetector = true
