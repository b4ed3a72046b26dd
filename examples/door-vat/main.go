// Command door-vat is an example first-party vat that uses its door.
//
// It finds the Vat bootstrap on fd 3, asks it for its DoorSet, and serves
// HTTP on $TOYBOX_LISTEN (see docs/doors.md):
//
//	GET  /doors              the entries of its door set, one per line
//	ANY  /door/<path>        calls its door with the same method, "/<path>"
//	                         (as received, percent-encoding and all) and the
//	                         body; answers the backend's status and body, or
//	                         502 with the refusal ("door refused: ...")
//	GET  /reach?unix=PATH    tries the backend directly, around the door;
//	GET  /reach?tcp=ADDR     answers "reached" or "unreachable: <why>"
//
// Install it with a manifest naming its own door set:
// {"command": ["./door-vat"], "doors": ["<its id>"]}.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/schema"
	"toybox/schema/wire"
)

// maxBody bounds what the example forwards (the door has its own bound).
const maxBody = 1 << 20

type app struct {
	doors schema.DoorSet
}

func main() {
	listen := os.Getenv("TOYBOX_LISTEN")
	if listen == "" {
		log.Fatal("door-vat: TOYBOX_LISTEN must be set (run it as a vat)")
	}
	conn, err := wire.FromFile(os.NewFile(3, "toybox-vat"), false)
	if err != nil {
		log.Fatalf("door-vat: fd 3: %v", err)
	}
	rc := conn.RPC(capnp.Client{}, nil)
	defer rc.Close()
	ctx := context.Background()
	vat := schema.Vat(rc.Bootstrap(ctx))
	f, release := vat.Doors(ctx, nil)
	res, err := f.Struct()
	if err != nil {
		log.Fatalf("door-vat: asking for its doors: %v", err)
	}
	a := &app{doors: res.Doors().AddRef()} // kept for the life of the process
	release()
	vat.Release()
	defer a.doors.Release()

	// No ServeMux: it would clean "..", "//" and the like before the door
	// could refuse them, and this example shows the door refusing.
	mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch raw := r.URL.EscapedPath(); {
		case raw == "/doors":
			a.list(w, r)
		case strings.HasPrefix(raw, "/door/"):
			a.call(w, r)
		case raw == "/reach":
			reach(w, r)
		default:
			http.Error(w, "not found: try /doors, /door/<path> or /reach", http.StatusNotFound)
		}
	})
	_ = os.Remove(listen)
	l, err := net.Listen("unix", listen)
	if err != nil {
		log.Fatalf("door-vat: %v", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(l))
}

func (a *app) list(w http.ResponseWriter, r *http.Request) {
	f, release := a.doors.List(r.Context(), nil)
	defer release()
	res, err := f.Struct()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	l, err := res.Entries()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	for i := 0; i < l.Len(); i++ {
		name, _ := l.At(i).Name()
		fmt.Fprintln(w, name)
	}
}

func (a *app) call(w http.ResponseWriter, r *http.Request) {
	// The raw path as received: the door, not this app, decides what a
	// path may look like.
	path := strings.TrimPrefix(r.URL.EscapedPath(), "/door")
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		path += "?" + r.URL.RawQuery
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	af, releaseAll := a.doors.All(r.Context(), nil)
	defer releaseAll()
	door := af.Door() // pipelined: no round trip before the call
	f, release := door.Call(r.Context(), func(p schema.Door_call_Params) error {
		if err := p.SetMethod(r.Method); err != nil {
			return err
		}
		if err := p.SetPath(path); err != nil {
			return err
		}
		if ct := r.Header.Get("Content-Type"); ct != "" {
			hl, err := p.NewHeaders(1)
			if err != nil {
				return err
			}
			if err := hl.At(0).SetName("Content-Type"); err != nil {
				return err
			}
			if err := hl.At(0).SetValue(ct); err != nil {
				return err
			}
		}
		return p.SetBody(body)
	})
	defer release()
	res, err := f.Struct()
	if err != nil {
		msg := err.Error()
		for _, p := range []string{"door refused:", "door revoked:", "door failed:"} {
			if j := strings.Index(msg, p); j >= 0 {
				msg = msg[j:]
				break
			}
		}
		http.Error(w, msg, http.StatusBadGateway)
		return
	}
	hl, _ := res.Headers()
	for i := 0; i < hl.Len(); i++ {
		name, _ := hl.At(i).Name()
		value, _ := hl.At(i).Value()
		if strings.EqualFold(name, "Content-Type") {
			w.Header().Set(name, value)
		}
	}
	data, _ := res.Body()
	w.WriteHeader(int(res.Status()))
	_, _ = w.Write(data)
}

// reach tries to reach a backend directly, around the door. Inside a wall it
// must fail: the backend's socket is not in the wall and loopback there is
// the wall's own.
func reach(w http.ResponseWriter, r *http.Request) {
	network, addr := "unix", r.URL.Query().Get("unix")
	if addr == "" {
		network, addr = "tcp", r.URL.Query().Get("tcp")
	}
	if addr == "" {
		http.Error(w, "want ?unix=PATH or ?tcp=HOST:PORT", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		fmt.Fprintf(w, "unreachable: %v\n", err)
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "GET /kiosk/state HTTP/1.0\r\nHost: backend\r\n\r\n")
	line, _ := io.ReadAll(io.LimitReader(c, 64))
	fmt.Fprintf(w, "reached: %q\n", line)
}
