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
	const unit = MessageCost // the least a message counts for
	shared := flowcontrol.NewFixedLimiter(4 * unit)
	stalled := StreamLimiter(shared, unit)
	other := StreamLimiter(shared, 4*unit)
	ctx := context.Background()
	if _, err := stalled.StartMessage(ctx, unit); err != nil {
		t.Fatal(err)
	}
	// The stalled stream's next write waits on its own window...
	waitCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := stalled.StartMessage(waitCtx, unit); err == nil {
		t.Fatal("a stream past its own window was let through")
	}
	// ...and the other stream has the rest of shared: three units.
	var dones []func()
	for range 3 {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		done, err := other.StartMessage(ctx, unit)
		cancel()
		if err != nil {
			t.Fatalf("the other stream found no room: %v", err)
		}
		dones = append(dones, done)
	}
	// Shared is now full: even the other stream waits.
	waitCtx2, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := other.StartMessage(waitCtx2, unit); err == nil {
		t.Fatal("shared let more through than its size")
	}
	for _, d := range dones {
		d()
	}
	ctx3, cancel3 := context.WithTimeout(ctx, time.Second)
	defer cancel3()
	done, err := other.StartMessage(ctx3, 3*unit)
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

// TestStreamLimiterMessageCost: a message counts for at least MessageCost,
// whatever its size: an empty one costs a writer about as much memory in
// flight as a small one, and counted by its bytes a stream's window let
// thousands wait on a reader that never answered.
func TestStreamLimiterMessageCost(t *testing.T) {
	l := StreamLimiter(flowcontrol.NewFixedLimiter(1<<20), 4*MessageCost)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var dones []func()
	for i := range 4 {
		done, err := l.StartMessage(ctx, 1)
		if err != nil {
			t.Fatalf("message %d of 4 found no room: %v", i+1, err)
		}
		dones = append(dones, done)
	}
	wait, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := l.StartMessage(wait, 1); err == nil {
		t.Errorf("a fifth 1-byte message went into a window of 4 x MessageCost")
	}
	for _, d := range dones {
		d()
	}
}
