module hushfs

go 1.26.8

require (
	github.com/buildbarn/go-xdr v0.0.0-20261005144839-a2095890273e
	github.com/hanwen/go-fuse/v2 v2.12.1
	golang.org/x/sys v0.49.0
)
