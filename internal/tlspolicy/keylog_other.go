//go:build !unix

package tlspolicy

const openNonBlocking = 0
