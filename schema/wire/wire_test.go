package wire

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
)

// TestMain fails the package on any capability a test leaves unreleased.
func TestMain(m *testing.M) {
	os.Exit(testenv.RunCheckingLeaks(m))
}

func pair(t *testing.T, acceptB bool) (*Conn, *Conn) {
	t.Helper()
	fds, err := testenv.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	mk := func(fd int, accept bool) *Conn {
		c, err := FromFile(os.NewFile(uintptr(fd), "pair"), accept)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return mk(fds[0], true), mk(fds[1], acceptB)
}

// TestFDsArriveInOrder sends descriptors interleaved with bytes and checks
// that each sequence number names the descriptor the sender meant.
func TestFDsArriveInOrder(t *testing.T) {
	a, b := pair(t, true)
	const n = 20
	var want []string
	for i := 0; i < n; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		msg := string(rune('a' + i))
		if _, err := w.WriteString(msg); err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
		seq, err := a.SendFD(r)
		_ = r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if seq != uint64(i+1) {
			t.Fatalf("SendFD seq = %d; want %d", seq, i+1)
		}
		want = append(want, msg)
		if i%3 == 0 {
			if _, err := a.Write([]byte("xy")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := a.Write([]byte("end")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	got := 0
	for got < 2*7+3 {
		k, err := b.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += k
	}
	for i, w := range want {
		f, err := b.TakeFD(uint64(i + 1))
		if err != nil {
			t.Fatalf("TakeFD(%d): %v", i+1, err)
		}
		data, _ := io.ReadAll(f)
		_ = f.Close()
		if string(data) != w {
			t.Errorf("fd %d reads %q; want %q", i+1, data, w)
		}
	}
	if _, err := b.TakeFD(1); !errors.Is(err, ErrNoFD) {
		t.Errorf("second TakeFD(1) = %v; want ErrNoFD", err)
	}
}

// TestRefusingSideBreaks checks that a side that accepts no descriptors
// closes what it is sent and fails the connection.
func TestRefusingSideBreaks(t *testing.T) {
	a, b := pair(t, false)
	r, w, _ := os.Pipe()
	defer w.Close()
	if _, err := a.SendFD(r); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	if _, err := a.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	_, err := b.Read(make([]byte, 16))
	if !errors.Is(err, ErrFDsRefused) {
		t.Fatalf("Read = %v; want ErrFDsRefused", err)
	}
	var ne net.Error
	_ = errors.As(err, &ne)
}

// TestMessageSize reads Cap'n Proto stream headers as the write path does.
func TestMessageSize(t *testing.T) {
	le := func(words ...uint32) []byte {
		var b []byte
		for _, w := range words {
			b = append(b, byte(w), byte(w>>8), byte(w>>16), byte(w>>24))
		}
		return b
	}
	tests := []struct {
		name string
		p    []byte
		size int
		ok   bool
	}{
		{"one segment of 3 words", le(0, 3), 8 + 24, true},
		{"two segments, padded header", le(1, 2, 5, 0), 16 + 56, true},
		{"short", []byte{0, 0, 0}, 0, false},
		{"header cut off", le(3, 1, 1), 0, false},
		{"absurd segment count", le(100000, 1), 0, false},
		{"plain text is no header", []byte("hello world"), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			size, ok := messageSize(tt.p)
			if size != tt.size || ok != tt.ok {
				t.Errorf("messageSize = %d, %v; want %d, %v", size, ok, tt.size, tt.ok)
			}
		})
	}
}

// TestManyFDsOneWrite queues more descriptors than one sendmsg carries,
// then writes once: every descriptor and every byte arrives, in order.
func TestManyFDsOneWrite(t *testing.T) {
	a, b := pair(t, true)
	const n = 2*maxFDsPerWrite + 3
	for i := 0; i < n; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteString(string(rune('a' + i))); err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
		if i%2 == 0 {
			_, err = a.SendFD(r)
			_ = r.Close()
		} else {
			_, err = a.SendOwned(r) // takes r
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	const msg = "0123456789abcdefghijklmnopqrstuvwxyz"
	if _, err := a.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 64)
	for len(got) < len(msg) {
		k, err := b.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:k]...)
	}
	if string(got) != msg {
		t.Errorf("bytes = %q; want %q", got, msg)
	}
	for i := 0; i < n; i++ {
		f, err := b.TakeFD(uint64(i + 1))
		if err != nil {
			t.Fatalf("TakeFD(%d): %v", i+1, err)
		}
		data, _ := io.ReadAll(f)
		_ = f.Close()
		if want := string(rune('a' + i)); string(data) != want {
			t.Errorf("fd %d reads %q; want %q", i+1, data, want)
		}
	}
}

// TestTruncatedDescriptorsEndTheConnection: when the receiver cannot
// install every descriptor of a message (it has run out: EMFILE), the
// kernel drops the rest and says so (MSG_CTRUNC); sequence numbers would be
// off from then on, naming the wrong socket. The connection ends instead.
func TestTruncatedDescriptorsEndTheConnection(t *testing.T) {
	fds, err := testenv.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	sender, err := FromFile(os.NewFile(uintptr(fds[0]), "sender"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	receiver, err := FromFile(os.NewFile(uintptr(fds[1]), "receiver"), true)
	if err != nil {
		t.Fatal(err)
	}
	defer receiver.Close()
	for range 3 {
		f, err := os.Open("/dev/null")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sender.SendOwned(f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sender.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	// No room for another descriptor in this process: the limit is the
	// lowest free descriptor number.
	probe, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	lowest := probe.Fd()
	_ = probe.Close()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = uint64(lowest)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	_, rerr := receiver.Read(make([]byte, 16))
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(rerr, ErrTruncated) {
		t.Fatalf("Read = %v; want %v", rerr, ErrTruncated)
	}
	if _, err := receiver.TakeFD(1); err == nil {
		t.Error("a descriptor of the truncated message could be taken")
	}
}
