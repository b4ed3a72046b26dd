# The toybox contract: what the switchboard, the supervisor and a vat say to
# one another. Authority is a capability: holding a Handle is holding the egress
# it admits; holding a Door is holding that host function.
@0xf87d9be7acf38326;

using Go = import "/go.capnp";  # shipped in std/ (see std/README.md)
$Go.package("schema");
$Go.import("toybox/schema");

struct Labels {
  # A label set (see ARCHITECTURE.md, "Labels"). An empty text or a zero port
  # means the key is absent: unconstrained.
  scheme  @0 :Text;    # "http", "https" or "tcp"
  host    @1 :Text;    # canonical host: lower case A-label, or canonical IP text
  port    @2 :UInt16;  # 1-65535; 0 = absent
  network @3 :Text;    # "public" or "local"; set by the switchboard socket
  vat     @4 :Text;    # the vat's id; set only by the supervisor
  origin  @5 :Text;    # "manifest": written by the add-on's author, not typed
                       # by its owner; set only by the supervisor; read only by
                       # the listener-owner check
}

struct Target {
  # What a caller asks to reach. For connect, scheme is "tcp", or "https" when
  # the caller declares a TLS stream. For check, any of http, https, tcp.
  scheme @0 :Text;
  host   @1 :Text;
  port   @2 :UInt16;   # 0 = the scheme's default
}

struct Decision {
  allow     @0 :Bool;
  reason    @1 :Text;        # why, in words a person can act on
  addresses @2 :List(Text);  # every address the name resolved to
  vetted    @3 :Text;        # the address that would be (or was) dialled
}

struct Header {
  name  @0 :Text;
  value @1 :Text;
}

interface ByteStream {
  # A flow-controlled byte stream. Writers must set a flow limiter.
  write @0 (data :Data) -> stream;
  end   @1 ();   # no more bytes will follow (half close)
}

interface MessageStream {
  # WebSocket messages in one direction.
  send  @0 (data :Data, binary :Bool) -> stream;
  close @1 (code :UInt16, reason :Text);
}

interface Responder {
  # Where the switchboard delivers the answer to a request().
  start @0 (status :UInt16, headers :List(Header)) -> (body :ByteStream);
  # The response body is written to the returned stream, then end()ed.
  fail  @1 (message :Text);
  # The request could not be completed (after it was admitted).
}

interface Handle {
  # Egress, constrained by labels. Refusals are errors whose text starts
  # "egress refused: ".

  describe  @0 () -> (labels :Labels);
  # The labels this handle carries.

  constrain @1 (labels :Labels) -> (handle :Handle);
  # A narrower handle: labels only accumulate; a conflict is an error.

  check     @2 (target :Target) -> (decision :Decision);
  # The full decision (labels, DNS, address classes) without dialling.

  connect   @3 (target :Target, tlsHello :Data, wantFd :Bool,
                downstream :ByteStream, inProgress :Bool) -> (fd :UInt64, upstream :ByteStream);
  # A TCP stream to target. With scheme "https", tlsHello must hold the first
  # bytes of the caller's stream: a TLS ClientHello whose SNI equals the host
  # when the host is a name; the switchboard checks it and sends it first.
  # With wantFd and a same-host caller on a unix connection, the connected
  # socket itself comes back: fd is the sequence number of the descriptor
  # passed with SCM_RIGHTS on this connection (docs/switchboard.md, "The
  # descriptor handoff"), and upstream is null. Otherwise fd is 0, the
  # remote's bytes are written to downstream and the caller writes its bytes
  # to upstream. With wantFd, inProgress and no tlsHello, a socket whose
  # connect is still under way may come back (the caller's own connect was
  # non-blocking): the caller sees the end of the handshake on the socket.

  request   @4 (method :Text, url :Text, headers :List(Header),
                responder :Responder) -> (body :ByteStream);
  # An HTTP(S) request. Decided before it returns; the request body is
  # written to body (then end()ed); the answer arrives at responder.
  # Redirects are never followed.

  webSocket @5 (url :Text, headers :List(Header), downstream :MessageStream)
            -> (upstream :MessageStream, protocol :Text);
  # A ws/wss connection, after the upgrade succeeded.

  socket    @6 () -> (fd :UInt64);
  # A new unix connection to the switchboard whose bootstrap is a handle
  # with this one's labels, made from it: revoked with it, and closed when
  # it is. fd is the sequence number of the descriptor of its other end,
  # passed on this connection as connect's is. The supervisor asks it for
  # toybox-entry, whose connects then take one hop (docs/switchboard.md).

  revoke    @7 ();
  # Revokes this handle and every handle, connection and socket made
  # through it, before it answers (a release takes effect some time after
  # the release is sent). The supervisor revokes a member a regrant
  # removes, so that no direct connection connects once the regrant is
  # done.
}

struct DoorEntry {
  name   @0 :Text;   # "METHOD /path"
  method @1 :Text;
  path   @2 :Text;
}

interface Door {
  # One or more host functions; holding it is the permission.
  entries @0 () -> (entries :List(DoorEntry));
  call    @1 (method :Text, path :Text, headers :List(Header), body :Data)
          -> (status :UInt16, headers :List(Header), body :Data);
}

interface DoorSet {
  # A vat's own doors.
  list @0 () -> (entries :List(DoorEntry));
  all  @1 () -> (door :Door);          # every entry of the set
  get  @2 (name :Text) -> (door :Door); # narrowed to one entry
}

struct Notifier {
  # toybox-entry's report, in its egress() call, of what its wall got for
  # transparent egress; the supervisor reads it from the entry's own
  # connection only (an app's is ignored).
  asked     @0 :Bool;  # the wall asked for a connect() listener
  installed @1 :Bool;  # the kernel gave it: every connect() is answered through the Handle
  why       @2 :Text;  # asked and not installed: why the kernel gave none
}

interface Vat {
  # The bootstrap capability a vat finds on fd 3.
  egress @0 (notifier :Notifier) -> (handle :Handle);  # null when the vat has no grant
  doors  @1 () -> (doors :DoorSet);  # empty set when it has none
  id     @2 () -> (id :Text);

  direct @3 () -> (fds :List(UInt64), members :List(Labels), gen :UInt64);
  # toybox-entry only: one switchboard connection per member of the
  # vat's grant (Handle.socket), each fd a descriptor sequence number on
  # this connection, with that member's labels. Every connection is shut
  # when its member leaves the grant or the vat stops; ask again after one
  # closes, or once grantChanged answers. Empty: no grant. gen is the
  # grant's generation these members are of.

  reportDirect @4 (reports :List(DirectReport));
  # toybox-entry only: what became of connects made on direct
  # connections, for the vat's status and metrics.

  grantChanged @5 (gen :UInt64) -> (gen :UInt64);
  # toybox-entry only: answers once the grant's generation is not gen
  # (at once if it already is not), with the new one: the entry then asks
  # direct again, so that a member a regrant adds takes one hop too.
  # Fails when the vat stops.
}

struct DirectReport {
  target  @0 :Target;
  allowed @1 :Bool;   # false: admitted, but the connect failed
  reason  @2 :Text;   # how it failed
}
