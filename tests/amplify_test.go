//go:build linux

package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"toybox/bench"
)

// procCost runs f and reports what it cost each process of pids: the
// growth of its peak RSS and the CPU time it used.
func procCost(t *testing.T, pids []int, f func()) (peak []int64, cpu []time.Duration) {
	t.Helper()
	peak, cpu = make([]int64, len(pids)), make([]time.Duration, len(pids))
	for i, pid := range pids {
		m, err := bench.ProcMem(pid)
		if err != nil {
			t.Fatal(err)
		}
		c, err := bench.ProcCPU(pid)
		if err != nil {
			t.Fatal(err)
		}
		peak[i], cpu[i] = -m.HWM, -c
	}
	f()
	for i, pid := range pids {
		m, _ := bench.ProcMem(pid)
		c, _ := bench.ProcCPU(pid)
		peak[i] += m.HWM
		cpu[i] += c
	}
	return peak, cpu
}

// TestAttackCapnpAmplification: a walled vat sends the supervisor, on its
// fd 3, what costs far more to copy or walk than its size, and reads
// nothing back:
//   - eight obsoleteSave messages of 536 bytes whose object is a DAG
//     (go-capnp answered each with its 24 MiB deep copy: 8 of them grew
//     the supervisor by over 200 MiB);
//   - request() with headers as four million empty structs, which the
//     switchboard looped over (2.3 s and 450 MiB a call);
//   - connect() and request() whose Target and headers carry extra
//     pointers to DAGs, which the supervisor's relay deep-copied on to the
//     switchboard (0.66 s and 63 MiB for 1 KiB).
//
// The first ends the vat's connection, with a warning that says why; the
// headers are refused before anything loops over them; the fat arguments
// are passed on as their schema's fields alone. Neither the supervisor nor
// the switchboard grows by more than 32 MiB or spends more than a second,
// and another vat is served throughout.
func TestAttackCapnpAmplification(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local"})
	web := webServer(t)
	echo := echoServer(t, "echo: ")
	s.mustInstall("alice", example(t, "counter-v1"), "")
	s.mustInstall("eve", example(t, "snoop"), "")
	grant := fmt.Sprintf(`[{"host":"127.0.0.1","port":%s},{"host":"127.0.0.1","port":%s}]`, web, echo)
	s.mustInstall("mallory", example(t, "snoop"), q("egress", grant))
	s.mustGet("/alice", "v1 count 1")
	pids := []int{s.tb.Process.Pid, s.sb.Process.Pid}
	names := []string{"supervisor", "switchboard"}
	bounded := func(what string, peak []int64, cpu []time.Duration) {
		t.Helper()
		for i := range pids {
			t.Logf("%s: the %s's peak RSS grew by %d KiB; it used %s of CPU", what, names[i], peak[i]>>10, cpu[i])
			if peak[i] > 32<<20 {
				t.Errorf("%s: the %s's peak RSS grew by %d MiB; want under 32 MiB", what, names[i], peak[i]>>20)
			}
			if cpu[i] > time.Second {
				t.Errorf("%s: the %s used %s of CPU; want under a second", what, names[i], cpu[i])
			}
		}
	}

	var body string
	peak, cpu := procCost(t, pids, func() { _, body = s.get("/eve/amplify/unserved") })
	t.Logf("eve:\n%s", body)
	bounded("unserved messages", peak, cpu)
	if !strings.Contains(body, "ended:") {
		t.Errorf("the supervisor kept eve's connection:\n%s", body)
	}
	waitFor(t, "the supervisor's warning", 5*time.Second, func() bool {
		return strings.Contains(s.tbLog.String(), "does not serve")
	})
	s.mustGet("/alice", "v1 count 2")

	peak, cpu = procCost(t, pids, func() {
		_, body = s.get("/mallory/amplify/relay?" + q("url", "http://127.0.0.1:"+web+"/", "addr", "127.0.0.1:"+echo))
	})
	t.Logf("mallory:\n%s", body)
	bounded("relayed arguments", peak, cpu)
	for _, line := range strings.Split(body, "\n") {
		shape, outcome, _ := strings.Cut(line, ": ")
		switch {
		case strings.HasPrefix(shape, "empty headers"):
			if !strings.Contains(outcome, "bad headers") {
				t.Errorf("%s: %s; want the headers refused", shape, outcome)
			}
		case strings.HasPrefix(shape, "fat target"):
			if outcome != "ok" {
				t.Errorf("%s: %s; want the target's fields passed on, and the connect made", shape, outcome)
			}
		case strings.HasPrefix(shape, "fat headers"):
			// Passed on as names and values: the switchboard then wants a
			// responder, which the attack does not give.
			if !strings.Contains(outcome, "request needs a responder") {
				t.Errorf("%s: %s; want the headers' fields passed on, and the request refused for its missing responder", shape, outcome)
			}
		}
	}
	if !strings.Contains(body, "fat headers 9") {
		t.Errorf("the attack did not run to its end:\n%s", body)
	}
	s.mustGet("/alice", "v1 count 3")
}
