// The socket helpers the launcher (launcher_linux.c) and its part of
// transparent egress (notify_linux.c) share.

#ifndef TE_SOCK_H
#define TE_SOCK_H

#include <stddef.h>
#include <sys/types.h>

// te_loopback returns a close-on-exec socket of type (SOCK_STREAM or
// SOCK_DGRAM) bound to 127.0.0.1:port (0: a port of the kernel's choice).
// A stream socket also listens. A fixed port is bound with SO_REUSEADDR.
// On failure it returns -1 with errno set and the failed call in *call.
int te_loopback(int type, int port, const char **call);

// te_send_fd sends the n bytes at b on sock, with fd (SCM_RIGHTS) when it
// is not negative. EINTR is retried. Other errors are the peer's to see.
void te_send_fd(int sock, const void *b, size_t n, int fd);

// te_recv_fd reads one message of at most n bytes into b from sock, with
// MSG_CMSG_CLOEXEC, retrying EINTR. *fd is the one descriptor that came
// with it, or -1: none came, or more than one (the kernel closed those it
// dropped; the one it kept is closed here). It returns what recvmsg does.
ssize_t te_recv_fd(int sock, void *b, size_t n, int *fd);

// te_fork_socket forks with a SOCK_SEQPACKET socket pair between the two
// processes. It returns 1 in the parent (*fd its end, *pid the child's)
// and 0 in the child (*fd its end). On failure it returns -1 with errno
// set and the failed call in *call.
int te_fork_socket(int *fd, int *pid, const char **call);

#endif
