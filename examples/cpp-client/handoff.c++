#include "handoff.h"

#include <kj/debug.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace toybox {

namespace {

// The most descriptors one sendmsg(2) may carry on Linux (SCM_MAX_FD). One
// recvmsg(2) returns the descriptors of at most one sendmsg, so a buffer this
// big is never truncated by its size.
constexpr size_t kMaxFdsPerRead = 253;

// Descriptors held unclaimed before the connection is ended (a peer that
// sends more than its caller takes would fill the descriptor table).
constexpr size_t kMaxUnclaimed = 256;

// Pieces of a message gathered into one sendmsg(2).
constexpr size_t kIovBatch = 64;

}  // namespace

HandoffStream::HandoffStream(kj::UnixEventPort& port, kj::AutoCloseFd fdIn)
    : fd(kj::mv(fdIn)), observer(port, fd.get(), kj::UnixEventPort::FdObserver::OBSERVE_READ_WRITE) {}

kj::AutoCloseFd HandoffStream::dial(kj::StringPtr path) {
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  KJ_REQUIRE(path.size() < sizeof(addr.sun_path), "socket path too long", path);
  memcpy(addr.sun_path, path.begin(), path.size());
  int raw;
  KJ_SYSCALL(raw = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  kj::AutoCloseFd sock(raw);
  KJ_SYSCALL(::connect(sock.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)), path);
  int flags;
  KJ_SYSCALL(flags = ::fcntl(sock.get(), F_GETFL));
  KJ_SYSCALL(::fcntl(sock.get(), F_SETFL, flags | O_NONBLOCK));
  return sock;
}

kj::AutoCloseFd HandoffStream::takeFd(uint64_t seq) {
  auto it = inbox.find(seq);
  if (it == inbox.end()) {
    KJ_IF_MAYBE(e, broken) {
      kj::throwFatalException(kj::cp(*e));
    }
    KJ_FAIL_REQUIRE("no descriptor with that sequence number", seq);
  }
  kj::AutoCloseFd taken = kj::mv(it->second);
  inbox.erase(it);
  return taken;
}

kj::Promise<size_t> HandoffStream::tryRead(void* buffer, size_t minBytes, size_t maxBytes) {
  return kj::evalNow([&]() { return readLoop(static_cast<kj::byte*>(buffer), minBytes, maxBytes, 0); });
}

kj::Promise<size_t> HandoffStream::readLoop(kj::byte* buffer, size_t minBytes, size_t maxBytes, size_t done) {
  while (done < minBytes) {
    ssize_t n = receive(buffer + done, maxBytes - done);
    if (n < 0) {
      return observer.whenBecomesReadable().then([this, buffer, minBytes, maxBytes, done]() {
        return readLoop(buffer, minBytes, maxBytes, done);
      });
    }
    if (n == 0) break;  // end of stream
    done += n;
  }
  return done;
}

ssize_t HandoffStream::receive(kj::byte* buffer, size_t max) {
  KJ_IF_MAYBE(e, broken) {
    kj::throwFatalException(kj::cp(*e));
  }
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerRead)];
  struct iovec iov;
  iov.iov_base = buffer;
  iov.iov_len = max;
  struct msghdr msg;
  memset(&msg, 0, sizeof(msg));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(fd.get(), &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return -1;
    KJ_FAIL_SYSCALL("recvmsg", errno);
  }
  // Every descriptor is numbered, even one closed at once below: the
  // switchboard counts every descriptor it sends.
  bool full = false;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; i++) {
      int got;
      memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      kj::AutoCloseFd owned(got);
      received++;
      if (inbox.size() >= kMaxUnclaimed) {
        full = true;  // owned is closed here
        continue;
      }
      inbox.emplace(received, kj::mv(owned));
    }
  }
  if (msg.msg_flags & MSG_CTRUNC) {
    // The kernel dropped descriptors it could not install (EMFILE, say):
    // every later sequence number would name the wrong one.
    broken = KJ_EXCEPTION(DISCONNECTED,
        "descriptors were dropped on the way in (out of descriptors?): the connection is ended");
  } else if (full) {
    broken = KJ_EXCEPTION(DISCONNECTED, "too many unclaimed descriptors: the connection is ended");
  }
  KJ_IF_MAYBE(e, broken) {
    ::shutdown(fd.get(), SHUT_RDWR);
    kj::throwFatalException(kj::cp(*e));
  }
  return n;
}

kj::Promise<void> HandoffStream::write(const void* buffer, size_t size) {
  auto piece = kj::arrayPtr(static_cast<const kj::byte*>(buffer), size);
  // writeFrom reads the pieces again after a wait: they must outlive it.
  auto pieces = kj::heapArray<kj::ArrayPtr<const kj::byte>>(1);
  pieces[0] = piece;
  auto view = pieces.asPtr();
  return writeFrom(view, 0).attach(kj::mv(pieces));
}

kj::Promise<void> HandoffStream::write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  return writeFrom(pieces, 0);
}

kj::Promise<void> HandoffStream::writeFrom(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces, size_t skip) {
  return kj::evalNow([&]() -> kj::Promise<void> {
    for (;;) {
      struct iovec iov[kIovBatch];
      size_t count = 0;
      size_t off = skip;
      for (auto& piece : pieces) {
        if (off >= piece.size()) {
          off -= piece.size();
          continue;
        }
        if (count == kIovBatch) break;
        iov[count].iov_base = const_cast<kj::byte*>(piece.begin() + off);
        iov[count].iov_len = piece.size() - off;
        off = 0;
        count++;
      }
      if (count == 0) return kj::READY_NOW;
      struct msghdr msg;
      memset(&msg, 0, sizeof(msg));
      msg.msg_iov = iov;
      msg.msg_iovlen = count;
      ssize_t n = ::sendmsg(fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          size_t at = skip;
          return observer.whenBecomesWritable().then([this, pieces, at]() { return writeFrom(pieces, at); });
        }
        KJ_FAIL_SYSCALL("sendmsg", errno);
      }
      skip += n;
    }
  });
}

kj::Promise<void> HandoffStream::whenWriteDisconnected() {
  // The Cap'n Proto connection learns of a hang-up from the read side.
  return kj::NEVER_DONE;
}

void HandoffStream::shutdownWrite() {
  KJ_SYSCALL(::shutdown(fd.get(), SHUT_WR));
}

}  // namespace toybox
