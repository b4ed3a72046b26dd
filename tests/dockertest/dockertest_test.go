package dockertest

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// TestRun starts a container and speaks HTTP to busybox httpd through the
// published loopback port (docker-proxy over the test bridge).
func TestRun(t *testing.T) {
	c := Require(t)
	_, pub := Run(t, c, Spec{Name: "dockertest", Labels: map[string]string{"com.docker.compose.project": "selftest"}})
	if !pub.Addr().IsLoopback() || pub.Port() == 0 {
		t.Fatalf("published %v; want a loopback address and a port", pub)
	}
	var status string
	testenv.WaitFor(t, 10*time.Second, func() error {
		conn, err := net.DialTimeout("tcp", pub.String(), 2*time.Second)
		if err == nil {
			conn.SetDeadline(time.Now().Add(2 * time.Second))
			_, _ = conn.Write([]byte("GET /nothing-here HTTP/1.0\r\n\r\n"))
			status, _ = bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if strings.HasPrefix(status, "HTTP/1.") {
				return nil
			}
		}
		return fmt.Errorf("no HTTP answer through %v (last status line %q)", pub, status)
	})
}
