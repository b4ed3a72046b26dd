module toybox

go 1.26.0

require (
	capnproto.org/go/capnp/v3 v3.1.0-alpha.2 // indirect
	github.com/colega/zeropool v0.0.0-20230505084239-6fb4a4f75381 // indirect
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/docker/docker v28.5.2+incompatible // indirect
	github.com/seccomp/libseccomp-golang v0.11.1 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sync v0.7.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
