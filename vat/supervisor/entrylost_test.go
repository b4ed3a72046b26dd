package supervisor

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"
)

// stuckProc is a spawn that runs until Stop.
type stuckProc struct {
	cmd     *exec.Cmd
	stopped chan struct{}
}

func (p *stuckProc) Pid() int     { return p.cmd.Process.Pid }
func (p *stuckProc) Tier() string { return "walled" }
func (p *stuckProc) Wait() error  { return p.cmd.Wait() }
func (p *stuckProc) Stop(time.Duration) error {
	select {
	case <-p.stopped:
	default:
		close(p.stopped)
	}
	return p.cmd.Process.Kill()
}

// TestWatchEndsAWallWhoseEntryLostItsCapability: a wall whose toybox-entry
// lost its capability connection and did not end on its own (an entry of
// an older build, or one stuck) is ended by the supervisor once
// entryLostGrace has passed, and the end is put down to the loss; one that
// ends by itself within the grace is an exit like any other.
func TestWatchEndsAWallWhoseEntryLostItsCapability(t *testing.T) {
	s, _ := testSupervisorWith(t, func(c *Config) { c.StopGrace = time.Second })
	for _, tt := range []struct {
		name     string
		exitsOwn bool
		wantLost bool
	}{
		{"stuck wall", false, true},
		{"wall that ends with its app", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "60")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			p := &stuckProc{cmd: cmd, stopped: make(chan struct{})}
			ended := make(chan struct{})
			r := &running{proc: p, gone: make(chan struct{}), entryEnded: ended}
			go func() { r.exitErr = p.Wait(); close(r.gone) }()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			in := &instance{s: s, v: &vat{id: "lost"}, ctx: ctx}
			close(ended)
			if tt.exitsOwn {
				_ = cmd.Process.Kill()
			}
			began := time.Now()
			lost, stopped := in.watch(r)
			if lost != tt.wantLost || stopped {
				t.Errorf("watch = lost %v, stopped %v; want lost %v", lost, stopped, tt.wantLost)
			}
			select {
			case <-p.stopped:
				if !tt.wantLost {
					t.Error("the supervisor stopped a wall that ended on its own")
				}
				if d := time.Since(began); d < entryLostGrace {
					t.Errorf("stopped after %v; the grace is %v", d, entryLostGrace)
				}
			default:
				if tt.wantLost {
					t.Error("the wall was not stopped")
				}
			}
			var ee *exec.ExitError
			if !errors.As(r.exitErr, &ee) {
				t.Errorf("exit %v", r.exitErr)
			}
		})
	}
}
