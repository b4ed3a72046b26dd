// Package bench measures toybox side by side with its baselines.
//
// It measures these in one run: raw loopback TCP, raw dial and echo, a plain Go HTTP CONNECT
// proxy and a bare bubblewrap spawn, against the switchboard's granted
// connections (the socket handed over, and the ByteStream fallback), the
// path from an app in a wall through its CONNECT proxy, walled spawns,
// installs and the memory each piece holds. Every figure that matters is a
// ratio against a baseline measured in the same run, as a median over
// repeats, because the machine is shared and noisy.
//
// The runner is cmd/toybench; `make bench` builds and runs it and it writes
// docs/benchmarks.md and bench/results.json.
package bench
