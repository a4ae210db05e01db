//go:build !unix

package pgconnector

const openNonBlocking = 0
