package krb5conf

const isLinux = true
