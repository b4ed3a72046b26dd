package dockertest

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
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
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", pub.String(), 2*time.Second)
		if err == nil {
			conn.SetDeadline(time.Now().Add(2 * time.Second))
			_, _ = conn.Write([]byte("GET /nothing-here HTTP/1.0\r\n\r\n"))
			status, _ = bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if strings.HasPrefix(status, "HTTP/1.") {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.HasPrefix(status, "HTTP/1.") {
		t.Fatalf("no HTTP answer through %v (last status line %q)", pub, status)
	}
}
