//go:build linux && cgo

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "notify_linux.h"
#include "sock_linux.h"

extern char **environ;

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif

#if defined(__x86_64__)
#define TN_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define TN_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

// te_app_filter is the app's own filter, on top of the wall's: connect(),
// bind(), listen() and shutdown() wait for the entry (connect_ret is
// SECCOMP_RET_USER_NOTIF), or are allowed when the kernel gave no
// listener. Whatever the answer, the app may not read another process
// (the entry itself reads the app's memory and descriptors, so the wall's
// filter lets those calls through for it), use io_uring (its connect
// never passes here), or send with MSG_FASTOPEN (a connect without
// connect()). bind(), listen() and shutdown() are the entry's because a
// socket of the host's network the entry put in place can be bound there
// once its connection has ended, and listened on there once a shutdown
// during its handshake has disconnected it; and a listen the entry makes
// tells it which ports listen in the wall.
static int te_app_filter(unsigned int connect_ret, unsigned int flags) {
#ifdef TN_AUDIT_ARCH
	struct sock_filter f[] = {
		/* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		/* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TN_AUDIT_ARCH, 1, 0),
		/* 2 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		/* 3 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		/* 4 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1),
		/* 5 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		/* 6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_connect, 14, 0),
		/* 7 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_bind, 13, 0),
		/* 8 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_listen, 12, 0),
		/* 9 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_shutdown, 11, 0),
		/* 10 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_getfd, 11, 0),
		/* 11 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 10, 0),
		/* 12 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 9, 0),
		/* 13 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_ptrace, 8, 0),
		/* 14 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_io_uring_setup, 7, 0),
		/* 15 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_io_uring_enter, 6, 0),
		/* 16 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_io_uring_register, 5, 0),
		/* 17 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_sendto, 5, 0),
		/* 18 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_sendmmsg, 4, 0),
		/* 19 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_sendmsg, 5, 0),
		/* 20 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		/* 21 */ BPF_STMT(BPF_RET | BPF_K, connect_ret),
		/* 22 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		/* 23..28: sendto, sendmmsg at 23, sendmsg at 25 */ TN_FASTOPEN_TAIL,
	};
	struct sock_fprog prog = {.len = (unsigned short)(sizeof(f) / sizeof(f[0])), .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
		return -1;
	}
	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
#else
	(void)connect_ret;
	(void)flags;
	errno = ENOSYS;
	return -1;
#endif
}

// The child's first message to the launcher: the listener's errno (0: the
// listener rides along), or the step that failed before exec.
struct tn_hello {
	int lerr;
	int failed; // 1: the filter could not be installed at all (err)
	int err;
};

int te_filter_self(int sock, int listen) {
	struct tn_hello h = {0};
	int l = -1;
	if (listen) {
		l = te_app_filter(SECCOMP_RET_USER_NOTIF, SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV);
		if (l < 0) {
			h.lerr = errno;
		}
	}
	if (l < 0 && te_app_filter(SECCOMP_RET_ALLOW, 0) < 0) {
		h.failed = 1;
		h.err = errno;
		te_send_fd(sock, &h, sizeof h, -1);
		return -1;
	}
	te_send_fd(sock, &h, sizeof h, l);
	if (l >= 0) {
		close(l);
	}
	return 0;
}

int te_filter_hello(int sock, int *lfd, int *lerr, const char **call) {
	*lfd = -1;
	*lerr = 0;
	struct tn_hello h = {0};
	ssize_t n = te_recv_fd(sock, &h, sizeof h, lfd);
	int err = 0;
	if (n != (ssize_t)sizeof h) {
		err = n < 0 ? errno : EPROTO;
		*call = "starting the app (its filter)";
	} else if (h.failed) {
		err = h.err;
		*call = "seccomp (the app's filter)";
	}
	if (err != 0) {
		if (*lfd >= 0) {
			close(*lfd);
			*lfd = -1;
		}
		errno = err;
		return -1;
	}
	*lerr = h.lerr;
	return 0;
}

int te_spawn_notified(char **argv, int app_cap_fd, int listen, int *lfd, int *lerr, const char **call) {
	*lfd = -1;
	*lerr = 0;
	int sock, pid;
	int r = te_fork_socket(&sock, &pid, call);
	if (r < 0) {
		return -1;
	}
	if (r == 0) {
		// Above fd 3, which the app's capability takes below.
		int s = fcntl(sock, F_DUPFD_CLOEXEC, 10);
		if (s < 0) {
			_exit(127);
		}
		close(sock);
		sock = s;
		if (te_filter_self(sock, listen) != 0) {
			_exit(127);
		}
		if (app_cap_fd == 3) {
			if (fcntl(3, F_SETFD, 0) < 0) {
				int e = errno;
				te_send_fd(sock, &e, sizeof e, -1);
				_exit(127);
			}
		} else if (dup2(app_cap_fd, 3) < 0) {
			int e = errno;
			te_send_fd(sock, &e, sizeof e, -1);
			_exit(127);
		}
		execve(argv[0], argv, environ);
		int e = errno;
		te_send_fd(sock, &e, sizeof e, -1);
		_exit(127);
	}
	int fail = 0, ferr = 0;
	if (te_filter_hello(sock, lfd, lerr, call) != 0) {
		fail = 1;
		ferr = errno;
	} else {
		ssize_t n;
		int e = 0;
		do {
			n = recv(sock, &e, sizeof e, 0);
		} while (n < 0 && errno == EINTR);
		if (n == (ssize_t)sizeof e) {
			fail = 1;
			ferr = e;
			*call = "execve";
		}
	}
	close(sock);
	if (fail) {
		if (*lfd >= 0) {
			close(*lfd);
			*lfd = -1;
		}
		errno = ferr;
		return -1;
	}
	return (int)pid;
}

// The connector's messages. A connect request (op TN_CONNECT) is a
// socket (SCM_RIGHTS) of the wall's own network and the address to
// connect it to; the answer is connect's errno (0: connected). A bind
// request (TN_BIND) is the same for bind(2), made as the app's thread tid
// would make it: a relative unix path from its working folder, the file
// under its umask (read from its status). A listen request
// (TN_LISTEN) makes the socket listen with backlog arg; its answer's val
// is the port it listens on (0: not an inet socket). A probe (TN_PROBE,
// no socket) binds a fresh TCP socket with SO_REUSEADDR to the address:
// EADDRINUSE means something in the wall listens there.
enum { TN_CONNECT = 0, TN_PROBE = 1, TN_BIND = 2, TN_LISTEN = 3 };

struct tn_req {
	uint64_t id;
	uint32_t len;
	uint32_t op;
	uint32_t tid;
	uint32_t arg;
	uint8_t addr[128];
};

struct tn_rep {
	uint64_t id;
	int32_t err;
	uint32_t val;
};

static uint64_t tn_cookie;
static int tn_sock;

struct tn_job {
	struct tn_req req;
	int fd;
};

// tn_own reports whether j's socket is of the wall's own network. When it
// is not, rep->err says so: the call's own errno for a descriptor that is
// no socket (ENOTSOCK), else other.
static int tn_own(struct tn_job *j, struct tn_rep *rep, int other) {
	uint64_t cookie = 0;
	socklen_t cl = sizeof cookie;
	if (getsockopt(j->fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &cl) != 0) {
		rep->err = errno;
		return 0;
	}
	if (cookie != tn_cookie) {
		rep->err = other;
		return 0;
	}
	return 1;
}

// tn_reply closes j's socket and sends rep.
static void tn_reply(struct tn_job *j, struct tn_rep *rep) {
	close(j->fd);
	while (send(tn_sock, rep, sizeof *rep, MSG_NOSIGNAL) < 0 && errno == EINTR) {
	}
}

// tn_connect makes one connect, on a socket of the wall's own network
// only: one that is not (the switchboard's, handed to the app connected)
// is never connected again.
static void tn_connect(struct tn_job *j) {
	struct tn_rep rep = {.id = j->req.id};
	if (tn_own(j, &rep, EISCONN)) {
		int r;
		do {
			r = connect(j->fd, (struct sockaddr *)j->req.addr, j->req.len);
		} while (r < 0 && errno == EINTR);
		rep.err = r < 0 ? errno : 0;
	}
	tn_reply(j, &rep);
}

// tn_umask reads thread tid's umask (Umask: in its status), or -1.
static int tn_umask(uint32_t tid) {
	char path[32], buf[2048];
	snprintf(path, sizeof path, "/proc/%u/status", tid);
	int f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0) {
		return -1;
	}
	ssize_t n = read(f, buf, sizeof buf - 1);
	close(f);
	if (n <= 0) {
		return -1;
	}
	buf[n] = 0;
	char *u = strstr(buf, "\nUmask:");
	if (u == NULL) {
		return -1;
	}
	char *end;
	unsigned long m = strtoul(u + 7, &end, 8);
	return end == u + 7 || m > 0777 ? -1 : (int)m;
}

// tn_bind makes one bind, on a socket of the wall's own network only
// (EPERM otherwise), in the calling thread's working folder and under its
// umask for a unix path. The connector's own calls never depend on its
// folder (connect's unix paths come absolute), so it goes back to /.
static void tn_bind(struct tn_job *j) {
	struct tn_rep rep = {.id = j->req.id};
	sa_family_t fam = AF_UNSPEC;
	if (j->req.len >= sizeof fam) {
		memcpy(&fam, j->req.addr, sizeof fam);
	}
	size_t at = offsetof(struct sockaddr_un, sun_path);
	int rel = fam == AF_UNIX && j->req.len > at && j->req.addr[at] != 0 && j->req.addr[at] != '/';
	char cwd[32];
	snprintf(cwd, sizeof cwd, "/proc/%u/cwd", j->req.tid);
	if (!tn_own(j, &rep, EPERM)) {
	} else if (rel && chdir(cwd) != 0) {
		rep.err = errno == ENOENT ? ESRCH : errno;
	} else {
		mode_t old = 0;
		int m = fam == AF_UNIX ? tn_umask(j->req.tid) : -1;
		int mask = m >= 0;
		if (mask) {
			old = umask((mode_t)m);
		}
		rep.err = bind(j->fd, (struct sockaddr *)j->req.addr, j->req.len) < 0 ? errno : 0;
		if (mask) {
			umask(old);
		}
		if (rel) {
			(void)chdir("/");
		}
	}
	tn_reply(j, &rep);
}

// tn_listen makes a socket of the wall's own network listen (EPERM for
// any other) and answers the port it listens on.
static void tn_listen(struct tn_job *j) {
	struct tn_rep rep = {.id = j->req.id};
	if (!tn_own(j, &rep, EPERM)) {
	} else if (listen(j->fd, (int)j->req.arg) != 0) {
		rep.err = errno;
	} else {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		if (getsockname(j->fd, (struct sockaddr *)&ss, &sl) == 0 && (ss.ss_family == AF_INET || ss.ss_family == AF_INET6)) {
			rep.val = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port : ((struct sockaddr_in6 *)&ss)->sin6_port);
		}
	}
	tn_reply(j, &rep);
}

static void *tn_thread(void *arg) {
	struct tn_job *j = arg;
	tn_connect(j);
	free(j);
	return NULL;
}

// TN_MAX_THREADS bounds the connects that may block at once (blocking
// sockets); past it they wait their turn in the loop.
#define TN_MAX_THREADS 32
static int tn_threads;
static pthread_mutex_t tn_mu = PTHREAD_MUTEX_INITIALIZER;

static void *tn_thread_counted(void *arg) {
	tn_thread(arg);
	pthread_mutex_lock(&tn_mu);
	tn_threads--;
	pthread_mutex_unlock(&tn_mu);
	return NULL;
}

static void te_connector(int sock) {
	(void)prctl(PR_SET_NAME, "toybox-connect", 0, 0, 0);
	if (sock > 3) {
		(void)syscall(SYS_close_range, 3U, (unsigned)sock - 1, 0U);
	}
	(void)syscall(SYS_close_range, (unsigned)sock + 1, ~0U, 0U);
	tn_sock = sock;
	int probe = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	socklen_t cl = sizeof tn_cookie;
	if (probe < 0 || getsockopt(probe, SOL_SOCKET, SO_NETNS_COOKIE, &tn_cookie, &cl) != 0 || tn_cookie == 0) {
		_exit(1); // the entry sees EOF: every in-wall connect fails closed
	}
	close(probe);
	for (;;) {
		struct tn_job *j = calloc(1, sizeof *j);
		if (j == NULL) {
			_exit(1);
		}
		// A request whose descriptor did not come whole has none.
		ssize_t n = te_recv_fd(sock, &j->req, sizeof j->req, &j->fd);
		if (n == 0) {
			_exit(0);
		}
		if (n < 0) {
			_exit(1);
		}
		if (n == (ssize_t)sizeof j->req && j->req.op == TN_PROBE && j->fd < 0 && j->req.len >= sizeof(sa_family_t) && j->req.len <= sizeof j->req.addr) {
			struct tn_rep rep = {.id = j->req.id};
			sa_family_t fam;
			memcpy(&fam, j->req.addr, sizeof fam);
			int p = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
			int one = 1;
			if (p < 0 || setsockopt(p, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 || bind(p, (struct sockaddr *)j->req.addr, j->req.len) != 0) {
				rep.err = errno;
			}
			if (p >= 0) {
				close(p);
			}
			free(j);
			(void)send(sock, &rep, sizeof rep, MSG_NOSIGNAL);
			continue;
		}
		if (j->fd >= 0 && n == (ssize_t)sizeof j->req && j->req.op == TN_BIND && j->req.len <= sizeof j->req.addr) {
			tn_bind(j); // never waits
			free(j);
			continue;
		}
		if (j->fd >= 0 && n == (ssize_t)sizeof j->req && j->req.op == TN_LISTEN) {
			tn_listen(j); // never waits
			free(j);
			continue;
		}
		if (j->fd < 0 || n != (ssize_t)sizeof j->req || j->req.op != TN_CONNECT || j->req.len > sizeof j->req.addr) {
			struct tn_rep rep = {.id = j->req.id, .err = EINVAL};
			if (j->fd >= 0) {
				close(j->fd);
			}
			free(j);
			(void)send(sock, &rep, sizeof rep, MSG_NOSIGNAL);
			continue;
		}
		int fl = fcntl(j->fd, F_GETFL);
		if (fl >= 0 && (fl & O_NONBLOCK)) {
			tn_connect(j); // returns at once: EINPROGRESS or done
			free(j);
			continue;
		}
		// A blocking connect can wait (a full backlog): on a thread of
		// its own, so the others go on.
		pthread_mutex_lock(&tn_mu);
		int spare = tn_threads < TN_MAX_THREADS;
		if (spare) {
			tn_threads++;
		}
		pthread_mutex_unlock(&tn_mu);
		pthread_t t;
		pthread_attr_t a;
		if (spare && pthread_attr_init(&a) == 0) {
			pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
			pthread_attr_setstacksize(&a, 64 << 10);
			int rc = pthread_create(&t, &a, tn_thread_counted, j);
			pthread_attr_destroy(&a);
			if (rc == 0) {
				continue;
			}
		}
		if (spare) {
			pthread_mutex_lock(&tn_mu);
			tn_threads--;
			pthread_mutex_unlock(&tn_mu);
		}
		tn_connect(j);
		free(j);
	}
}

// TN_EARLY_ID is the id of te_early's requests: the Go half's count
// up from 1, and it has sent none yet.
#define TN_EARLY_ID 0xffffffffffffffffULL
#define TN_PIDFD_THREAD O_EXCL
#define TN_IOCTL_SEND 0xc0182101
#define TN_IOCTL_ID_VALID 0x40082102

static int tn_valid(int nfd, uint64_t id) { return ioctl(nfd, TN_IOCTL_ID_VALID, &id) == 0; }

static void tn_answer(int nfd, uint64_t id, int err) {
	struct seccomp_notif_resp r = {.id = id, .error = -err};
	(void)ioctl(nfd, TN_IOCTL_SEND, &r);
}

int te_early(int nfd, int cfd, int wallfd, const void *notif, struct te_early *e) {
	const struct seccomp_notif *sn = notif;
	int nr = sn->data.nr;
	if (nr != SYS_bind && nr != SYS_listen) {
		return 0;
	}
	int tid = (int)sn->pid;
	int pfd = (int)syscall(SYS_pidfd_open, tid, TN_PIDFD_THREAD);
	if (pfd < 0 && errno == EINVAL) {
		return 0; // before Linux 6.9: the Go half finds the thread's process
	}
	struct tn_req req = {.id = TN_EARLY_ID, .op = TN_BIND, .tid = (uint32_t)tid};
	int err = 0, sock = -1;
	if (pfd < 0) {
		err = errno;
		goto answer;
	}
	if (nr == SYS_listen) {
		req.op = TN_LISTEN;
		req.arg = (uint32_t)sn->data.args[1];
	} else {
		uint64_t alen = sn->data.args[2] & 0xffffffffU;
		if (alen < 2 || alen > sizeof req.addr) {
			err = EINVAL;
			goto answer;
		}
		req.len = (uint32_t)alen;
		struct iovec lo = {req.addr, alen}, re = {(void *)(uintptr_t)sn->data.args[1], alen};
		if (syscall(SYS_process_vm_readv, tid, &lo, 1UL, &re, 1UL, 0UL) != (long)alen) {
			err = EFAULT;
			goto answer;
		}
		// The thread read is still the one that called: the address is its.
		if (!tn_valid(nfd, sn->id)) {
			goto gone;
		}
	}
	sock = (int)syscall(SYS_pidfd_getfd, pfd, (int)sn->data.args[0], 0);
	if (sock < 0) {
		err = errno;
		goto answer;
	}
	if (!tn_valid(nfd, sn->id)) {
		goto gone;
	}
	uint64_t cookie = 0, wall = 0;
	socklen_t cl = sizeof cookie, wl = sizeof wall;
	if (getsockopt(sock, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &cl) != 0) {
		err = errno;
		goto answer;
	}
	if (getsockopt(wallfd, SOL_SOCKET, SO_NETNS_COOKIE, &wall, &wl) != 0 || wall == 0 || cookie != wall) {
		e->refused++;
		err = EPERM;
		goto answer;
	}
	te_send_fd(cfd, &req, sizeof req, sock);
	struct tn_rep rep;
	ssize_t n;
	do {
		n = recv(cfd, &rep, sizeof rep, 0);
	} while (n < 0 && errno == EINTR);
	err = n == (ssize_t)sizeof rep && rep.id == TN_EARLY_ID ? rep.err : EACCES;
	if (req.op == TN_LISTEN && err == 0 && rep.val != 0) {
		if (e->nports < (int)(sizeof e->ports / sizeof e->ports[0])) {
			e->ports[e->nports++] = (unsigned short)rep.val;
		} else {
			e->ports_all = 1;
		}
	}
answer:
	if (tn_valid(nfd, sn->id)) {
		tn_answer(nfd, sn->id, err);
	}
gone:
	if (sock >= 0) {
		close(sock);
	}
	if (pfd >= 0) {
		close(pfd);
	}
	return 1;
}

int te_start_connector(int *fd, int *pid, const char **call) {
	int r = te_fork_socket(fd, pid, call);
	if (r == 0) {
		te_connector(*fd);
		_exit(1);
	}
	return r < 0 ? -1 : 0;
}
