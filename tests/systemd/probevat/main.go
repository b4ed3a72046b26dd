// Command probevat is the vat the systemd tests install.
//
// It is a static program that serves HTTP on $TOYBOX_LISTEN and, for GET
// /?connect=HOST:PORT, asks the wall's HTTP CONNECT proxy ($HTTP_PROXY) for
// a TCP stream there, sends "ping\n" and answers with the first line that
// comes back. It knows nothing of Cap'n Proto: its only way out is the proxy
// toybox-entry runs inside the wall, which reaches only what the vat's grant
// admits.
//
// GET /?read=PATH answers "read: FIRST LINE" or "unreadable: ERROR": what
// the wall shows of a file (its /etc, its /dev).
//
// Answers: "probevat: hello" for any other request; "got: LINE" when the
// stream worked; "refused: STATUS: BODY" (502) when the proxy said no.
//
// "probevat --echo ADDR" is the other end the tests reach: a TCP server on
// ADDR answering each connection's first line with "pong LINE".
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "--echo" {
		// echo serves until it fails.
		fmt.Fprintln(os.Stderr, "probevat --echo:", echo(os.Args[2]))
		os.Exit(1)
	}
	listen := os.Getenv("TOYBOX_LISTEN")
	if listen == "" {
		fmt.Fprintln(os.Stderr, "probevat: TOYBOX_LISTEN is not set")
		os.Exit(2)
	}
	l, err := net.Listen("unix", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probevat:", err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: http.HandlerFunc(serve), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintln(os.Stderr, "probevat: serving on", listen)
	if err := srv.Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, "probevat:", err)
		os.Exit(1)
	}
}

func serve(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Query().Get("read"); p != "" {
		// What the wall shows of a file: its first line, or why not.
		b, err := os.ReadFile(p)
		if err != nil {
			fmt.Fprintf(w, "unreadable: %v\n", err)
			return
		}
		first, _, _ := strings.Cut(string(b), "\n")
		// ?line=PREFIX: the first line that starts with it instead.
		if prefix := r.URL.Query().Get("line"); prefix != "" {
			first = ""
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, prefix) {
					first = l
					break
				}
			}
		}
		fmt.Fprintf(w, "read: %s\n", first)
		return
	}
	target := r.URL.Query().Get("connect")
	if target == "" {
		fmt.Fprintln(w, "probevat: hello")
		return
	}
	line, refusal, err := connect(target)
	switch {
	case err != nil:
		http.Error(w, "error: "+err.Error(), http.StatusInternalServerError)
	case refusal != "":
		http.Error(w, "refused: "+refusal, http.StatusBadGateway)
	default:
		fmt.Fprintf(w, "got: %s\n", line)
	}
}

// connect opens a CONNECT tunnel to target through $HTTP_PROXY. It returns
// the echoed line, or the proxy's refusal (status and body), or an error.
func connect(target string) (line, refusal string, err error) {
	proxy := os.Getenv("HTTP_PROXY")
	if proxy == "" {
		return "", "", errors.New("HTTP_PROXY is not set: this vat has no way out")
	}
	pu, err := url.Parse(proxy)
	if err != nil {
		return "", "", fmt.Errorf("parsing HTTP_PROXY: %w", err)
	}
	c, err := net.DialTimeout("tcp", pu.Host, 10*time.Second)
	if err != nil {
		return "", "", fmt.Errorf("dialling the proxy: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return "", "", fmt.Errorf("reading the proxy's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return "", fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body))), nil
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return "", "", fmt.Errorf("writing through the tunnel: %w", err)
	}
	got, err := br.ReadString('\n')
	if err != nil {
		return "", "", fmt.Errorf("reading through the tunnel: %w", err)
	}
	return strings.TrimSpace(got), "", nil
}

// echo serves addr: each connection's first line comes back as "pong LINE".
func echo(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "probevat: echo on", l.Addr())
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			fmt.Fprintf(c, "pong %s\n", strings.TrimSpace(line))
		}()
	}
}
