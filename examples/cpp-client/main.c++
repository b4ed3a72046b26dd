// cpp-client: a switchboard client in C++ (Debian's libcapnp-dev: kj async
// and capnp-rpc), to show that the toybox contract, the descriptor handoff
// included, is not Go's alone.
//
//   cpp-client SOCKET [-c LABELS]... describe
//   cpp-client SOCKET [-c LABELS]... check HOST:PORT
//   cpp-client SOCKET [-c LABELS]... connect [--stream] HOST:PORT MESSAGE [HOST:PORT MESSAGE]...
//
// SOCKET is a switchboard socket (or any socket whose bootstrap is a
// Handle). Each -c narrows the handle with Handle.constrain, in order; LABELS
// is key=value pairs joined by commas (scheme=tcp,host=127.0.0.1,port=8080).
// Every handle of the chain is held until exit: releasing one revokes the
// handles made from it.
//
// describe prints the handle's labels; check prints the decision. connect
// opens a tcp stream to each HOST:PORT (the calls sent together), sends its
// MESSAGE, half-closes and prints what the remote answers until it closes: by
// default on the connected socket itself, handed over by the switchboard
// (wantFd); with --stream through the ByteStream pair (wantFd false). Exit 0 admitted, 3 refused (the refusal on stderr, starting
// "egress refused: "), 1 other errors, 2 bad usage: as `toybox egress`.
#include "handoff.h"
#include "toybox.capnp.h"

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/debug.h>
#include <kj/vector.h>

#include <arpa/inet.h>
#include <cstdio>
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace {

constexpr int kExitOK = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitRefused = 3;

int usage() {
  fprintf(stderr,
      "usage: cpp-client SOCKET [-c LABELS]... describe\n"
      "       cpp-client SOCKET [-c LABELS]... check HOST:PORT\n"
      "       cpp-client SOCKET [-c LABELS]... connect [--stream] HOST:PORT MESSAGE [HOST:PORT MESSAGE]...\n"
      "LABELS: key=value pairs joined by commas (scheme, host, port, network)\n");
  return kExitUsage;
}

// A connect's or a check's target, and what a connect sends.
struct Endpoint {
  kj::String host;
  uint16_t port = 0;
  kj::StringPtr message;
};

bool parsePort(kj::StringPtr text, uint16_t& port) {
  if (text.size() == 0 || text.size() > 5) return false;
  unsigned long v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v == 0 || v > 65535) return false;
  port = static_cast<uint16_t>(v);
  return true;
}

// HOST:PORT, or [V6]:PORT.
bool parseTarget(kj::StringPtr text, Endpoint& t) {
  KJ_IF_MAYBE(colon, text.findLast(':')) {
    auto host = kj::heapString(text.begin(), *colon);
    if (host.size() >= 2 && host[0] == '[' && host[host.size() - 1] == ']') {
      host = kj::heapString(host.begin() + 1, host.size() - 2);
    }
    if (host.size() == 0) return false;
    t.host = kj::mv(host);
    return parsePort(text.slice(*colon + 1), t.port);
  }
  return false;
}

// Fills l from "key=value,key=value".
bool parseLabels(kj::StringPtr text, Labels::Builder l) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = start;
    while (end < text.size() && text[end] != ',') end++;
    auto pair = kj::heapString(text.begin() + start, end - start);
    KJ_IF_MAYBE(eq, pair.findFirst('=')) {
      auto key = kj::heapString(pair.begin(), *eq);
      kj::StringPtr value = pair.slice(*eq + 1);
      if (key == "scheme") {
        l.setScheme(value);
      } else if (key == "host") {
        l.setHost(value);
      } else if (key == "network") {
        l.setNetwork(value);
      } else if (key == "port") {
        uint16_t port;
        if (!parsePort(value, port)) {
          fprintf(stderr, "cpp-client: bad port %s\n", value.cStr());
          return false;
        }
        l.setPort(port);
      } else {
        fprintf(stderr, "cpp-client: unknown label %s\n", key.cStr());
        return false;
      }
    } else {
      fprintf(stderr, "cpp-client: %s is not key=value\n", pair.cStr());
      return false;
    }
    start = end + 1;
  }
  return true;
}

void setTarget(::Target::Builder b, const Endpoint& t) {
  b.setScheme("tcp");
  b.setHost(t.host);
  b.setPort(t.port);
}

void printLabels(Labels::Reader l) {
  kj::Vector<kj::String> parts;
  auto add = [&](const char* key, capnp::Text::Reader v) {
    if (v.size() > 0) parts.add(kj::str(key, "=", v));
  };
  add("network", l.getNetwork());
  add("scheme", l.getScheme());
  add("host", l.getHost());
  if (l.getPort() != 0) parts.add(kj::str("port=", l.getPort()));
  add("vat", l.getVat());
  add("origin", l.getOrigin());
  printf("labels: %s\n", kj::strArray(parts, " ").cStr());
}

// A refusal's text from a Cap'n Proto exception: the switchboard's error
// text starts "egress refused: ", whatever the RPC layer puts before it.
int report(const kj::Exception& e) {
  kj::StringPtr desc = e.getDescription();
  const char* at = strstr(desc.cStr(), "egress refused: ");
  if (at != nullptr) {
    fprintf(stderr, "%s\n", at);
    return kExitRefused;
  }
  fprintf(stderr, "cpp-client: %s\n", desc.cStr());
  return kExitError;
}

// Collects what the switchboard writes to a ByteStream until end().
class Collect final : public ByteStream::Server {
public:
  explicit Collect(kj::Own<kj::PromiseFulfiller<kj::String>> done) : done(kj::mv(done)) {}
  ~Collect() noexcept(false) {
    if (done->isWaiting()) {
      done->reject(KJ_EXCEPTION(DISCONNECTED, "the downstream was dropped before end()"));
    }
  }

protected:
  kj::Promise<void> write(WriteContext context) override {
    auto data = context.getParams().getData();
    got.addAll(reinterpret_cast<const char*>(data.begin()), reinterpret_cast<const char*>(data.end()));
    return kj::READY_NOW;
  }
  kj::Promise<void> end(EndContext) override {
    done->fulfill(kj::heapString(got.begin(), got.size()));
    return kj::READY_NOW;
  }

private:
  kj::Own<kj::PromiseFulfiller<kj::String>> done;
  kj::Vector<char> got;
};

void writeAll(int fd, kj::StringPtr data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n;
    KJ_SYSCALL(n = ::send(fd, data.begin() + off, data.size() - off, MSG_NOSIGNAL));
    off += n;
  }
}

kj::String readAll(int fd) {
  kj::Vector<char> got;
  char buf[4096];
  for (;;) {
    ssize_t n;
    KJ_SYSCALL(n = ::read(fd, buf, sizeof(buf)));
    if (n == 0) break;
    got.addAll(buf, buf + n);
  }
  return kj::heapString(got.begin(), got.size());
}

kj::String peerName(int fd, uint16_t& port) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  KJ_SYSCALL(::getpeername(fd, reinterpret_cast<struct sockaddr*>(&ss), &len));
  char text[INET6_ADDRSTRLEN];
  if (ss.ss_family == AF_INET) {
    auto* in = reinterpret_cast<struct sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    port = ntohs(in->sin_port);
    return kj::str(text, ":", port);
  }
  KJ_REQUIRE(ss.ss_family == AF_INET6, "the handed-over socket is not TCP");
  auto* in6 = reinterpret_cast<struct sockaddr_in6*>(&ss);
  inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
  port = ntohs(in6->sin6_port);
  return kj::str("[", text, "]:", port);
}

// Sends a connect for each target at once (the answers may come back in any
// order), and returns the answers in the targets' order.
kj::Vector<capnp::Response<Handle::ConnectResults>> connectAll(Handle::Client h, kj::ArrayPtr<const Endpoint> targets,
    bool wantFd, kj::Vector<kj::Promise<kj::String>>& replies, kj::WaitScope& ws) {
  kj::Vector<kj::Promise<capnp::Response<Handle::ConnectResults>>> calls;
  for (auto& t : targets) {
    auto req = h.connectRequest();
    setTarget(req.initTarget(), t);
    req.setWantFd(wantFd);
    if (!wantFd) {
      auto paf = kj::newPromiseAndFulfiller<kj::String>();
      req.setDownstream(kj::heap<Collect>(kj::mv(paf.fulfiller)));
      replies.add(kj::mv(paf.promise));
    }
    calls.add(req.send());
  }
  kj::Vector<capnp::Response<Handle::ConnectResults>> answers;
  for (auto& call : calls) answers.add(call.wait(ws));
  return answers;
}

// connect with wantFd: each answer names, by its sequence number on this
// connection, the connected socket itself.
void connectFd(toybox::HandoffStream& conn, Handle::Client h, kj::ArrayPtr<const Endpoint> targets,
    kj::WaitScope& ws) {
  kj::Vector<kj::Promise<kj::String>> none;
  auto answers = connectAll(h, targets, true, none, ws);
  for (size_t i = 0; i < targets.size(); i++) {
    uint64_t seq = answers[i].getFd();
    kj::AutoCloseFd sock = conn.takeFd(seq);
    int type = 0;
    socklen_t tlen = sizeof(type);
    KJ_SYSCALL(::getsockopt(sock.get(), SOL_SOCKET, SO_TYPE, &type, &tlen));
    KJ_REQUIRE(type == SOCK_STREAM, "the handed-over descriptor is not a stream socket");
    uint16_t port;
    auto peer = peerName(sock.get(), port);
    KJ_REQUIRE(port == targets[i].port, "the descriptor is connected to another port", seq, peer, targets[i].port);
    printf("fd: descriptor %llu, a socket connected to %s\n", static_cast<unsigned long long>(seq), peer.cStr());
    // It arrives in blocking mode, as an accepted socket does.
    writeAll(sock.get(), targets[i].message);
    KJ_SYSCALL(::shutdown(sock.get(), SHUT_WR));
    auto reply = readAll(sock.get());
    // The switchboard keeps a duplicate of the socket: close(2) alone would
    // not end the connection; shutdown(2) both ways does.
    ::shutdown(sock.get(), SHUT_RDWR);
    printf("got: %s\n", reply.cStr());
  }
}

// connect without wantFd: the bytes go through the capability, the remote's
// written to our downstream, ours to the upstream the switchboard returns.
void connectStream(Handle::Client h, kj::ArrayPtr<const Endpoint> targets, kj::WaitScope& ws) {
  kj::Vector<kj::Promise<kj::String>> replies;
  auto answers = connectAll(h, targets, false, replies, ws);
  for (size_t i = 0; i < targets.size(); i++) {
    KJ_REQUIRE(answers[i].getFd() == 0, "a relayed connect named a descriptor");
    auto up = answers[i].getUpstream();
    printf("stream: relayed through the switchboard\n");
    auto w = up.writeRequest();
    auto message = targets[i].message;
    w.setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(message.begin()), message.size()));
    w.send().wait(ws);
    up.endRequest().send().wait(ws);
    auto reply = replies[i].wait(ws);
    printf("got: %s\n", reply.cStr());
  }
}

int check(Handle::Client h, const Endpoint& t, kj::WaitScope& ws) {
  auto req = h.checkRequest();
  setTarget(req.initTarget(), t);
  auto res = req.send().wait(ws);
  auto d = res.getDecision();
  kj::Vector<kj::String> addrs;
  for (auto a : d.getAddresses()) addrs.add(kj::heapString(a));
  if (!d.getAllow()) {
    fprintf(stderr, "egress refused: %s\n", d.getReason().cStr());
    if (addrs.size() > 0) fprintf(stderr, "addresses: %s\n", kj::strArray(addrs, " ").cStr());
    return kExitRefused;
  }
  printf("allowed: %s\naddresses: %s\nvetted: %s\n", d.getReason().cStr(), kj::strArray(addrs, " ").cStr(),
      d.getVetted().cStr());
  return kExitOK;
}

int run(int argc, char* argv[]) {
  if (argc < 3) return usage();
  kj::StringPtr socketPath = argv[1];
  kj::Vector<kj::StringPtr> narrow;
  int i = 2;
  while (i < argc && strcmp(argv[i], "-c") == 0) {
    if (i + 1 >= argc) return usage();
    narrow.add(argv[i + 1]);
    i += 2;
  }
  if (i >= argc) return usage();
  kj::StringPtr op = argv[i++];
  bool stream = false;
  if (op == "connect" && i < argc && strcmp(argv[i], "--stream") == 0) {
    stream = true;
    i++;
  }
  kj::Vector<Endpoint> targets;
  if (op == "describe") {
    if (i != argc) return usage();
  } else if (op == "check") {
    if (i + 1 != argc) return usage();
    targets.add();
    if (!parseTarget(argv[i], targets.back())) return usage();
  } else if (op == "connect") {
    if (i >= argc || (argc - i) % 2 != 0) return usage();
    for (; i < argc; i += 2) {
      targets.add();
      if (!parseTarget(argv[i], targets.back())) return usage();
      targets.back().message = argv[i + 1];
    }
  } else {
    return usage();
  }

  auto io = kj::setupAsyncIo();
  auto& ws = io.waitScope;
  toybox::HandoffStream conn(io.unixEventPort, toybox::HandoffStream::dial(socketPath));
  capnp::TwoPartyClient client(conn);
  kj::Vector<Handle::Client> held;
  held.add(client.bootstrap().castAs<Handle>());
  for (auto text : narrow) {
    auto req = held.back().constrainRequest();
    if (!parseLabels(text, req.initLabels())) return kExitUsage;
    // Waited for, not pipelined, so that a conflict is reported as such.
    auto res = req.send().wait(ws);
    held.add(res.getHandle());
  }
  Handle::Client h = held.back();
  if (op == "describe") {
    printLabels(h.describeRequest().send().wait(ws).getLabels());
    return kExitOK;
  }
  if (op == "check") return check(h, targets[0], ws);
  if (stream) {
    connectStream(h, targets, ws);
  } else {
    connectFd(conn, h, targets, ws);
  }
  return kExitOK;
}

}  // namespace

int main(int argc, char* argv[]) {
  int code = kExitError;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { code = run(argc, argv); })) {
    return report(*e);
  }
  return code;
}
