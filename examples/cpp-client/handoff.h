// A unix stream connection to a toybox switchboard that carries Cap'n Proto
// and keeps the descriptors the switchboard hands over (Handle.connect with
// wantFd), numbered as docs/switchboard.md ("The descriptor handoff")
// specifies: every descriptor that arrives on the connection, counted from
// 1 in arrival order.
//
// kj's own socket stream cannot be used for this: its tryRead() reads with
// read(2), which drops the descriptors, and its tryReadWithFds() closes the
// ones that do not fit its buffer and does not report the ones the kernel
// dropped (MSG_CTRUNC), so a count kept over it could go wrong unnoticed.
// Here every byte is read with recvmsg(2) and room for the most descriptors
// one sendmsg(2) can carry; a dropped descriptor ends the connection.
#pragma once

#include <kj/async-io.h>
#include <kj/async-unix.h>

#include <cstdint>
#include <map>

namespace toybox {

class HandoffStream final : public kj::AsyncIoStream {
public:
  // Takes a connected, non-blocking unix stream socket.
  HandoffStream(kj::UnixEventPort& port, kj::AutoCloseFd fd);

  // Connects to the unix socket at path (blocking; a unix connect does not
  // wait on the network) and returns it non-blocking and close-on-exec.
  static kj::AutoCloseFd dial(kj::StringPtr path);

  // The descriptor with sequence number seq (Handle.connect's fd). It can
  // be taken once; the caller owns it. Throws if it has not arrived.
  kj::AutoCloseFd takeFd(uint64_t seq);

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override;
  kj::Promise<void> write(const void* buffer, size_t size) override;
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override;
  kj::Promise<void> whenWriteDisconnected() override;
  void shutdownWrite() override;

private:
  kj::AutoCloseFd fd;
  kj::UnixEventPort::FdObserver observer;
  uint64_t received = 0;  // descriptors that have arrived, the sequence count
  std::map<uint64_t, kj::AutoCloseFd> inbox;
  kj::Maybe<kj::Exception> broken;

  kj::Promise<size_t> readLoop(kj::byte* buffer, size_t minBytes, size_t maxBytes, size_t done);
  kj::Promise<void> writeFrom(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces, size_t skip);
  // One recvmsg: the bytes read, 0 at end of stream, -1 if none is ready.
  ssize_t receive(kj::byte* buffer, size_t max);
};

}  // namespace toybox
