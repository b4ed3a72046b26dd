// A hostile app: every way it can think of to get a connection to the
// refused port (argv[2]) out of a socket the notifier handed it for the
// granted one (argv[1]). Prints one line per attempt.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <signal.h>
#include <unistd.h>

static struct sockaddr_in granted, refused;
static atomic_int stop;

static struct sockaddr_in addr(const char *port) {
	struct sockaddr_in sa = {0};
	sa.sin_family = AF_INET;
	sa.sin_port = htons(atoi(port));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	return sa;
}

static const char *err(int r) { return r == 0 ? "OK" : strerrorname_np(errno); }

static int dial(struct sockaddr_in *sa) {
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(fd, (struct sockaddr *)sa, sizeof *sa) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

// The address a connect is given flips between granted and refused.
static struct sockaddr_in flip;
static void *flipper(void *arg) {
	(void)arg;
	while (!atomic_load(&stop)) {
		flip.sin_port = refused.sin_port;
		flip.sin_port = granted.sin_port;
	}
	return NULL;
}

// fd number `target` is swapped between a fresh socket and an injected one.
static int swap_target, swap_injected;
static void *swapper(void *arg) {
	(void)arg;
	while (!atomic_load(&stop)) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		dup2(s, swap_target);
		close(s);
		dup2(swap_injected, swap_target);
	}
	return NULL;
}

static void *many(void *arg) {
	long want_ok = (long)arg;
	struct sockaddr_in sa = want_ok ? granted : refused;
	int fd = dial(&sa);
	if ((fd >= 0) != (want_ok != 0)) {
		printf("MANY wrong %ld %s\n", want_ok, fd >= 0 ? "connected" : strerrorname_np(errno));
	}
	if (fd >= 0) {
		close(fd);
	}
	return NULL;
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	granted = addr(argv[1]);
	refused = addr(argv[2]);
	int s = dial(&granted);
	printf("DIAL granted %s\n", s >= 0 ? "OK" : strerrorname_np(errno));
	struct sockaddr unspec = {.sa_family = AF_UNSPEC};
	// A listener of its own on the refused port number makes
	// 127.0.0.1:refused an address inside the wall: a connect there is
	// made inside, on the socket given, which must never be the one
	// handed over (of the host's network).
	int l = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	printf("LISTEN-INSIDE %s\n", err(bind(l, (struct sockaddr *)&refused, sizeof refused) || listen(l, 16)));
	printf("UNSPEC %s\n", err(connect(s, &unspec, sizeof unspec)));
	printf("RECONNECT %s\n", err(connect(s, (struct sockaddr *)&refused, sizeof refused)));
	close(l);
	printf("FASTOPEN-INJECTED %s\n", err((int)sendto(s, "x", 1, MSG_FASTOPEN, (struct sockaddr *)&refused, sizeof refused) < 0 ? -1 : 0));
	int t = socket(AF_INET, SOCK_STREAM, 0);
	printf("FASTOPEN-FRESH %s\n", err((int)sendto(t, "x", 1, MSG_FASTOPEN, (struct sockaddr *)&refused, sizeof refused) < 0 ? -1 : 0));
	printf("SENDTO-FRESH %s\n", err((int)sendto(t, "x", 1, MSG_NOSIGNAL, (struct sockaddr *)&refused, sizeof refused) < 0 ? -1 : 0));
	struct msghdr mh = {.msg_name = &refused, .msg_namelen = sizeof refused};
	printf("SENDMSG-FASTOPEN %s\n", err((int)sendmsg(t, &mh, MSG_FASTOPEN) < 0 ? -1 : 0));
	printf("IO_URING %s\n", err((int)syscall(SYS_io_uring_setup, 8, calloc(1, 256))));
	printf("PIDFD_GETFD %s\n", err((int)syscall(SYS_pidfd_getfd, 0, 0, 0)));

	// The address changes under the notifier.
	pthread_t th;
	flip = granted;
	pthread_create(&th, NULL, flipper, NULL);
	int got = 0;
	for (int i = 0; i < 300; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&flip, sizeof flip) == 0) {
			got++;
		}
		close(fd);
	}
	atomic_store(&stop, 1);
	pthread_join(th, NULL);
	printf("FLIP done %d\n", got);

	// The descriptor changes under the notifier: a fresh socket and the
	// injected one swap at fd 100 while connects to refused (and
	// disconnects) are made on it.
	atomic_store(&stop, 0);
	swap_target = 100;
	swap_injected = s;
	pthread_create(&th, NULL, swapper, NULL);
	int eisconn = 0, other = 0;
	for (int i = 0; i < 300; i++) {
		int r = i % 2 ? connect(swap_target, &unspec, sizeof unspec) : connect(swap_target, (struct sockaddr *)&refused, sizeof refused);
		if (r != 0 && errno == EISCONN) {
			eisconn++;
		} else {
			other++;
		}
	}
	atomic_store(&stop, 1);
	pthread_join(th, NULL);
	printf("SWAP done %d %d\n", eisconn, other);
	// The injected socket still reaches the granted server alone.
	char req[] = "GET / HTTP/1.0\r\n\r\n", buf[512] = {0};
	write(s, req, strlen(req));
	read(s, buf, sizeof buf - 1);
	printf("INJECTED says %s\n", strstr(buf, "hello through the wall") ? "granted" : strstr(buf, "should not") ? "REFUSED-SERVER" : "nothing");

	// Many threads at once.
	pthread_t ts[64];
	for (long i = 0; i < 64; i++) {
		pthread_create(&ts[i], NULL, many, (void *)(i % 2));
	}
	for (int i = 0; i < 64; i++) {
		pthread_join(ts[i], NULL);
	}
	printf("MANY done\n");
	return 0;
}
