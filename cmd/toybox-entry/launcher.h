// The launcher's interface to the Go side of toybox-entry (launch_linux.go).
#ifndef TOYBOX_ENTRY_LAUNCHER_H
#define TOYBOX_ENTRY_LAUNCHER_H

#include "notify_linux.h"

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
	TE_STAGE_APPCAP = 6,  // the app's capability is not an open descriptor
	TE_STAGE_CLOSE = 7,   // closing what the entry does not hold
	TE_STAGE_LOCK = 8,    // the entry's own seccomp filter
	TE_STAGE_SPAWNER = 9, // starting the MCP spawner
	TE_STAGE_MCPFD = 10,  // the MCP listener is not an open descriptor
	TE_STAGE_LISTEN = 11, // starting the app's port relay (te_relay)
	TE_STAGE_NOTIFY = 12, // the DNS socket or the connector
	TE_STAGE_FENCE = 13,  // the task fence: its descriptors, or a move between groups
};

#define TE_MAX_LISTEN 256

// te_launch is the one reading of the entry's flags (te_parse), and what
// the launcher did with them. Every string points into the argv it read.
struct te_launch {
	int state;
	int stage;
	int err;
	int port;
	const char *call;
	const char *why;
	int bad_at; // TE_NOT_RUN: the argument why is about (0: none)
	int app_pid;
	int argv_at;
	const char *vat;       // --vat (NULL: none)
	const char *log_level; // --log-level: debug, info, warn or error (NULL: warn)
	int cap_fd, app_cap_fd, proxy_port;
	// --forward, in order: the port the entry listens on, the target
	// (host_len bytes at host, then its port) and the listener.
	int nforward;
	int forward_port[TE_MAX_LISTEN];
	const char *forward_host[TE_MAX_LISTEN];
	int forward_host_len[TE_MAX_LISTEN];
	int forward_target[TE_MAX_LISTEN];
	int forward_fd[TE_MAX_LISTEN];
	int proxy_fd;
	// MCP mode: the bridge's listening socket, the mode and its limits,
	// and the spawner.
	int mcp, mcp_fd, mcp_max_procs, mcp_idle_seconds;
	const char *mcp_mode, *mcp_era;
	int spawner_fd, spawner_pid;
	// The app's own TCP port (--listen-port) and $TOYBOX_LISTEN
	// (--listen-path), and the relay helper that makes the socket there
	// and connects to the port (te_relay).
	int listen_port;
	const char *listen_path;
	int relay_fd, relay_pid;
	// Transparent egress (--egress-mode transparent): the app's
	// notification listener (-1: none, notify_err says why), the wall's
	// DNS socket and the connector.
	int transparent, notify_fd, notify_err, dns_fd, connector_fd, connector_pid;
	// A notification the launcher received before the Go half ran and
	// left to it (pending: its 80 bytes, struct seccomp_notif), and what
	// it answered meanwhile (te_early).
	int pending;
	unsigned char pending_notif[80];
	struct te_early early;
	// The DNS stub's TCP socket, listening (resolvers retry over TCP on
	// truncation; some use it alone).
	int dns_tcp_fd;
	// The listener a connect() granted under another scheme alone
	// (http, https) is put through: the entry reads what the stream
	// opens with and asks for that scheme.
	int scheme_fd;
	// The task fence (--task-fence-fd): its socket (closed once read),
	// then the entry's own cgroup.procs the supervisor sent on it (-1:
	// none).
	int fence_fd, fence_home;
	// The entry's answer that it ran (--ran-fd): a pipe it writes one
	// byte to and closes before anything else (-1: none).
	int ran_fd;
};

// te_launch is what the launcher did, for main to read.
extern struct te_launch te_launch;

// te_parse reads the entry's flags from argv into l, which the caller
// zeroes. It returns 0 when they are a launch's, or -1 with the reason in
// l->why. It reads only argv and writes only l.
int te_parse(struct te_launch *l, int argc, char **argv);

// te_launcher is the launcher: the constructor in launch_linux.go calls it
// with the process's arguments before the Go runtime starts.
void te_launcher(int argc, char **argv, char **envp);

// te_lock installs the entry's own seccomp filter in this process; 0 or -1
// with errno set.
int te_lock(void);

#endif
