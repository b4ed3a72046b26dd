package bridge

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
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

// Spawn starts one process, with env set over Env.
func (e ExecSpawner) Spawn(stdin, stdout, stderr *os.File, env []string) (Child, error) {
	if len(e.Argv) == 0 {
		return nil, fmt.Errorf("no command")
	}
	cmd := exec.Command(e.Argv[0], e.Argv[1:]...)
	cmd.Env = MergeEnv(e.Env, env)
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

// MergeEnv returns base with each NAME=value of over set in it: a name
// over sets replaces base's.
func MergeEnv(base, over []string) []string {
	if len(over) == 0 {
		return base
	}
	set := make(map[string]bool, len(over))
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	out := make([]string, 0, len(base)+len(over))
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !set[k] {
			out = append(out, kv)
		}
	}
	return append(out, over...)
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
