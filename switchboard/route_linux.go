package switchboard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// routesHere asks the kernel how it would route a packet to a: whether a is
// an address of this host (a route of type local: an interface's address,
// or a local route such as `ip route add local 10.9.0.0/24 dev lo`). The
// list of interface addresses is read every 15 s and knows no local routes;
// the routing table is what the dial will follow. An error says the
// question could not be asked; no route at all is not an error (false).
func routesHere(a netip.Addr) (bool, error) {
	a = a.WithZone("").Unmap()
	family, bits, dst := unix.AF_INET6, 128, a.AsSlice()
	if a.Is4() {
		family, bits = unix.AF_INET, 32
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return false, os.NewSyscallError("socket(AF_NETLINK)", err)
	}
	defer unix.Close(fd)
	// nlmsghdr, rtmsg, one rtattr: RTA_DST.
	attrLen := unix.SizeofRtAttr + len(dst)
	msgLen := unix.SizeofNlMsghdr + unix.SizeofRtMsg + (attrLen+3)&^3
	b := make([]byte, msgLen)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(msgLen))
	ne.PutUint16(b[4:], unix.RTM_GETROUTE)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(b[8:], 1) // sequence
	rtm := (*unix.RtMsg)(unsafe.Pointer(&b[unix.SizeofNlMsghdr]))
	rtm.Family = uint8(family)
	rtm.Dst_len = uint8(bits)
	at := unix.SizeofNlMsghdr + unix.SizeofRtMsg
	ne.PutUint16(b[at:], uint16(attrLen))
	ne.PutUint16(b[at+2:], unix.RTA_DST)
	copy(b[at+unix.SizeofRtAttr:], dst)
	if err := unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return false, os.NewSyscallError("sendto(RTM_GETROUTE)", err)
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, os.NewSyscallError("recvfrom(RTM_GETROUTE)", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return false, fmt.Errorf("parsing the route of %s: %w", a, err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return false, fmt.Errorf("a short netlink error asking the route of %s", a)
				}
				errno := -int32(ne.Uint32(m.Data[:4]))
				switch syscall.Errno(errno) {
				case 0:
					continue
				case unix.ENETUNREACH, unix.EHOSTUNREACH, unix.EINVAL, unix.EACCES:
					return false, nil // no route (EACCES: a prohibit route): the dial fails anyway
				}
				return false, fmt.Errorf("the route of %s: %w", a, syscall.Errno(errno))
			case unix.RTM_NEWROUTE:
				if len(m.Data) < unix.SizeofRtMsg {
					return false, fmt.Errorf("a short route answer for %s", a)
				}
				r := (*unix.RtMsg)(unsafe.Pointer(&m.Data[0]))
				return r.Type == unix.RTN_LOCAL, nil
			}
		}
	}
}
