package owner

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

const tcpHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

const tcp6Header = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

// Rows as a little-endian kernel prints them (x86-64, arm64).
const tcpLE = tcpHeader +
	"   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 104 1 00000000719593ac 100 0 0 10 0\n" +
	"   1: 0100007F:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000 64000        0 2001 1 0000000000000000 100 0 0 10 0\n" +
	"   2: 0100007F:1538 0100007F:D431 01 00000000:00000000 00:00000000 00000000 64000        0 2002 1 0000000000000000 20 4 30 10 -1\n" +
	"   3: 0200007F:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 2003 1 0000000000000000 100 0 0 10 0\n"

const tcp6LE = tcp6Header +
	"   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3001 1 0000000000000000 100 0 0 10 0\n" +
	"   1: 00000000000000000000000001000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 3002 1 0000000000000000 100 0 0 10 0\n" +
	"   2: 0000000000000000FFFF00000100007F:1538 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 3003 1 0000000000000000 100 0 0 10 0\n"

// The same sockets as a big-endian kernel (s390x) prints them.
const tcpBE = tcpHeader +
	"   0: 7F000001:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000 64000        0 2001 1 0000000000000000 100 0 0 10 0\n"

const tcp6BE = tcp6Header +
	"   0: 00000000000000000000000000000001:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 3002 1 0000000000000000 100 0 0 10 0\n"

func l(addr string, port uint16, uid int, inode uint64) Listener {
	return Listener{Addr: netip.MustParseAddr(addr), Port: port, UID: uid, Inode: inode}
}

func TestParseProcNet(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		v6    bool
		order binary.ByteOrder
		want  []Listener
	}{
		{"tcp little-endian, LISTEN rows only", tcpLE, false, binary.LittleEndian, []Listener{
			l("0.0.0.0", 2024, 0, 104),
			l("127.0.0.1", 5432, 64000, 2001),
			l("127.0.0.2", 80, 1000, 2003),
		}},
		{"tcp6 little-endian", tcp6LE, true, binary.LittleEndian, []Listener{
			l("::", 8080, 0, 3001),
			l("::1", 22, 1000, 3002),
			l("::ffff:127.0.0.1", 5432, 1001, 3003),
		}},
		{"tcp big-endian", tcpBE, false, binary.BigEndian, []Listener{l("127.0.0.1", 5432, 64000, 2001)}},
		{"tcp6 big-endian", tcp6BE, true, binary.BigEndian, []Listener{l("::1", 22, 1000, 3002)}},
		{"header only", tcpHeader, false, binary.LittleEndian, nil},
		{
			"a row of another state is skipped unread", tcpHeader +
				"   0: 0100007F:1538 0100007F:D431 06 not the rest of a row\n" +
				"   1: 0100007F:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000 64000        0 2001 1 0000000000000000 100 0 0 10 0\n",
			false, binary.LittleEndian,
			[]Listener{l("127.0.0.1", 5432, 64000, 2001)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProcNet(strings.NewReader(tt.in), tt.v6, tt.order)
			if err != nil {
				t.Fatalf("ParseProcNet: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("ParseProcNet = %v; want %v", got, tt.want)
			}
		})
	}
}

func TestParseProcNetRefuses(t *testing.T) {
	row := "   0: 0100007F:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000 64000        0 2001 1 0 100 0 0 10 0\n"
	tests := []struct {
		name string
		in   string
		v6   bool
	}{
		{"empty", "", false},
		{"no header", row, false},
		{"short row", tcpHeader + "   0: 0100007F:1538 00000000:0000 0A\n", false},
		{"v6 address in tcp", tcpHeader + strings.Replace(row, "0100007F", "00000000000000000000000001000000", 1), false},
		{"v4 address in tcp6", tcp6Header + row, true},
		{"bad hex", tcpHeader + strings.Replace(row, "0100007F", "0100007G", 1), false},
		{"bad port", tcpHeader + strings.Replace(row, ":1538", ":15389", 1), false},
		{"bad uid", tcpHeader + strings.Replace(row, "64000", "-1", 1), false},
		{"bad inode", tcpHeader + strings.Replace(row, " 2001 ", " x ", 1), false},
		{"bad state", tcpHeader + strings.Replace(row, " 0A ", " ZZ ", 1), false},
		{"no sl colon", tcpHeader + strings.Replace(row, "0:", "0", 1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProcNet(strings.NewReader(tt.in), tt.v6, binary.LittleEndian)
			if !errors.Is(err, ErrProcNet) {
				t.Errorf("ParseProcNet = %v, %v; want an error wrapping ErrProcNet", got, err)
			}
		})
	}
}

func FuzzParseProcNet(f *testing.F) {
	for _, s := range []string{tcpLE, tcp6LE, tcpBE, tcp6BE, tcpHeader, ""} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, in string, v6 bool) {
		ls, err := ParseProcNet(strings.NewReader(in), v6, binary.LittleEndian)
		if err != nil {
			if !errors.Is(err, ErrProcNet) {
				t.Fatalf("error %v does not wrap ErrProcNet", err)
			}
			return
		}
		for _, l := range ls {
			if v6 != l.Addr.Is6() {
				t.Fatalf("listener %v from a v6=%v table", l, v6)
			}
			if l.UID < 0 {
				t.Fatalf("negative uid in %v", l)
			}
		}
	})
}

func TestAnswering(t *testing.T) {
	all := []Listener{
		l("127.0.0.1", 5432, 1, 1),
		l("0.0.0.0", 5432, 2, 2),
		l("::", 5432, 3, 3),
		l("::ffff:127.0.0.1", 5432, 4, 4),
		l("::1", 5432, 5, 5),
		l("127.0.0.2", 5432, 6, 6),
		l("::ffff:0.0.0.0", 5432, 7, 7),
		l("127.0.0.1", 5433, 8, 8),
		l("192.0.2.2", 5432, 9, 9),
	}
	tests := []struct {
		target string
		want   []uint64
	}{
		{"127.0.0.1:5432", []uint64{1, 2, 3, 4, 7}},
		{"[::ffff:127.0.0.1]:5432", []uint64{1, 2, 3, 4, 7}},
		{"127.0.0.2:5432", []uint64{2, 3, 6, 7}},
		{"[::1]:5432", []uint64{3, 5}},
		{"127.0.0.1:5433", []uint64{8}},
		{"127.0.0.1:9", nil},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			var got []uint64
			for _, x := range Answering(all, netip.MustParseAddrPort(tt.target)) {
				got = append(got, x.Inode)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Answering(%s) = inodes %v; want %v", tt.target, got, tt.want)
			}
		})
	}
}
