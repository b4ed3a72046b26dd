//go:build linux && cgo

package main

// The launcher is C that runs as a constructor, before the Go runtime
// starts. Its code is in launcher_linux.c, which says what it does. Its
// interface is launcher.h: te_launch, its one reading of the flags and the
// record of what it did; te_parse, that reading; and te_lock. A compiler
// warning in it fails the build (-Wall -Werror).

/*
#cgo CFLAGS: -Wall -Werror
#include <stdlib.h>
#include "launcher.h"

__attribute__((constructor)) static void te_init(int argc, char **argv, char **envp) {
	te_launcher(argc, argv, envp);
}
*/
import "C"

import (
	"os"
	"syscall"
	"unsafe"

	"toybox/vat/wall/entry"
)

// launched returns the launcher's reading of the flags and what it did,
// before main.
func launched() launch {
	return readLaunch(&C.te_launch, os.Args)
}

// parseLaunch runs the launcher's parser (te_parse) alone on args, an
// argv with the program's name first. It reports whether args are a
// launch's. The tests hold the parser to the flag package with it.
func parseLaunch(args []string) (launch, bool) {
	l := (*C.struct_te_launch)(C.calloc(1, C.sizeof_struct_te_launch))
	defer C.free(unsafe.Pointer(l))
	argv := unsafe.Slice((**C.char)(C.calloc(C.size_t(len(args)+1), C.size_t(unsafe.Sizeof((*C.char)(nil))))), len(args)+1)
	defer C.free(unsafe.Pointer(&argv[0]))
	for i, a := range args {
		argv[i] = C.CString(a)
		defer C.free(unsafe.Pointer(argv[i]))
	}
	ok := C.te_parse(l, C.int(len(args)), &argv[0]) == 0
	return readLaunch(l, args), ok
}

// readLaunch copies l into a launch. args is the argv l was read from.
func readLaunch(l *C.struct_te_launch, args []string) launch {
	r := launch{
		State:        launchState(l.state),
		Why:          cString(l.why),
		BadAt:        int(l.bad_at),
		Call:         cString(l.call),
		Err:          syscall.Errno(l.err),
		Port:         int(l.port),
		ID:           cString(l.vat),
		LogLevel:     cString(l.log_level),
		Pid:          int(l.app_pid),
		ArgvAt:       int(l.argv_at),
		CapFD:        int(l.cap_fd),
		AppCapFD:     int(l.app_cap_fd),
		ProxyPort:    int(l.proxy_port),
		ProxyFD:      int(l.proxy_fd),
		Transparent:  l.transparent != 0,
		NotifyFD:     int(l.notify_fd),
		NotifyErr:    syscall.Errno(l.notify_err),
		DNSFD:        int(l.dns_fd),
		DNSTCPFD:     int(l.dns_tcp_fd),
		SchemeFD:     int(l.scheme_fd),
		ConnectorFD:  int(l.connector_fd),
		FenceFD:      int(l.fence_fd),
		RanFD:        int(l.ran_fd),
		EarlyRefused: int(l.early.refused),
		EarlyAll:     l.early.ports_all != 0,
	}
	for i := range int(l.early.nports) {
		r.EarlyPorts = append(r.EarlyPorts, uint16(l.early.ports[i]))
	}
	if l.pending != 0 {
		r.Pending = C.GoBytes(unsafe.Pointer(&l.pending_notif[0]), C.int(len(l.pending_notif)))
	}
	if r.LogLevel == "" {
		r.LogLevel = "warn"
	}
	if r.BadAt > 0 && r.BadAt < len(args) {
		r.BadArg = args[r.BadAt]
	}
	if r.ArgvAt > 0 && r.ArgvAt < len(args) {
		r.Argv = args[r.ArgvAt:]
	}
	switch l.stage {
	case C.TE_STAGE_DUMPABLE:
		r.Stage = stageDumpable
	case C.TE_STAGE_CLOEXEC:
		r.Stage = stageCloexec
	case C.TE_STAGE_FORWARD:
		r.Stage = stageForward
	case C.TE_STAGE_PROXY:
		r.Stage = stageProxy
	case C.TE_STAGE_SPAWN:
		r.Stage = stageSpawn
	case C.TE_STAGE_APPCAP:
		r.Stage = stageCaps
	case C.TE_STAGE_CLOSE:
		r.Stage = stageClose
	case C.TE_STAGE_LOCK:
		r.Stage = stageLock
	case C.TE_STAGE_SPAWNER:
		r.Stage = stageSpawner
	case C.TE_STAGE_MCPFD:
		r.Stage = stageMCPFD
	case C.TE_STAGE_LISTEN:
		r.Stage = stageListen
	case C.TE_STAGE_NOTIFY:
		r.Stage = stageNotify
	case C.TE_STAGE_FENCE:
		r.Stage = stageFence
	}
	if l.listen_port > 0 {
		r.Listen = &launchListen{Port: int(l.listen_port), Path: cString(l.listen_path), RelayFD: int(l.relay_fd), RelayPid: int(l.relay_pid)}
	}
	if l.mcp != 0 {
		r.MCP = &launchMCP{
			FD: int(l.mcp_fd), Mode: cString(l.mcp_mode), Era: cString(l.mcp_era),
			MaxProcs: int(l.mcp_max_procs), IdleSeconds: int(l.mcp_idle_seconds),
			SpawnerFD: int(l.spawner_fd), SpawnerPid: int(l.spawner_pid),
		}
	}
	for i := range int(l.nforward) {
		r.Forwards = append(r.Forwards, entry.Forward{
			Port:       uint16(l.forward_port[i]),
			Host:       C.GoStringN(l.forward_host[i], l.forward_host_len[i]),
			TargetPort: uint16(l.forward_target[i]),
		})
		r.ForwardFDs = append(r.ForwardFDs, int(l.forward_fd[i]))
	}
	return r
}

func cString(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// lockSelf installs the entry's own seccomp filter in this process, as the
// launcher does once the app runs (for the tests of that filter).
func lockSelf() error {
	if rc, err := C.te_lock(); rc != 0 {
		return err
	}
	return nil
}
