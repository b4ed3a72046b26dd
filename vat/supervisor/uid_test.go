package supervisor

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"toybox/tests/testenv"
)

// TestConcurrentInstallsGetTheirOwnUID: two new vats installed at the same
// moment never get the same host uid (the choice is reserved before the
// record says so).
func TestConcurrentInstallsGetTheirOwnUID(t *testing.T) {
	testenv.RequireRoot(t) // a uid per vat is root mode's
	s, st := noWallSupervisor(t, nil)
	code, err := st.Put(strings.NewReader("#!/bin/sh\nexit 0\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 200 {
		ids := []string{fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round)}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, _, _ = s.Install(InstallRequest{ID: id, Code: code})
			}()
		}
		close(start)
		wg.Wait()
	}
	owners := map[int][]string{}
	for _, st := range s.List() {
		owners[st.UID] = append(owners[st.UID], st.ID)
	}
	for uid, ids := range owners {
		if len(ids) > 1 {
			t.Errorf("uid %d is held by %v", uid, ids)
		}
	}
	if len(owners) != 400 {
		t.Errorf("%d distinct uids for 400 vats", len(owners))
	}
}
