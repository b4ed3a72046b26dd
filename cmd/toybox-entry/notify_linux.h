// The launcher's part of transparent egress (notify_linux.c): the app's
// own seccomp filter, whose connect() calls wait for the entry's answer
// (user notification), the wall's DNS socket, and the connector, which
// makes the connects the entry decides stay inside the wall.

#ifndef TE_NOTIFY_H
#define TE_NOTIFY_H

#ifndef MSG_FASTOPEN
#define MSG_FASTOPEN 0x20000000
#endif

// TN_ARG_LO(i) is where the low word of a call's argument i sits in struct
// seccomp_data (both architectures are little-endian).
#define TN_ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))

// TN_FASTOPEN_TAIL ends the app's filter and the entry's own (six
// instructions). A send with MSG_FASTOPEN connects a socket without
// connect(): one that never connected, or one whose connect failed while
// it was under way. It fails with EOPNOTSUPP, as the kernel answers it
// where TCP Fast Open is off; any other send is allowed. Jump to its first
// instruction for sendto and sendmmsg (flags in argument 3), to its third
// for sendmsg (argument 2).
#define TN_FASTOPEN_TAIL \
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, TN_ARG_LO(3)), \
	BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, MSG_FASTOPEN, 3, 2), \
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, TN_ARG_LO(2)), \
	BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, MSG_FASTOPEN, 1, 0), \
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW), \
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EOPNOTSUPP & SECCOMP_RET_DATA))

// te_spawn_notified starts argv with fd 3 = app_cap_fd (every other
// descriptor from 3 up is close-on-exec) under the app's filter. When
// listen is set it asks for a notification listener: *lfd is then that
// listener (close-on-exec, the entry's), or -1 with the reason in
// *lerr, when the kernel cannot give one; the app runs under the same
// filter then, with connect() allowed (the proxy alone). The app's pid, or
// -1 with the failed call in *call and errno set.
int te_spawn_notified(char **argv, int app_cap_fd, int listen, int *lfd, int *lerr, const char **call);

// te_filter_self installs the app's filter on this process (asking for a
// listener when listen is set; the filter with connect() allowed when the
// kernel gives none) and sends its hello on sock, the listener riding
// along. 0, or -1 when no filter could be installed (the hello says why):
// the caller must not run the app then.
int te_filter_self(int sock, int listen);

// te_filter_hello reads te_filter_self's hello from sock: *lfd is the
// listener (close-on-exec) or -1 with the kernel's reason in *lerr. 0, or
// -1 with the failed call in *call and errno set (no filter, or no hello).
int te_filter_hello(int sock, int *lfd, int *lerr, const char **call);

// te_start_connector forks the connector; *fd is the entry's end of its
// socket, *pid its pid. 0, or -1 with the failed call in *call.
int te_start_connector(int *fd, int *pid, const char **call);

// te_early is what the launcher answered before the entry's Go half ran
// (te_early), for that half: the binds and listens it refused, and
// the TCP ports the app listened on (all of them unless ports_all).
struct te_early {
	int refused;
	int nports;
	int ports_all;
	unsigned short ports[64];
};

// te_early answers one notification the launcher received from listener
// nfd before the entry's Go half runs, when it is a bind() or a listen(),
// as that half would (vat/wall/entry, notifier.bind and notifier.listen):
// the socket taken; a socket of the wall's own network (wallfd's) bound
// or made to listen by the connector (cfd); any other refused with EPERM.
// It returns 1 when it answered (or the call is gone), 0 when the
// notification is the Go half's to answer (another call, or a kernel
// without PIDFD_THREAD).
int te_early(int nfd, int cfd, int wallfd, const void *notif, struct te_early *e);

#endif
