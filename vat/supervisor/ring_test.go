package supervisor

import (
	"bytes"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// TestRingKeepsTheTail checks the ring against the obvious model (append
// everything, keep the last size bytes) over random write sizes, including
// writes larger than the ring and writes that end exactly at its end.
func TestRingKeepsTheTail(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 7, 64, 1000} {
		r := newRing(size)
		var all []byte
		if got := r.Bytes(); len(got) != 0 {
			t.Fatalf("size %d: empty ring gave %q", size, got)
		}
		for i := range 2000 {
			n := rng.IntN(2*size + 2)
			if i%97 == 0 {
				n = size - len(all)%size // end exactly at the ring's end
			}
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(rng.Uint32())
			}
			if w, err := r.Write(p); w != n || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			all = append(all, p...)
			want := all[max(0, len(all)-size):]
			if got := r.Bytes(); !bytes.Equal(got, want) {
				t.Fatalf("size %d, after %d bytes: kept %d bytes, not the last %d", size, len(all), len(got), len(want))
			}
		}
	}
}

// BenchmarkRingWrite: an app flooding its output, in the 32 KiB pieces
// os/exec reads its pipe in, into the default 64 KiB ring.
func BenchmarkRingWrite(b *testing.B) {
	r := newRing(64 << 10)
	p := make([]byte, 32<<10)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		_, _ = r.Write(p)
	}
}

// TestPaceHoldsTheRate drives the output pace on a fake clock: a burst
// passes at once, then reads wait as long as the rate says, and an idle
// spell refills no more than the burst.
func TestPaceHoldsTheRate(t *testing.T) {
	clock := time.Unix(1000, 0)
	var slept time.Duration
	p := newPace(1<<20, 2<<20)
	p.now = func() time.Time { return clock }
	p.sleep = func(d time.Duration) { slept += d; clock = clock.Add(d) }
	step := func(n int, want time.Duration) {
		t.Helper()
		slept = 0
		p.take(n)
		if d := slept - want; d < -time.Millisecond || d > time.Millisecond {
			t.Fatalf("take(%d) slept %v; want %v", n, slept, want)
		}
	}
	step(2<<20, 0)           // the burst
	step(1<<20, time.Second) // then the rate
	step(512<<10, time.Second/2)
	clock = clock.Add(time.Hour) // idle: the bucket refills to the burst, no more
	step(2<<20, 0)
	step(1<<20, time.Second)
	// Reads spread over time at the rate never wait.
	for range 10 {
		clock = clock.Add(100 * time.Millisecond)
		step(100<<10, 0)
	}
}

// TestFloodingAppIsPaced: an app writing flat out to its output pipe gets
// no further than the burst and the rate let the supervisor read (plus
// what the pipe and one read hold), and what it wrote last is kept.
func TestFloodingAppIsPaced(t *testing.T) {
	rg := newRing(64 << 10)
	pw, err := pipeToRing(rg)
	if err != nil {
		t.Fatal(err)
	}
	var written atomic.Int64
	start := time.Now()
	go func() {
		chunk := bytes.Repeat([]byte("flood "), 10<<10)
		for {
			n, err := pw.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	time.Sleep(time.Second)
	got := written.Load()
	elapsed := time.Since(start)
	_ = pw.Close()
	limit := int64(outputBurst) + int64(elapsed.Seconds()*outputRate) + 1<<20 // the pipe (64 KiB here, up to 1 MiB) and a read
	if got > limit {
		t.Errorf("the app wrote %d bytes in %v; the pace allows at most %d", got, elapsed, limit)
	}
	if got < outputBurst {
		t.Errorf("the app wrote only %d bytes in %v: the burst (%d) should pass at once", got, elapsed, outputBurst)
	}
	if tail := rg.Bytes(); len(tail) != 64<<10 || !bytes.Contains(tail, []byte("flood flood")) {
		t.Errorf("kept %d bytes ending %q; want the last 64 KiB of the flood", len(tail), tail[max(0, len(tail)-12):])
	}
}
