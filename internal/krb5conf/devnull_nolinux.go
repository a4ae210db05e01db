//go:build !linux

package krb5conf

const isLinux = false
