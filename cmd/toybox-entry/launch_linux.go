//go:build linux && cgo

package main

// The launcher is C that runs as a constructor, before the Go runtime
// starts. Its code is in launcher_linux.c, which says what it does. Its
// interface is launcher.h: te_launch, the record of what it did, and
// te_lock. A compiler warning in it fails the build (-Wall -Werror).

/*
#cgo CFLAGS: -Wall -Werror
#include "launcher.h"

__attribute__((constructor)) static void te_init(int argc, char **argv, char **envp) {
	te_launcher(argc, argv, envp);
}
*/
import "C"

import "syscall"

// launched returns what the launcher did before main.
func launched() launch {
	l := &C.te_launch
	r := launch{
		State:       launchState(l.state),
		Why:         cString(l.why),
		Call:        cString(l.call),
		Err:         syscall.Errno(l.err),
		Port:        int(l.port),
		Pid:         int(l.app_pid),
		ArgvAt:      int(l.argv_at),
		CapFD:       int(l.cap_fd),
		AppCapFD:    int(l.app_cap_fd),
		ProxyPort:   int(l.proxy_port),
		ProxyFD:     int(l.proxy_fd),
		Transparent: l.transparent != 0,
		NotifyFD:    int(l.notify_fd),
		NotifyErr:   syscall.Errno(l.notify_err),
		DNSFD:       int(l.dns_fd),
		DNSTCPFD:    int(l.dns_tcp_fd),
		SchemeFD:    int(l.scheme_fd),
		ConnectorFD: int(l.connector_fd),
		FenceFD:     int(l.fence_fd),
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
		r.ForwardPorts = append(r.ForwardPorts, int(l.forward_port[i]))
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
