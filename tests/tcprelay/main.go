// Command tcprelay is a test fixture: it runs a server that listens only on
// TCP inside a vat's wall (as the Go SDK's conformance everything-server
// does) and serves it on $TOYBOX_LISTEN, relaying each connection to
// 127.0.0.1:PORT. It listens once the server accepts, so the vat is ready
// when its server is, and it exits with the server.
//
//	tcprelay PORT COMMAND [ARG...]
package main

import (
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		log.Fatal("usage: tcprelay PORT COMMAND [ARG...]")
	}
	target := net.JoinHostPort("127.0.0.1", os.Args[1])
	cmd := exec.Command(os.Args[2], os.Args[3:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sig
		_ = cmd.Process.Signal(s)
	}()
	for {
		c, err := net.Dial("tcp", target)
		if err == nil {
			_ = c.Close()
			break
		}
		select {
		case err := <-exited:
			log.Fatalf("the server exited before listening on %s: %v", target, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	l, err := net.Listen("unix", os.Getenv("TOYBOX_LISTEN"))
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go relay(c, target)
		}
	}()
	err = <-exited
	log.Printf("the server exited: %v", err)
	os.Exit(1)
}

func relay(c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		log.Print(err)
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); _ = up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); _ = c.(*net.UnixConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}
