//go:build linux && cgo

package main

// The launcher: C that runs as a constructor, before the Go runtime starts.
// It reads the entry's flags (the subset it needs, in the flag package's
// syntax), marks every inherited descriptor from 3 up close-on-exec, makes
// this process undumpable, binds the wall's loopback ports, and starts the
// app with posix_spawn (fds 0, 1, 2 and the app's capability as 3). The app
// starts about a tenth of a millisecond after the entry's exec, instead of
// after the Go runtime's start and the package inits (a few milliseconds
// here); the runtime then starts beside the app. main reads what it did from
// te_launch and checks it against its own parse of the flags.
//
// It acts only on arguments it fully understands (known flags, plain
// decimal numbers, an --app-cap-fd, a command); otherwise it does nothing,
// says why in te_launch.why, and main fails closed.

/*
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

enum {
	TE_NOT_RUN = 0, // the arguments were not a launch's (why says why)
	TE_STARTED = 1, // the app runs: app_pid
	TE_FAILED = 2,  // a step failed: stage, call, err (and port)
};

enum {
	TE_STAGE_DUMPABLE = 1,
	TE_STAGE_CLOEXEC = 2,
	TE_STAGE_FORWARD = 3, // binding a forwarded port
	TE_STAGE_PROXY = 4,   // binding the proxy's port
	TE_STAGE_SPAWN = 5,
};

#define TE_MAX_LISTEN 256

struct te_launch {
	int state;
	int stage;
	int err;
	int port;
	const char *call;
	const char *why;
	int app_pid;
	int argv_at;
	int cap_fd, app_cap_fd, proxy_port;
	int nforward;
	int forward_port[TE_MAX_LISTEN];
	int forward_fd[TE_MAX_LISTEN];
	int proxy_fd;
};

struct te_launch te_launch;

// te_uint parses a plain decimal number (no sign, no leading zero) not
// above max; -1 otherwise.
static long te_uint(const char *s, size_t n, long max) {
	if (n == 0 || n > 10 || (s[0] == '0' && n > 1)) {
		return -1;
	}
	long v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9') {
			return -1;
		}
		v = v * 10 + (s[i] - '0');
	}
	return v > max ? -1 : v;
}

static int te_flag(const char *name, size_t n, const char *want) {
	return strlen(want) == n && memcmp(name, want, n) == 0;
}

// te_parse reads argv as the flag package would; 0 when it is a launch.
static int te_parse(int argc, char **argv) {
	struct te_launch *l = &te_launch;
	l->cap_fd = -1;
	l->app_cap_fd = -1;
	l->proxy_fd = -1;
	int i = 1;
	while (i < argc) {
		const char *a = argv[i];
		if (a[0] != '-' || a[1] == 0) {
			break;
		}
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		const char *name = a + 1;
		if (name[0] == '-') {
			name++;
		}
		if (name[0] == 0 || name[0] == '-' || name[0] == '=') {
			l->why = "a flag's syntax";
			return -1;
		}
		const char *eq = strchr(name, '=');
		size_t n = eq ? (size_t)(eq - name) : strlen(name);
		const char *v;
		if (eq) {
			v = eq + 1;
		} else if (i + 1 < argc) {
			v = argv[++i];
		} else {
			l->why = "a flag without its value";
			return -1;
		}
		size_t vn = strlen(v);
		if (te_flag(name, n, "vat") || te_flag(name, n, "log-level")) {
			// not the launcher's
		} else if (te_flag(name, n, "cap-fd")) {
			if ((l->cap_fd = (int)te_uint(v, vn, 1 << 30)) < 0) {
				l->why = "--cap-fd is not a plain decimal number";
				return -1;
			}
		} else if (te_flag(name, n, "app-cap-fd")) {
			if ((l->app_cap_fd = (int)te_uint(v, vn, 1 << 30)) < 0) {
				l->why = "--app-cap-fd is not a plain decimal number";
				return -1;
			}
		} else if (te_flag(name, n, "proxy-port")) {
			if ((l->proxy_port = (int)te_uint(v, vn, 65535)) < 0) {
				l->why = "--proxy-port is not a plain decimal port";
				return -1;
			}
		} else if (te_flag(name, n, "forward")) {
			const char *e = strchr(v, '=');
			long p = e ? te_uint(v, (size_t)(e - v), 65535) : -1;
			if (p <= 0) {
				l->why = "--forward's port is not a plain decimal port";
				return -1;
			}
			if (l->nforward == TE_MAX_LISTEN) {
				l->why = "too many --forward flags";
				return -1;
			}
			l->forward_port[l->nforward] = (int)p;
			l->forward_fd[l->nforward] = -1;
			l->nforward++;
		} else {
			l->why = "an unknown flag";
			return -1;
		}
		i++;
	}
	if (l->app_cap_fd < 3) {
		l->why = "no --app-cap-fd";
		return -1;
	}
	if (i >= argc) {
		l->why = "no command";
		return -1;
	}
	l->argv_at = i;
	return 0;
}

static void te_fail(int stage, const char *call, int err, int port) {
	te_launch.state = TE_FAILED;
	te_launch.stage = stage;
	te_launch.call = call;
	te_launch.err = err;
	te_launch.port = port;
}

// te_cloexec_all marks every descriptor from 3 up close-on-exec.
static int te_cloexec_all(void) {
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) {
		return 0;
	}
	DIR *d = opendir("/proc/self/fd");
	if (d == NULL) {
		return -1;
	}
	int self = dirfd(d);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		long fd = te_uint(e->d_name, strlen(e->d_name), 1 << 30);
		if (fd > 2 && fd != self && fcntl((int)fd, F_SETFD, FD_CLOEXEC) < 0) {
			int err = errno;
			closedir(d);
			errno = err;
			return -1;
		}
	}
	closedir(d);
	return 0;
}

// te_listen returns a blocking close-on-exec TCP socket listening on
// 127.0.0.1:port, or -1 with the failed call in *call.
static int te_listen(int port, const char **call) {
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		*call = "socket";
		return -1;
	}
	int one = 1;
	struct sockaddr_in sa = {0};
	sa.sin_family = AF_INET;
	sa.sin_port = htons((unsigned short)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0) {
		*call = "setsockopt";
	} else if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		*call = "bind";
	} else if (listen(fd, 4096) < 0) {
		*call = "listen";
	} else {
		return fd;
	}
	int err = errno;
	close(fd);
	errno = err;
	return -1;
}

static void te_close_listeners(void) {
	struct te_launch *l = &te_launch;
	for (int i = 0; i < l->nforward; i++) {
		if (l->forward_fd[i] >= 0) {
			close(l->forward_fd[i]);
			l->forward_fd[i] = -1;
		}
	}
	if (l->proxy_fd >= 0) {
		close(l->proxy_fd);
		l->proxy_fd = -1;
	}
}

__attribute__((constructor)) static void te_launcher(int argc, char **argv, char **envp) {
	(void)envp;
	struct te_launch *l = &te_launch;
	if (te_parse(argc, argv) != 0) {
		return;
	}
	// Nobody in the wall (the app shares the uid) may read or write this
	// process's memory or descriptors through /proc.
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
		te_fail(TE_STAGE_DUMPABLE, "prctl", errno, 0);
		return;
	}
	// Nothing inherited may reach the app.
	if (te_cloexec_all() != 0) {
		te_fail(TE_STAGE_CLOEXEC, "close_range", errno, 0);
		return;
	}
	// The ports are bound before the app starts, so its first connect never
	// finds them closed; connections wait in the backlog until the entry
	// serves them. A vat without a capability for the entry has no network.
	if (l->cap_fd >= 3) {
		for (int i = 0; i < l->nforward; i++) {
			const char *call = "";
			if ((l->forward_fd[i] = te_listen(l->forward_port[i], &call)) < 0) {
				te_fail(TE_STAGE_FORWARD, call, errno, l->forward_port[i]);
				te_close_listeners();
				return;
			}
		}
		if (l->proxy_port != 0) {
			const char *call = "";
			if ((l->proxy_fd = te_listen(l->proxy_port, &call)) < 0) {
				te_fail(TE_STAGE_PROXY, call, errno, l->proxy_port);
				te_close_listeners();
				return;
			}
		}
	}
	posix_spawn_file_actions_t fa;
	int rc = posix_spawn_file_actions_init(&fa);
	if (rc == 0) {
		// dup2 onto itself clears close-on-exec (glibc >= 2.29).
		rc = posix_spawn_file_actions_adddup2(&fa, l->app_cap_fd, 3);
	}
	if (rc == 0) {
		pid_t pid;
		rc = posix_spawn(&pid, argv[l->argv_at], &fa, NULL, argv + l->argv_at, environ);
		if (rc == 0) {
			l->app_pid = (int)pid;
		}
	}
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0) {
		te_fail(TE_STAGE_SPAWN, "posix_spawn", rc, 0);
		te_close_listeners();
		return;
	}
	l->state = TE_STARTED;
}
*/
import "C"

import "syscall"

// launched returns what the launcher did before main.
func launched() launch {
	l := &C.te_launch
	r := launch{
		State:     launchState(l.state),
		Why:       cString(l.why),
		Call:      cString(l.call),
		Err:       syscall.Errno(l.err),
		Port:      int(l.port),
		Pid:       int(l.app_pid),
		ArgvAt:    int(l.argv_at),
		CapFD:     int(l.cap_fd),
		AppCapFD:  int(l.app_cap_fd),
		ProxyPort: int(l.proxy_port),
		ProxyFD:   int(l.proxy_fd),
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
