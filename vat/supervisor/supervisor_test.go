package supervisor

import (
	"os"
	"testing"

	"toybox/tests/testenv"
)

// TestMain fails the package on any capability a test leaves unreleased:
// the supervisor holds each vat's grant and doors.
func TestMain(m *testing.M) {
	os.Exit(testenv.RunCheckingLeaks(m))
}
