package wire

import (
	"context"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3/flowcontrol"
)

// A stream whose reader stopped holds only its own window: another stream
// of the same connection still gets room, and a stream waiting on its own
// window takes none of shared while it waits.
func TestStreamLimiterStalledStreamLeavesRoom(t *testing.T) {
	shared := flowcontrol.NewFixedLimiter(4 << 10)
	stalled := StreamLimiter(shared, 1<<10)
	other := StreamLimiter(shared, 4<<10)
	ctx := context.Background()
	if _, err := stalled.StartMessage(ctx, 1<<10); err != nil {
		t.Fatal(err)
	}
	// The stalled stream's next write waits on its own window...
	waitCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := stalled.StartMessage(waitCtx, 1<<10); err == nil {
		t.Fatal("a stream past its own window was let through")
	}
	// ...and the other stream has the rest of shared: 3 KiB.
	var dones []func()
	for range 3 {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		done, err := other.StartMessage(ctx, 1<<10)
		cancel()
		if err != nil {
			t.Fatalf("the other stream found no room: %v", err)
		}
		dones = append(dones, done)
	}
	// Shared is now full: even the other stream waits.
	waitCtx2, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := other.StartMessage(waitCtx2, 1<<10); err == nil {
		t.Fatal("shared let more through than its size")
	}
	for _, d := range dones {
		d()
	}
	ctx3, cancel3 := context.WithTimeout(ctx, time.Second)
	defer cancel3()
	done, err := other.StartMessage(ctx3, 3<<10)
	if err != nil {
		t.Fatalf("room given back was not reusable: %v", err)
	}
	done()
}

// TestStreamLimiterLargeMessage: a message larger than the window goes
// alone, as one whole window, instead of panicking in the fixed limiter.
func TestStreamLimiterLargeMessage(t *testing.T) {
	shared := flowcontrol.NewFixedLimiter(2 << 10)
	l := StreamLimiter(shared, 1<<10)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	done, err := l.StartMessage(ctx, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	wait, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := l.StartMessage(wait, 1); err == nil {
		t.Error("a message went beside one that took the whole window")
	}
	done()
	done2, err := l.StartMessage(ctx, 1<<10)
	if err != nil {
		t.Fatalf("the window was not given back: %v", err)
	}
	done2()
}
