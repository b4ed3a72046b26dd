package bridge

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// ExecSpawner starts Argv with os/exec, each process in its own process
// group, with Env as its environment. It serves tests and tools that run a
// bridge outside a wall; toybox-entry has a spawner of its own.
type ExecSpawner struct {
	Argv []string
	Env  []string
	Dir  string
}

// Spawn starts one process.
func (e ExecSpawner) Spawn(stdin, stdout, stderr *os.File) (Child, error) {
	if len(e.Argv) == 0 {
		return nil, fmt.Errorf("no command")
	}
	cmd := exec.Command(e.Argv[0], e.Argv[1:]...)
	cmd.Env = e.Env
	cmd.Dir = e.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &execChild{cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		if err != nil {
			c.text = err.Error()
		} else {
			c.text = "exit status 0"
		}
		close(c.done)
	}()
	return c, nil
}

type execChild struct {
	cmd  *exec.Cmd
	done chan struct{}
	text string
}

func (c *execChild) Pid() int              { return c.cmd.Process.Pid }
func (c *execChild) Done() <-chan struct{} { return c.done }
func (c *execChild) ExitText() string      { return c.text }

func (c *execChild) Signal(sig syscall.Signal) error {
	return unix.Kill(-c.cmd.Process.Pid, sig)
}
