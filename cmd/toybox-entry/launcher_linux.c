//go:build linux && cgo

// The launcher: C that runs as a constructor, before the Go runtime starts.
// It reads the entry's flags, marks every inherited descriptor from 3 up
// close-on-exec, makes this process undumpable, binds the wall's loopback
// ports, and starts the app with posix_spawn. The app gets fds 0, 1, 2 and
// its capability as 3. It leads a process group of its own, which the entry
// forwards stop requests to. The app starts about a tenth of a millisecond
// after the entry's exec. Waiting for the Go runtime's start and the package
// inits would cost a few milliseconds here. The runtime then starts beside
// the app, and main reads from te_launch what the launcher did.
//
// The flags are parsed once, here (te_parse), and main reads the result.
// Only this side can parse: the app runs before any Go code does, so the
// launcher must know the flags first. main therefore has no flag parser of
// its own, so no second reading can disagree with this one. te_launch holds
// every value (strings point into argv), and Go reads it in the same
// process, built from the same header, so it needs no version or encoding.
// The syntax is the flag package's (-name value, --name=value, "--" ends
// the flags). FuzzLauncherFlags (launch_linux_test.go) holds te_parse to
// the flag package's reading of the same argv.
//
// A stdio MCP vat (--mcp stdio) runs no app at start: the launcher forks
// the spawner instead (te_spawner), before the entry locks itself, and
// the entry's bridge asks it for each process of the app's command. Its
// processes are the entry's children (CLONE_PARENT), so the entry reaps
// them as it reaps the app.
//
// An app that listens on a TCP port (--listen-port) gets a relay too
// (te_relay), forked once the app runs and before the entry locks itself:
// it makes $TOYBOX_LISTEN once the port accepts, and connects to the port
// for the entry, which may make no socket itself.
//
// It acts only on arguments it fully understands: known flags, plain
// decimal numbers, a known log level, well-formed forwards, an
// --app-cap-fd that is not --cap-fd, and a command. Otherwise it does
// nothing and says why in te_launch.why, and main fails closed without the
// app ever running. Once the app runs it closes every descriptor but the
// entry's capability and its listeners.

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/un.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stddef.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "launcher.h"
#include "notify_linux.h"
#include "sock_linux.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

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

// te_host_ok is entry.ForwardHostOK: 1 to 253 bytes of ASCII letters,
// digits, '.', '-', '_' and ':'.
static int te_host_ok(const char *h, size_t n) {
	if (n == 0 || n > 253) {
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		char c = h[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' || c == ':')) {
			return 0;
		}
	}
	return 1;
}

// te_forward reads PORT=HOST:PORT or PORT=[HOST]:PORT into forward i of
// l: the listening port, the host (not NUL-terminated: it points into v)
// and the target's port. 0, or -1 when v is not one.
static int te_forward(struct te_launch *l, int i, const char *v) {
	const char *e = strchr(v, '=');
	if (e == NULL) {
		return -1;
	}
	long port = te_uint(v, (size_t)(e - v), 65535);
	const char *t = e + 1, *host, *colon;
	size_t hn;
	if (t[0] == '[') {
		const char *close = strchr(t, ']');
		if (close == NULL || close[1] != ':') {
			return -1;
		}
		host = t + 1;
		hn = (size_t)(close - host);
		colon = close + 1;
	} else {
		colon = strrchr(t, ':');
		if (colon == NULL) {
			return -1;
		}
		host = t;
		hn = (size_t)(colon - t);
		if (memchr(host, ':', hn) != NULL) {
			return -1; // an IPv6 address needs its brackets
		}
	}
	long target = te_uint(colon + 1, strlen(colon + 1), 65535);
	if (port <= 0 || target <= 0 || !te_host_ok(host, hn)) {
		return -1;
	}
	l->forward_port[i] = (int)port;
	l->forward_host[i] = host;
	l->forward_host_len[i] = (int)hn;
	l->forward_target[i] = (int)target;
	l->forward_fd[i] = -1;
	return 0;
}

int te_parse(struct te_launch *l, int argc, char **argv) {
	l->cap_fd = -1;
	l->app_cap_fd = -1;
	l->proxy_fd = -1;
	l->mcp_fd = -1;
	l->spawner_fd = -1;
	l->relay_fd = -1;
	l->notify_fd = -1;
	l->dns_fd = -1;
	l->dns_tcp_fd = -1;
	l->scheme_fd = -1;
	l->connector_fd = -1;
	l->fence_fd = -1;
	l->fence_home = -1;
	l->ran_fd = -1;
	int mcp_flags = 0;
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
		l->bad_at = i; // the argument a refusal below is about
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
		if (te_flag(name, n, "vat")) {
			l->vat = v;
		} else if (te_flag(name, n, "log-level")) {
			if (strcmp(v, "debug") != 0 && strcmp(v, "info") != 0 && strcmp(v, "warn") != 0 && strcmp(v, "error") != 0) {
				l->why = "--log-level is not debug, info, warn or error";
				return -1;
			}
			l->log_level = v;
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
		} else if (te_flag(name, n, "task-fence-fd")) {
			if ((l->fence_fd = (int)te_uint(v, vn, 1 << 30)) < 3) {
				l->why = "--task-fence-fd is not a plain decimal number from 3 up";
				return -1;
			}
		} else if (te_flag(name, n, "ran-fd")) {
			if ((l->ran_fd = (int)te_uint(v, vn, 1 << 30)) < 3) {
				l->why = "--ran-fd is not a plain decimal number from 3 up";
				return -1;
			}
		} else if (te_flag(name, n, "proxy-port")) {
			if ((l->proxy_port = (int)te_uint(v, vn, 65535)) < 0) {
				l->why = "--proxy-port is not a plain decimal port";
				return -1;
			}
		} else if (te_flag(name, n, "forward")) {
			if (l->nforward == TE_MAX_LISTEN) {
				l->why = "too many --forward flags";
				return -1;
			}
			if (te_forward(l, l->nforward, v) != 0) {
				l->why = "--forward is not PORT=HOST:PORT (plain decimal ports; a host of ASCII letters, digits, '.', '-', '_', ':'; an IPv6 address in brackets)";
				return -1;
			}
			l->nforward++;
		} else if (te_flag(name, n, "egress-mode")) {
			if (strcmp(v, "transparent") == 0) {
				l->transparent = 1;
			} else if (strcmp(v, "proxy") == 0) {
				l->transparent = 0;
			} else {
				l->why = "--egress-mode is not transparent or proxy";
				return -1;
			}
		} else if (te_flag(name, n, "mcp")) {
			if (strcmp(v, "stdio") != 0) {
				l->why = "--mcp is not stdio";
				return -1;
			}
			l->mcp = 1;
		} else if (te_flag(name, n, "mcp-fd")) {
			if ((l->mcp_fd = (int)te_uint(v, vn, 1 << 30)) < 3) {
				l->why = "--mcp-fd is not a plain decimal number from 3 up";
				return -1;
			}
			mcp_flags++;
		} else if (te_flag(name, n, "mcp-mode")) {
			if (strcmp(v, "session") != 0 && strcmp(v, "shared") != 0 && strcmp(v, "single") != 0) {
				l->why = "--mcp-mode is not session, shared or single";
				return -1;
			}
			l->mcp_mode = v;
			mcp_flags++;
		} else if (te_flag(name, n, "mcp-era")) {
			if (strcmp(v, "legacy") != 0 && strcmp(v, "modern") != 0 && strcmp(v, "dual") != 0) {
				l->why = "--mcp-era is not legacy, modern or dual";
				return -1;
			}
			l->mcp_era = v;
			mcp_flags++;
		} else if (te_flag(name, n, "mcp-max-procs")) {
			if ((l->mcp_max_procs = (int)te_uint(v, vn, 4096)) <= 0) {
				l->why = "--mcp-max-procs is not a plain decimal number from 1 to 4096";
				return -1;
			}
			mcp_flags++;
		} else if (te_flag(name, n, "mcp-idle-seconds")) {
			if ((l->mcp_idle_seconds = (int)te_uint(v, vn, 1 << 30)) <= 0) {
				l->why = "--mcp-idle-seconds is not a plain decimal number from 1 up";
				return -1;
			}
			mcp_flags++;
		} else if (te_flag(name, n, "listen-port")) {
			if ((l->listen_port = (int)te_uint(v, vn, 65535)) <= 0) {
				l->why = "--listen-port is not a plain decimal port from 1 to 65535";
				return -1;
			}
		} else if (te_flag(name, n, "listen-path")) {
			if (v[0] != '/' || vn >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
				l->why = "--listen-path is not an absolute path shorter than a unix socket's";
				return -1;
			}
			l->listen_path = v;
		} else {
			l->why = "an unknown flag";
			return -1;
		}
		i++;
	}
	l->bad_at = 0; // the refusals below are about no one argument
	if ((l->listen_port > 0) != (l->listen_path != NULL)) {
		l->why = "--listen-port and --listen-path come together";
		return -1;
	}
	if (l->listen_port > 0 && l->mcp) {
		l->why = "--listen-port with --mcp stdio (a stdio MCP server listens on nothing)";
		return -1;
	}
	if (l->listen_port > 0 && l->listen_port == l->proxy_port) {
		l->why = "--listen-port is the proxy's port";
		return -1;
	}
	for (int f = 0; f < l->nforward; f++) {
		if (l->listen_port > 0 && l->listen_port == l->forward_port[f]) {
			l->why = "--listen-port is a forwarded port";
			return -1;
		}
	}
	if (mcp_flags > 0 && !l->mcp) {
		l->why = "an --mcp-* flag without --mcp stdio";
		return -1;
	}
	if (l->mcp && l->mcp_fd < 0) {
		l->why = "--mcp stdio without --mcp-fd";
		return -1;
	}
	if (l->mcp && (l->mcp_fd == l->cap_fd || l->mcp_fd == l->app_cap_fd)) {
		l->why = "--mcp-fd names the descriptor of a capability";
		return -1;
	}
	if (l->app_cap_fd < 3) {
		l->why = "no --app-cap-fd";
		return -1;
	}
	if (l->app_cap_fd == l->cap_fd) {
		l->why = "--cap-fd and --app-cap-fd name the same descriptor";
		return -1;
	}
	if (l->fence_fd >= 0 && (l->fence_fd == l->cap_fd || l->fence_fd == l->app_cap_fd || l->fence_fd == l->mcp_fd)) {
		l->why = "--task-fence-fd names another flag's descriptor";
		return -1;
	}
	if (l->ran_fd >= 0 && (l->ran_fd == l->cap_fd || l->ran_fd == l->app_cap_fd || l->ran_fd == l->mcp_fd || l->ran_fd == l->fence_fd)) {
		l->why = "--ran-fd names another flag's descriptor";
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

// te_fds lists the open descriptors from 3 up (from /proc/self/fd) into
// fds; their count, or -1 with the failed call in *call.
static int te_fds(int *fds, int max, const char **call) {
	DIR *d = opendir("/proc/self/fd");
	if (d == NULL) {
		*call = "opendir /proc/self/fd";
		return -1;
	}
	int self = dirfd(d), n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		long fd = te_uint(e->d_name, strlen(e->d_name), 1 << 30);
		if (fd > 2 && fd != self) {
			if (n == max) {
				closedir(d);
				*call = "listing /proc/self/fd (too many descriptors)";
				errno = EMFILE;
				return -1;
			}
			fds[n++] = (int)fd;
		}
	}
	closedir(d);
	return n;
}

#define TE_MAX_FDS 4096

// te_cloexec_all marks every descriptor from 3 up close-on-exec.
static int te_cloexec_all(const char **call) {
	*call = "close_range";
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) {
		return 0;
	}
	static int fds[TE_MAX_FDS];
	int n = te_fds(fds, TE_MAX_FDS, call);
	for (int i = 0; i < n; i++) {
		if (fcntl(fds[i], F_SETFD, FD_CLOEXEC) < 0) {
			*call = "fcntl";
			return -1;
		}
	}
	return n < 0 ? -1 : 0;
}

static int te_kept(int fd) {
	struct te_launch *l = &te_launch;
	if (fd == l->cap_fd || fd == l->proxy_fd || fd == l->mcp_fd || fd == l->spawner_fd || fd == l->relay_fd || fd == l->notify_fd || fd == l->dns_fd || fd == l->dns_tcp_fd || fd == l->scheme_fd || fd == l->connector_fd) {
		return 1;
	}
	for (int i = 0; i < l->nforward; i++) {
		if (fd == l->forward_fd[i]) {
			return 1;
		}
	}
	return 0;
}

// te_close_others closes every descriptor from 3 up but the entry's
// capability and its listeners, before the Go runtime opens any of its
// own: whatever bubblewrap or the supervisor left is not the entry's to
// hold, and the app's capability is the app's now.
static int te_close_others(const char **call) {
	*call = "close_range";
	unsigned lo = 3;
	for (;;) {
		// the next kept descriptor at or above lo
		long next = -1;
		struct te_launch *l = &te_launch;
		int cand[TE_MAX_LISTEN + 8], nc = 0;
		cand[nc++] = l->notify_fd;
		cand[nc++] = l->dns_fd;
		cand[nc++] = l->dns_tcp_fd;
		cand[nc++] = l->scheme_fd;
		cand[nc++] = l->connector_fd;
		cand[nc++] = l->cap_fd;
		cand[nc++] = l->proxy_fd;
		cand[nc++] = l->mcp_fd;
		cand[nc++] = l->spawner_fd;
		cand[nc++] = l->relay_fd;
		for (int i = 0; i < l->nforward; i++) {
			cand[nc++] = l->forward_fd[i];
		}
		for (int i = 0; i < nc; i++) {
			if (cand[i] >= (int)lo && (next < 0 || cand[i] < next)) {
				next = cand[i];
			}
		}
		unsigned hi = next < 0 ? ~0U : (unsigned)next - 1;
		if (next < 0 || (unsigned)next > lo) {
			if (syscall(SYS_close_range, lo, hi, 0U) != 0) {
				break; // no close_range: the slow way below
			}
		}
		if (next < 0) {
			return 0;
		}
		lo = (unsigned)next + 1;
	}
	static int fds[TE_MAX_FDS];
	int n = te_fds(fds, TE_MAX_FDS, call);
	for (int i = 0; i < n; i++) {
		if (!te_kept(fds[i])) {
			close(fds[i]);
		}
	}
	return n < 0 ? -1 : 0;
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
	if (l->dns_fd >= 0) {
		close(l->dns_fd);
		l->dns_fd = -1;
	}
	if (l->dns_tcp_fd >= 0) {
		close(l->dns_tcp_fd);
		l->dns_tcp_fd = -1;
	}
	if (l->scheme_fd >= 0) {
		close(l->scheme_fd);
		l->scheme_fd = -1;
	}
	if (l->notify_fd >= 0) {
		close(l->notify_fd);
		l->notify_fd = -1;
	}
}

// TE_TASK_RESERVE is how many of the wall's tasks the app leaves the entry
// (at most half the limit): the Go runtime's threads, about ten.
#define TE_TASK_RESERVE 32

// te_fence_recv reads what the supervisor sends on the fence socket
// (--task-fence-fd) once the wall's cgroup is made: one byte and one
// descriptor, the cgroup.procs of the entry's own folder of the group,
// opened by the supervisor (the kernel checks a move against the opener's
// rights). The socket is closed after. 0, or -1 with errno set (EPROTO:
// not one descriptor; EOF, the supervisor gone, is one).
static int te_fence_recv(void) {
	struct te_launch *l = &te_launch;
	char b;
	ssize_t n = te_recv_fd(l->fence_fd, &b, 1, &l->fence_home);
	int e = errno;
	close(l->fence_fd); // its number stays in te_launch, for main's message
	if (n < 0) {
		errno = e;
		return -1;
	}
	if (n != 1 || l->fence_home < 0) {
		errno = EPROTO;
		return -1;
	}
	return 0;
}

// te_fence_move writes pid (0: the writer) to the cgroup.procs fd is, moving
// that process there; 0, or -1 with errno set.
static int te_fence_move(int fd, int pid) {
	char b[16];
	int len = snprintf(b, sizeof b, "%d", pid);
	ssize_t n;
	do {
		n = write(fd, b, (size_t)len);
	} while (n < 0 && errno == EINTR);
	return n == len ? 0 : -1;
}

// te_unfence moves this process (and the connector, forked before the app)
// out of the app's folder of the wall's cgroup, where the supervisor put
// the wall's first process, into the entry's own, and closes the fence; 0
// or the errno. Whatever the app starts stays in the app's folder.
static int te_unfence(void) {
	struct te_launch *l = &te_launch;
	if (l->fence_home < 0) {
		return 0;
	}
	int e = 0;
	if ((l->connector_pid > 0 && te_fence_move(l->fence_home, l->connector_pid) != 0) || te_fence_move(l->fence_home, 0) != 0) {
		e = errno;
	}
	close(l->fence_home);
	l->fence_home = -1;
	return e;
}

// te_lazy_ms bounds how long the entry's Go half waits to start (below).
#define TE_LAZY_MS 50

// te_wait_for_need returns once the entry's Go half is needed: a
// connection waits on one of its ports, the app has ended, a call of the
// app's waits for an answer the launcher does not give, or TE_LAZY_MS
// have passed. Until then the app has the CPU to itself for its own start:
// a runtime starting beside it (threads, heap, package inits) slows it
// down on a small host, and the entry has nothing to do before the app
// connects. The app's bind() and listen() calls (a server's first) are
// answered here meanwhile (te_early), so that the app's start never waits
// for the runtime's. (A stop request in that window is dropped by this pid 1 with
// no handler yet; the supervisor asks again until one is there.)
static void te_wait_for_need(void) {
	struct te_launch *l = &te_launch;
	struct pollfd p[TE_MAX_LISTEN + 5];
	int n = 0;
	for (int i = 0; i < l->nforward; i++) {
		p[n++] = (struct pollfd){.fd = l->forward_fd[i], .events = POLLIN};
	}
	if (l->proxy_fd >= 0) {
		p[n++] = (struct pollfd){.fd = l->proxy_fd, .events = POLLIN};
	}
	if (l->relay_fd >= 0) {
		p[n++] = (struct pollfd){.fd = l->relay_fd, .events = POLLIN}; // the app's port accepts
	}
	// A connect() waits for the entry's answer, a lookup for the stub's.
	int notify_at = -1;
	if (l->notify_fd >= 0) {
		notify_at = n;
		p[n++] = (struct pollfd){.fd = l->notify_fd, .events = POLLIN};
	}
	if (l->dns_fd >= 0) {
		p[n++] = (struct pollfd){.fd = l->dns_fd, .events = POLLIN};
	}
	if (l->dns_tcp_fd >= 0) {
		p[n++] = (struct pollfd){.fd = l->dns_tcp_fd, .events = POLLIN};
	}
	if (l->scheme_fd >= 0) {
		p[n++] = (struct pollfd){.fd = l->scheme_fd, .events = POLLIN};
	}
	int app = (int)syscall(SYS_pidfd_open, l->app_pid, 0);
	if (app >= 0) {
		p[n++] = (struct pollfd){.fd = app, .events = POLLIN};
	}
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		long left = TE_LAZY_MS - ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
		if (left <= 0 || poll(p, (nfds_t)n, (int)left) <= 0) {
			break;
		}
		int others = 0;
		for (int i = 0; i < n; i++) {
			others |= i != notify_at && p[i].revents != 0;
		}
		if (others || notify_at < 0 || p[notify_at].revents != POLLIN) {
			break;
		}
		struct seccomp_notif sn;
		memset(&sn, 0, sizeof sn);
		if (ioctl(l->notify_fd, SECCOMP_IOCTL_NOTIF_RECV, &sn) != 0) {
			if (errno == EINTR || errno == ENOENT) {
				continue; // the call is gone
			}
			break;
		}
		if (!te_early(l->notify_fd, l->connector_fd, l->dns_fd, &sn, &l->early)) {
			memcpy(l->pending_notif, &sn, sizeof sn);
			l->pending = 1;
			break;
		}
	}
	if (app >= 0) {
		close(app);
	}
}

// TE_ENV_MAX bounds a principal's environment as the spawner reads it
// (the supervisor allows 32 KiB of names and values).
#define TE_ENV_MAX (64 * 1024)

// te_env_read reads a principal's environment from fd (NAME=value
// entries, each ending in NUL, to EOF) and returns environ with those set
// over it, in one allocation the caller frees; NULL with errno on a read
// error, a blob over TE_ENV_MAX, or an entry with no name.
static char **te_env_read(int fd) {
	char *blob = malloc(TE_ENV_MAX + 1);
	if (blob == NULL) {
		return NULL;
	}
	size_t len = 0;
	for (;;) {
		ssize_t r = read(fd, blob + len, TE_ENV_MAX + 1 - len);
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r < 0) {
			int e = errno;
			free(blob);
			errno = e;
			return NULL;
		}
		if (r == 0) {
			break;
		}
		len += (size_t)r;
		if (len > TE_ENV_MAX) {
			free(blob);
			errno = E2BIG;
			return NULL;
		}
	}
	if (len == 0 || blob[len - 1] != '\0') {
		free(blob);
		errno = EINVAL;
		return NULL;
	}
	size_t nx = 0;
	for (size_t i = 0; i < len; i += strlen(blob + i) + 1) {
		const char *eq = strchr(blob + i, '=');
		if (eq == NULL || eq == blob + i) {
			free(blob);
			errno = EINVAL;
			return NULL;
		}
		nx++;
	}
	size_t ne = 0;
	while (environ[ne] != NULL) {
		ne++;
	}
	char **envp = malloc((ne + nx + 1) * sizeof *envp + len);
	if (envp == NULL) {
		free(blob);
		return NULL;
	}
	char *copy = (char *)(envp + ne + nx + 1);
	memcpy(copy, blob, len);
	free(blob);
	size_t n = 0;
	for (size_t j = 0; j < ne; j++) {
		// A variable of the principal's replaces the vat's of that name.
		const char *eq = strchr(environ[j], '=');
		size_t kl = eq != NULL ? (size_t)(eq - environ[j]) + 1 : strlen(environ[j]);
		int over = 0;
		for (size_t i = 0; i < len && !over; i += strlen(copy + i) + 1) {
			over = strncmp(copy + i, environ[j], kl) == 0;
		}
		if (!over) {
			envp[n++] = environ[j];
		}
	}
	for (size_t i = 0; i < len; i += strlen(copy + i) + 1) {
		envp[n++] = copy + i;
	}
	envp[n] = NULL;
	return envp;
}

// te_spawner is the MCP spawner's loop (a child of the entry forked before
// the entry's own filter, so its processes are free of it). It holds only
// its socket and fds 0-2. Each request is one byte carrying three
// descriptors (the process's stdin, stdout and stderr), and a fourth when
// the process gets a principal's environment (te_env_read reads it); it
// starts the app's command on them in a session of its own, as a child of
// the entry (CLONE_PARENT), and answers {pid, errno}: errno is the exec's
// error, or 0 once the command runs. EOF on the socket (the entry is gone)
// ends it.
static void te_spawner(int sock, char **argv) {
	(void)prctl(PR_SET_NAME, "toybox-spawner", 0, 0, 0);
	if (sock > 3) {
		(void)syscall(SYS_close_range, 3U, (unsigned)sock - 1, 0U);
	}
	(void)syscall(SYS_close_range, (unsigned)sock + 1, ~0U, 0U);
	// Transparent egress: the app's filter on the spawner itself, whose
	// processes inherit it, so that one listener (the entry's) answers
	// the connect() calls of every process of the command. Its first
	// message, the hello, is the launcher's.
	if (te_launch.transparent && te_launch.connector_fd >= 0 && te_filter_self(sock, 1) != 0) {
		_exit(127);
	}
	for (;;) {
		char b;
		struct iovec iov = {.iov_base = &b, .iov_len = 1};
		union {
			char buf[CMSG_SPACE(4 * sizeof(int))];
			struct cmsghdr align;
		} u;
		struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
		ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
		if (n == 0) {
			_exit(0);
		}
		if (n < 0) {
			if (errno == EINTR) {
				continue;
			}
			_exit(1);
		}
		int fds[4] = {-1, -1, -1, -1}, nfd = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
				int *p = (int *)CMSG_DATA(c);
				for (int j = 0; j < k; j++) {
					if (nfd < 4) {
						fds[nfd++] = p[j];
					} else {
						close(p[j]);
					}
				}
			}
		}
		int rep[2] = {0, 0};
		int ep[2] = {-1, -1};
		char **own = NULL; // the process's environment when it gets a principal's
		if ((nfd != 3 && nfd != 4) || (msg.msg_flags & MSG_CTRUNC)) {
			rep[1] = EINVAL;
		} else if (nfd == 4 && (own = te_env_read(fds[3])) == NULL) {
			rep[1] = errno != 0 ? errno : EINVAL;
		} else if (pipe2(ep, O_CLOEXEC) != 0) {
			rep[1] = errno;
		} else {
			long pid = syscall(SYS_clone, (unsigned long)(CLONE_PARENT | SIGCHLD), 0, 0, 0, 0);
			if (pid == 0) {
				// The process: its own session (and so process group),
				// fds 0-2 from the request, nothing else, no mask.
				sigset_t none;
				sigemptyset(&none);
				sigprocmask(SIG_SETMASK, &none, NULL);
				setsid();
				if (dup2(fds[0], 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[2], 2) < 0) {
					int e = errno;
					(void)!write(ep[1], &e, sizeof e);
					_exit(127);
				}
				execve(argv[0], argv, own != NULL ? own : environ);
				int e = errno;
				(void)!write(ep[1], &e, sizeof e);
				_exit(127);
			}
			if (pid < 0) {
				rep[1] = errno;
			} else {
				rep[0] = (int)pid;
				close(ep[1]);
				ep[1] = -1;
				int e;
				ssize_t r;
				do {
					r = read(ep[0], &e, sizeof e);
				} while (r < 0 && errno == EINTR);
				if (r == (ssize_t)sizeof e) {
					rep[1] = e;
				}
			}
		}
		for (int j = 0; j < 2; j++) {
			if (ep[j] >= 0) {
				close(ep[j]);
			}
		}
		free(own);
		for (int j = 0; j < nfd; j++) {
			close(fds[j]);
		}
		while (send(sock, rep, sizeof rep, MSG_NOSIGNAL) < 0 && errno == EINTR) {
		}
	}
}

// te_argv is the entry's argv, for the spawner (te_run_spawner).
static char **te_argv;

static void te_run_spawner(int sock) { te_spawner(sock, te_argv + te_launch.argv_at); }

// te_fork_helper forks a helper of the entry (the MCP spawner, the port
// relay) before the entry locks itself, joined to it by a socketpair: the
// child runs run on its end and never returns; the entry keeps the other
// end in *fd and the child's pid in *pid.
static int te_fork_helper(void (*run)(int sock), int *fd, int *pid, const char **call) {
	int r = te_fork_socket(fd, pid, call);
	if (r < 0) {
		return -1;
	}
	if (r == 0) {
		run(*fd);
		_exit(1);
	}
	return 0;
}

// TE_RELAY_FAST_TRIES is how many times the relay looks for the app's port
// 1 ms apart before it looks every TE_RELAY_SLOW_MS: a server that starts
// fast is found at once, one that starts slowly costs 100 tries a second.
#define TE_RELAY_FAST_TRIES 200
#define TE_RELAY_SLOW_MS 10

// te_app_dial connects a new socket to the app's port on loopback (IPv6
// when v6); the socket, or -errno.
static int te_app_dial(int v6, int port) {
	int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return -errno;
	}
	int r;
	if (v6) {
		struct sockaddr_in6 sa = {0};
		sa.sin6_family = AF_INET6;
		sa.sin6_port = htons((unsigned short)port);
		sa.sin6_addr = in6addr_loopback;
		r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
	} else {
		struct sockaddr_in sa = {0};
		sa.sin_family = AF_INET;
		sa.sin_port = htons((unsigned short)port);
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
	}
	if (r != 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

// te_relay_send answers the entry: {errno, 0} with fd, or {errno, 0}
// alone when fd is negative.
static void te_relay_send(int sock, int err, int fd) {
	int rep[2] = {err, 0};
	te_send_fd(sock, rep, sizeof rep, fd);
}

// te_relay is the app's port relay (a child of the entry forked before
// the entry's own filter, which refuses socket and connect). It holds only
// its socket and fds 0-2, and connects to one place: the app's port on
// loopback, inside the wall's own network namespace.
//  1. It waits until the port accepts (127.0.0.1, else ::1), trying every
//     millisecond, then every TE_RELAY_SLOW_MS; each try that connects is
//     closed at once.
//  2. It makes the listening socket at the listen path ($TOYBOX_LISTEN)
//     and hands it to the entry: {0, 0} with the socket, or {errno, 0}.
//     The supervisor's readiness check then finds a socket that accepts.
//  3. Each byte the entry sends asks for one connection to the port:
//     {0, 0} with the connected socket, or {errno, 0}.
// EOF on its socket (the entry is gone) ends it.
static void te_relay(int sock, int port, const char *path) {
	(void)prctl(PR_SET_NAME, "toybox-relay", 0, 0, 0);
	if (sock > 3) {
		(void)syscall(SYS_close_range, 3U, (unsigned)sock - 1, 0U);
	}
	(void)syscall(SYS_close_range, (unsigned)sock + 1, ~0U, 0U);
	// No signal interrupts a call here; the entry's end ends the wall.
	sigset_t all;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, NULL);
	int v6 = 0;
	for (int n = 0;; n++) {
		int fd = te_app_dial(0, port);
		if (fd < 0) {
			fd = te_app_dial(1, port);
			v6 = 1;
		}
		if (fd >= 0) {
			close(fd);
			break;
		}
		v6 = 0;
		struct pollfd p = {.fd = sock, .events = POLLIN};
		if (poll(&p, 1, n < TE_RELAY_FAST_TRIES ? 1 : TE_RELAY_SLOW_MS) > 0) {
			_exit(0); // the entry writes nothing before it has the socket: it is gone
		}
	}
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0) {
		te_relay_send(sock, errno, -1);
		_exit(1);
	}
	struct sockaddr_un su = {0};
	su.sun_family = AF_UNIX;
	strncpy(su.sun_path, path, sizeof su.sun_path - 1);
	// A socket left by an earlier start of the vat (or made by its app).
	(void)unlink(path);
	if (bind(l, (struct sockaddr *)&su, sizeof su) != 0 || listen(l, 4096) != 0) {
		te_relay_send(sock, errno, -1);
		_exit(1);
	}
	te_relay_send(sock, 0, l);
	close(l);
	for (;;) {
		char b;
		ssize_t n = recv(sock, &b, 1, 0);
		if (n <= 0) {
			_exit(0);
		}
		int fd = te_app_dial(v6, port);
		te_relay_send(sock, fd < 0 ? -fd : 0, fd);
		if (fd >= 0) {
			close(fd);
		}
	}
}

static void te_run_relay(int sock) { te_relay(sock, te_launch.listen_port, te_launch.listen_path); }

#if defined(__x86_64__)
#define TE_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define TE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

// te_lock installs the entry's own seccomp filter, on top of the wall's,
// once the app has started (a filter is inherited, so the app never has
// it): the entry makes no socket and connects, binds or listens on none,
// since its listeners are bound above and its upstream sockets come from
// the switchboard connected. So even code run in the entry could not turn
// a socket it holds (of the switchboard's network) elsewhere with
// connect(AF_UNSPEC) and connect, bind or listen. Each of these, and
// io_uring, fails with EPERM; a call of another ABI (x32) kills the process.
// A send with MSG_FASTOPEN (sendto, sendmsg, sendmmsg) fails with
// EOPNOTSUPP, as under the app's filter (TN_FASTOPEN_TAIL says why).
int te_lock(void) {
#ifdef TE_AUDIT_ARCH
	struct sock_filter f[] = {
		/* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		/* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TE_AUDIT_ARCH, 1, 0),
		/* 2 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		/* 3 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		/* 4 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1),
		/* 5 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		/* 6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 11, 0),
		/* 7 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socketpair, 10, 0),
		/* 8 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_connect, 9, 0),
		/* 9 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_bind, 8, 0),
		/* 10 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_listen, 7, 0),
		// io_uring has socket, connect, bind and listen operations of its
		// own (the wall's filter refuses it too, where the wall has one).
		/* 11 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_io_uring_setup, 6, 0),
		/* 12 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_io_uring_enter, 5, 0),
		/* 13 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_io_uring_register, 4, 0),
		/* 14 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_sendto, 4, 0),
		/* 15 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_sendmmsg, 3, 0),
		/* 16 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_sendmsg, 4, 0),
		/* 17 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		/* 18 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		/* 19..24: sendto, sendmmsg at 19, sendmsg at 21 */ TN_FASTOPEN_TAIL,
	};
	struct sock_fprog prog = {.len = (unsigned short)(sizeof(f) / sizeof(f[0])), .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
		return -1;
	}
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
#else
	return 0; // no table for this architecture: the wall's tier says so
#endif
}

void te_launcher(int argc, char **argv, char **envp) {
	(void)envp;
	struct te_launch *l = &te_launch;
	// The wall runs this program from a descriptor (/proc/self/fd/N), so
	// the kernel named the task "N": it is toybox-entry to whoever looks
	// at /proc/<pid>/comm (the listener-owner check's roles, the bench's
	// count of a wall's processes). Its threads inherit the name.
	(void)prctl(PR_SET_NAME, "toybox-entry", 0, 0, 0);
	if (te_parse(l, argc, argv) != 0) {
		return;
	}
	te_argv = argv;
	// The answer (--ran-fd): this entry runs, so bubblewrap built the
	// wall. A "bwrap: " line in the wall's output is then the app's, not
	// bubblewrap's (the supervisor reads this byte when the wall ends).
	// The end is closed here, long before the app starts: nothing of the
	// app's can answer for the entry.
	if (l->ran_fd >= 0) {
		ssize_t n;
		do {
			n = write(l->ran_fd, "e", 1);
		} while (n < 0 && errno == EINTR);
		close(l->ran_fd); // its number stays in te_launch
	}
	// Nobody in the wall (the app shares the uid) may read or write this
	// process's memory or descriptors through /proc.
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
		te_fail(TE_STAGE_DUMPABLE, "prctl", errno, 0);
		return;
	}
	// Nothing inherited may reach the app.
	const char *call = "";
	if (te_cloexec_all(&call) != 0) {
		te_fail(TE_STAGE_CLOEXEC, call, errno, 0);
		return;
	}
	if (fcntl(l->app_cap_fd, F_GETFD) < 0 || (l->cap_fd >= 3 && fcntl(l->cap_fd, F_GETFD) < 0)) {
		te_fail(TE_STAGE_APPCAP, "fcntl", errno, 0);
		return;
	}
	if (l->mcp && fcntl(l->mcp_fd, F_GETFD) < 0) {
		te_fail(TE_STAGE_MCPFD, "fcntl", errno, 0);
		return;
	}
	// The task fence: the wall's cgroup keeps a reserve of tasks for this
	// process that the app cannot take (below). No app starts without it.
	if (l->fence_fd >= 0 && te_fence_recv() != 0) {
		te_fail(TE_STAGE_FENCE, "recvmsg --task-fence-fd", errno, 0);
		return;
	}
	// The ports are bound before the app starts, so its first connect never
	// finds them closed; connections wait in the backlog until the entry
	// serves them. A vat without a capability for the entry has no network.
	if (l->cap_fd >= 3) {
		for (int i = 0; i < l->nforward; i++) {
			if ((l->forward_fd[i] = te_loopback(SOCK_STREAM, l->forward_port[i], &call)) < 0) {
				te_fail(TE_STAGE_FORWARD, call, errno, l->forward_port[i]);
				te_close_listeners();
				return;
			}
		}
		if (l->proxy_port != 0) {
			if ((l->proxy_fd = te_loopback(SOCK_STREAM, l->proxy_port, &call)) < 0) {
				te_fail(TE_STAGE_PROXY, call, errno, l->proxy_port);
				te_close_listeners();
				return;
			}
		}
		// Transparent egress: the DNS stub's socket and the connector,
		// before the entry locks itself (it makes no socket and connects
		// none; the connector connects the wall's own).
		if (l->transparent) {
			if ((l->dns_fd = te_loopback(SOCK_DGRAM, 0, &call)) < 0 || (l->dns_tcp_fd = te_loopback(SOCK_STREAM, 0, &call)) < 0 || (l->scheme_fd = te_loopback(SOCK_STREAM, 0, &call)) < 0 || te_start_connector(&l->connector_fd, &l->connector_pid, &call) != 0) {
				te_fail(TE_STAGE_NOTIFY, call, errno, 0);
				te_close_listeners();
				return;
			}
		}
	}
	// The app is this process's child to reap: not one the kernel reaps
	// by itself because SIGCHLD came in ignored.
	signal(SIGCHLD, SIG_DFL);
	// The wall's task limit (RLIMIT_NPROC, which the supervisor set before
	// this process ran anything) counts this process's threads with the
	// app's. The app starts with a soft limit TE_TASK_RESERVE below it, so
	// an app that forks up to its limit leaves room for the runtime's
	// threads here: without them the entry would crash, and its wall with
	// it. (The app may raise its soft limit to the hard one; then only its
	// own wall suffers.) posix_spawn returns once the app has exec'd
	// (glibc's vfork), so the entry's own limit comes back right after.
	struct rlimit tasks;
	int lowered = 0;
	if (getrlimit(RLIMIT_NPROC, &tasks) == 0 && tasks.rlim_cur != RLIM_INFINITY) {
		rlim_t reserve = tasks.rlim_cur / 2 < TE_TASK_RESERVE ? tasks.rlim_cur / 2 : TE_TASK_RESERVE;
		struct rlimit app = {tasks.rlim_cur - reserve, tasks.rlim_max};
		lowered = setrlimit(RLIMIT_NPROC, &app) == 0;
	}
	// Where the wall's cgroup holds its tasks (pids.max), the reserve is
	// the cgroup's: the supervisor put this process in the group's app
	// folder (pids.max the wall's less the reserve), and once the app is
	// started there it moves itself out (te_unfence), so everything of
	// the app's is made in it and can never take the reserve, whatever
	// limits it sets itself. The kernel enforces pids.max on forks, not on
	// moves. The move comes after the app's start, not on its way.
	int fence_err = 0;
	if (l->mcp) {
		// The spawner takes the app's place (its processes inherit the
		// lowered limit); the app's capability is closed with the rest
		// below: a stdio MCP vat's processes hold fds 0-2 only.
		int rc = te_fork_helper(te_run_spawner, &l->spawner_fd, &l->spawner_pid, &call) != 0 ? errno : 0;
		if (lowered) {
			(void)setrlimit(RLIMIT_NPROC, &tasks);
		}
		// Transparent egress: the spawner's hello, with the listener.
		if (rc == 0 && l->transparent && l->connector_fd >= 0 && te_filter_hello(l->spawner_fd, &l->notify_fd, &l->notify_err, &call) != 0) {
			rc = errno;
		}
		fence_err = te_unfence();
		if (rc != 0) {
			te_fail(TE_STAGE_SPAWNER, call, rc, 0);
			te_close_listeners();
			return;
		}
	} else if (l->transparent && l->connector_fd >= 0) {
		// The app starts under its own filter, whose listener the entry
		// holds: every connect() it makes waits for the entry's answer.
		int pid = te_spawn_notified(argv + l->argv_at, l->app_cap_fd, 1, &l->notify_fd, &l->notify_err, &call);
		int rc = pid < 0 ? errno : 0;
		if (lowered) {
			(void)setrlimit(RLIMIT_NPROC, &tasks);
		}
		fence_err = te_unfence();
		if (pid < 0) {
			te_fail(TE_STAGE_SPAWN, call, rc, 0);
			te_close_listeners();
			return;
		}
		l->app_pid = pid;
	} else {
		posix_spawn_file_actions_t fa;
		posix_spawnattr_t at;
		int rc = posix_spawn_file_actions_init(&fa);
		if (rc == 0) {
			// dup2 onto itself clears close-on-exec (glibc >= 2.29).
			rc = posix_spawn_file_actions_adddup2(&fa, l->app_cap_fd, 3);
		}
		int rca = posix_spawnattr_init(&at);
		if (rc == 0) {
			rc = rca;
		}
		if (rc == 0) {
			// The app leads a process group of its own: a stop request
			// reaches it and every process it started (npm and its
			// node, a shell and its pipeline), as a terminal's would.
			rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
		}
		if (rc == 0) {
			rc = posix_spawnattr_setpgroup(&at, 0);
		}
		if (rc == 0) {
			pid_t pid;
			rc = posix_spawn(&pid, argv[l->argv_at], &fa, &at, argv + l->argv_at, environ);
			if (rc == 0) {
				l->app_pid = (int)pid;
			}
		}
		posix_spawn_file_actions_destroy(&fa);
		if (rca == 0) {
			posix_spawnattr_destroy(&at);
		}
		if (lowered) {
			(void)setrlimit(RLIMIT_NPROC, &tasks); // up to the hard limit: allowed
		}
		fence_err = te_unfence();
		if (rc != 0) {
			te_fail(TE_STAGE_SPAWN, "posix_spawn", rc, 0);
			te_close_listeners();
			return;
		}
		// The relay starts once the app runs, so the app's start does
		// not wait for it.
		if (l->listen_port > 0 && te_fork_helper(te_run_relay, &l->relay_fd, &l->relay_pid, &call) != 0) {
			// The app runs; main kills it (fail closed).
			te_fail(TE_STAGE_LISTEN, call, errno, l->listen_port);
			te_close_listeners();
			return;
		}
	}
	if (fence_err != 0) {
		// The app runs; main kills it (fail closed): this process is
		// still in the app's group, with no reserve of its own.
		te_fail(TE_STAGE_FENCE, "write the entry's cgroup.procs", fence_err, 0);
		te_close_listeners();
		return;
	}
	if (te_close_others(&call) != 0) {
		// The app runs; main kills it (fail closed).
		te_fail(TE_STAGE_CLOSE, call, errno, 0);
		te_close_listeners();
		return;
	}
	if (te_lock() != 0) {
		te_fail(TE_STAGE_LOCK, "prctl", errno, 0);
		te_close_listeners();
		return;
	}
	l->state = TE_STARTED;
	if (!l->mcp) {
		te_wait_for_need();
	}
}
