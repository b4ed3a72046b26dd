package wire

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// frame is one stream-framed message of size bytes (a single segment),
// its first words n and seq.
func frame(size int, n, seq uint64) []byte {
	b := make([]byte, 8+size)
	binary.LittleEndian.PutUint32(b[4:], uint32(size/8))
	binary.LittleEndian.PutUint64(b[8:], n)
	binary.LittleEndian.PutUint64(b[16:], seq)
	return b
}

// readFrame reads one message framed by frame and returns its first words.
func readFrame(r io.Reader) (n, seq uint64, size int, err error) {
	hdr := make([]byte, 8)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return 0, 0, 0, err
	}
	size = 8 * int(binary.LittleEndian.Uint32(hdr[4:]))
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, 0, 0, err
	}
	return binary.LittleEndian.Uint64(body), binary.LittleEndian.Uint64(body[8:]), size, nil
}

// TestWriteBehindKeepsOrder: messages the peer does not take at once go
// behind, the writer returning at once; a message too large to copy waits
// and is written in line. The peer gets every message in order, and each
// descriptor is the one the message naming it meant.
func TestWriteBehindKeepsOrder(t *testing.T) {
	a, b := pair(t, true)
	const n = 100
	const size = 32 << 10 // 3.2 MiB in all: more than the sockets hold
	start := time.Now()
	for i := uint64(1); i <= n; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(w, "fd of %d", i)
		_ = w.Close()
		seq, err := a.SendFD(r)
		_ = r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Write(frame(size, i, seq)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if q := a.Queued(); q == 0 || q > behindMax {
		t.Fatalf("Queued = %d after %d writes the peer did not read; want some, at most %d", q, n, behindMax)
	}
	t.Logf("%d messages written in %s, %d bytes behind", n, time.Since(start), a.Queued())
	// One larger than behindMax: it waits, then goes in line.
	big := make(chan error, 1)
	go func() {
		_, err := a.Write(frame(behindMax+size, n+1, 0))
		big <- err
	}()
	for i := uint64(1); i <= n+1; i++ {
		got, seq, sz, err := readFrame(b)
		if err != nil {
			t.Fatalf("reading message %d: %v", i, err)
		}
		if got != i {
			t.Fatalf("message %d came as number %d", got, i)
		}
		if i > n {
			if sz != behindMax+size {
				t.Errorf("the large message is %d bytes; want %d", sz, behindMax+size)
			}
			break
		}
		f, err := b.TakeFD(seq)
		if err != nil {
			t.Fatalf("message %d: TakeFD(%d): %v", i, seq, err)
		}
		data, _ := io.ReadAll(f)
		_ = f.Close()
		if want := fmt.Sprintf("fd of %d", i); string(data) != want {
			t.Errorf("message %d's descriptor reads %q; want %q", i, data, want)
		}
	}
	if err := <-big; err != nil {
		t.Errorf("the large write: %v", err)
	}
	// The peer may read the last bytes before the writer goroutine, back
	// from its sendmsg, says they went: Queued falls to 0 soon after.
	testenv.WaitFor(t, 10*time.Second, func() error {
		if q := a.Queued(); q != 0 {
			return fmt.Errorf("Queued = %d once the peer has read everything; want 0", q)
		}
		return nil
	})
}

// TestCloseWritesWhatIsBehind: what is behind when the connection closes
// (go-capnp's abort, the answers before it) still reaches a peer that
// reads; a peer that does not read is not waited for past closeGrace.
func TestCloseWritesWhatIsBehind(t *testing.T) {
	a, b := pair(t, true)
	const n = 64
	for i := uint64(1); i <= n; i++ {
		if _, err := a.Write(frame(16<<10, i, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if a.Queued() == 0 {
		t.Fatal("nothing behind: the test needs a peer that has not read yet")
	}
	done := make(chan int)
	go func() {
		got := 0
		for {
			if _, _, _, err := readFrame(b); err != nil {
				done <- got
				return
			}
			got++
		}
	}()
	_ = a.Close()
	if got := <-done; got != n {
		t.Errorf("the peer read %d messages of %d before the end", got, n)
	}

	c, d := pair(t, true) // d never reads
	for i := uint64(1); c.Queued() == 0; i++ {
		if _, err := c.Write(frame(16<<10, i, 0)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_ = c.Close()
	if took := time.Since(start); took > closeGrace+time.Second {
		t.Errorf("Close took %s with a peer that does not read; want about %s", took, closeGrace)
	}
	_ = d
}
