// Command capnp-probe is a vat that uses its capability on fd 3 directly.
//
// It needs no proxy: it asks the Vat bootstrap for its egress Handle, may narrow
// it with constrain (as an app would before handing a part of itself a
// smaller grant), and connects with wantFd, receiving a connected socket
// over fd 3 (SCM_RIGHTS; a unix socket the supervisor relays to the
// switchboard's TCP connection):
//
//	GET /describe                         the labels of its Handle
//	GET /connect?addr=host:port&send=s[&constrain={"host":..,"port":..}]
//	                                      "got: <reply>" or "got: egress refused: ..."
//	GET /hold?addr=host:port&n=N          connect N times and keep every socket:
//	                                      "got: held H, refused R[: <first refusal>]"
//	GET /release                          close every socket /hold keeps
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/schema"
	"toybox/schema/wire"
)

type probe struct {
	conn *wire.Conn
	vat  schema.Vat

	mu   sync.Mutex
	held []net.Conn // kept by /hold
}

func main() {
	listen := os.Getenv("TOYBOX_LISTEN")
	if listen == "" {
		log.Fatal("capnp-probe: TOYBOX_LISTEN must be set (run it as a vat)")
	}
	fd := 3
	if s := os.Getenv("TOYBOX_CAP_FD"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			fd = n
		}
	}
	conn, err := wire.FromFile(os.NewFile(uintptr(fd), "vat-cap"), true)
	if err != nil {
		log.Fatalf("capnp-probe: fd %d: %v", fd, err)
	}
	rc := conn.RPC(capnp.Client{}, nil)
	defer rc.Close()
	p := &probe{conn: conn, vat: schema.Vat(rc.Bootstrap(context.Background()))}
	defer p.vat.Release()
	http.HandleFunc("/describe", p.describe)
	http.HandleFunc("/connect", p.connect)
	http.HandleFunc("/hold", p.hold)
	http.HandleFunc("/release", p.release)
	_ = os.Remove(listen)
	l, err := net.Listen("unix", listen)
	if err != nil {
		log.Fatalf("capnp-probe: %v", err)
	}
	log.Fatal(http.Serve(l, nil))
}

func say(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "got: %s\n", s)
}

func sayErr(w http.ResponseWriter, err error) {
	msg := err.Error()
	if i := strings.Index(msg, "egress refused:"); i >= 0 {
		msg = msg[i:]
	}
	say(w, msg)
}

// handle returns the vat's Handle, narrowed by constrain (JSON labels) when
// given. The caller must release it.
func (p *probe) handle(ctx context.Context, constrain string) (schema.Handle, error) {
	f, release := p.vat.Egress(ctx, nil)
	defer release()
	res, err := f.Struct()
	if err != nil {
		return schema.Handle{}, err
	}
	if !res.HasHandle() {
		return schema.Handle{}, errors.New("egress refused: this vat has no egress grant")
	}
	h := res.Handle().AddRef()
	if constrain == "" {
		return h, nil
	}
	defer h.Release()
	var want struct {
		Scheme, Host, Network string
		Port                  uint16
	}
	dec := json.NewDecoder(strings.NewReader(constrain))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&want); err != nil {
		return schema.Handle{}, fmt.Errorf("constrain: %w", err)
	}
	cf, crel := h.Constrain(ctx, func(ps schema.Handle_constrain_Params) error {
		l, err := ps.NewLabels()
		if err != nil {
			return err
		}
		if err := l.SetScheme(want.Scheme); err != nil {
			return err
		}
		if err := l.SetHost(want.Host); err != nil {
			return err
		}
		l.SetPort(want.Port)
		return l.SetNetwork(want.Network)
	})
	defer crel()
	cres, err := cf.Struct()
	if err != nil {
		return schema.Handle{}, err
	}
	return cres.Handle().AddRef(), nil
}

func (p *probe) describe(w http.ResponseWriter, r *http.Request) {
	h, err := p.handle(r.Context(), r.URL.Query().Get("constrain"))
	if err != nil {
		sayErr(w, err)
		return
	}
	defer h.Release()
	f, rel := h.Describe(r.Context(), nil)
	defer rel()
	res, err := f.Struct()
	if err != nil {
		sayErr(w, err)
		return
	}
	l, err := res.Labels()
	if err != nil {
		sayErr(w, err)
		return
	}
	scheme, _ := l.Scheme()
	host, _ := l.Host()
	network, _ := l.Network()
	vat, _ := l.Vat()
	say(w, fmt.Sprintf("scheme=%s host=%s port=%d network=%s vat=%s", scheme, host, l.Port(), network, vat))
}

// target reads ?addr=host:port.
func target(q url.Values) (string, uint16, error) {
	host, port, err := net.SplitHostPort(q.Get("addr"))
	if err != nil {
		return "", 0, errors.New("want ?addr=host:port")
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, errors.New("bad port")
	}
	return host, uint16(pn), nil
}

// dial asks h for a tcp connection to host:port and returns the socket it
// hands over.
func (p *probe) dial(ctx context.Context, h schema.Handle, host string, port uint16) (net.Conn, error) {
	f, rel := h.Connect(ctx, func(ps schema.Handle_connect_Params) error {
		t, err := ps.NewTarget()
		if err != nil {
			return err
		}
		if err := t.SetScheme("tcp"); err != nil {
			return err
		}
		if err := t.SetHost(host); err != nil {
			return err
		}
		t.SetPort(port)
		ps.SetWantFd(true)
		return nil
	})
	defer rel()
	res, err := f.Struct()
	if err != nil {
		return nil, err
	}
	if res.Fd() == 0 {
		return nil, errors.New("the Handle sent no socket (fd 0)")
	}
	sock, err := p.conn.TakeFD(res.Fd())
	if err != nil {
		return nil, err
	}
	c, err := net.FileConn(sock)
	_ = sock.Close()
	return c, err
}

func (p *probe) connect(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	host, port, err := target(q)
	if err != nil {
		say(w, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	h, err := p.handle(ctx, q.Get("constrain"))
	if err != nil {
		sayErr(w, err)
		return
	}
	defer h.Release()
	c, err := p.dial(ctx, h, host, port)
	if err != nil {
		sayErr(w, err)
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, q.Get("send")+"\n"); err != nil {
		sayErr(w, err)
		return
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		sayErr(w, err)
		return
	}
	say(w, strings.TrimRight(line, "\n"))
}

// hold connects n times and keeps every socket it gets, as an app that
// holds many connections open does.
func (p *probe) hold(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	host, port, err := target(q)
	if err != nil {
		say(w, err.Error())
		return
	}
	n, err := strconv.Atoi(q.Get("n"))
	if err != nil || n < 1 {
		say(w, "want ?n=<count>")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
	defer cancel()
	h, err := p.handle(ctx, "")
	if err != nil {
		sayErr(w, err)
		return
	}
	defer h.Release()
	held, refused := 0, 0
	var first error
	for range n {
		c, err := p.dial(ctx, h, host, port)
		if err != nil {
			refused++
			if first == nil {
				first = err
			}
			continue
		}
		held++
		p.mu.Lock()
		p.held = append(p.held, c)
		p.mu.Unlock()
	}
	msg := fmt.Sprintf("held %d, refused %d", held, refused)
	if first != nil {
		msg += ": " + first.Error()
	}
	say(w, msg)
}

// release closes every socket hold keeps.
func (p *probe) release(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	held := p.held
	p.held = nil
	p.mu.Unlock()
	for _, c := range held {
		_ = c.Close()
	}
	say(w, fmt.Sprintf("released %d", len(held)))
}
