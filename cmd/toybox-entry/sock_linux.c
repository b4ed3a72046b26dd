//go:build linux && cgo

#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sock_linux.h"

int te_loopback(int type, int port, const char **call) {
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		*call = "socket";
		return -1;
	}
	int one = 1;
	struct sockaddr_in sa = {0};
	sa.sin_family = AF_INET;
	sa.sin_port = htons((unsigned short)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (port != 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0) {
		*call = "setsockopt";
	} else if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		*call = "bind";
	} else if (type == SOCK_STREAM && listen(fd, 4096) < 0) {
		*call = "listen";
	} else {
		return fd;
	}
	int err = errno;
	close(fd);
	errno = err;
	return -1;
}

void te_send_fd(int sock, const void *b, size_t n, int fd) {
	struct iovec iov = {.iov_base = (void *)b, .iov_len = n};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	if (fd >= 0) {
		msg.msg_control = u.buf;
		msg.msg_controllen = sizeof u.buf;
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof fd);
	}
	while (sendmsg(sock, &msg, MSG_NOSIGNAL) < 0 && errno == EINTR) {
	}
}

ssize_t te_recv_fd(int sock, void *b, size_t n, int *fd) {
	*fd = -1;
	struct iovec iov = {.iov_base = b, .iov_len = n};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	ssize_t r;
	do {
		r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	} while (r < 0 && errno == EINTR);
	if (r < 0) {
		return r;
	}
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	if (c != NULL && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int))) {
		memcpy(fd, CMSG_DATA(c), sizeof(int));
	}
	if ((msg.msg_flags & MSG_CTRUNC) != 0 && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	return r;
}

int te_fork_socket(int *fd, int *pid, const char **call) {
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
		*call = "socketpair";
		return -1;
	}
	pid_t p = fork();
	if (p < 0) {
		int err = errno;
		close(sv[0]);
		close(sv[1]);
		errno = err;
		*call = "fork";
		return -1;
	}
	if (p == 0) {
		close(sv[0]);
		*fd = sv[1];
		return 0;
	}
	close(sv[1]);
	*fd = sv[0];
	*pid = (int)p;
	return 1;
}
