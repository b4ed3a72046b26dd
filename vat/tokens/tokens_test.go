package tokens

import (
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	now := time.Unix(1000, 0)
	b := Bucket{Rate: 10, Burst: 5}
	for i := range 5 {
		if !b.TryTake(now, 1) {
			t.Fatalf("take %d of the burst refused", i+1)
		}
	}
	if b.TryTake(now, 1) {
		t.Fatal("a take past the burst, at the same instant, admitted")
	}
	now = now.Add(100 * time.Millisecond) // one token at 10/s
	if !b.TryTake(now, 1) || b.TryTake(now, 1) {
		t.Fatal("after a token's time: want exactly one take")
	}
	if d := b.Take(now, 2); d != 200*time.Millisecond {
		t.Fatalf("Take(2) on an empty bucket: debt %v; want 200ms", d)
	}
	now = now.Add(time.Hour) // refills to the burst, no more
	if d := b.Take(now, 5); d != 0 {
		t.Fatalf("Take of the burst after an hour: debt %v; want none", d)
	}
	if b.TryTake(now, 1) {
		t.Fatal("more than the burst after an idle hour")
	}
}

func TestRecords(t *testing.T) {
	now := time.Unix(1000, 0)
	r := NewRecords(10, 2)
	for i := range 2 {
		if ok, n := r.Admit(now); !ok || n != 0 {
			t.Fatalf("record %d of the burst: %v, %d unlogged before", i+1, ok, n)
		}
	}
	for range 3 {
		if ok, _ := r.Admit(now); ok {
			t.Fatal("a record past the burst, at the same instant, admitted")
		}
	}
	now = now.Add(100 * time.Millisecond)
	if ok, n := r.Admit(now); !ok || n != 3 {
		t.Fatalf("after a token's time: %v, %d unlogged before; want true, 3", ok, n)
	}
	_, _ = r.Admit(now) // counted
	if n := r.Drain(); n != 1 {
		t.Fatalf("Drain = %d; want 1", n)
	}
	if n := r.Drain(); n != 0 {
		t.Fatalf("Drain again = %d; want 0", n)
	}
}
