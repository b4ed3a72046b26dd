package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/schema"
	"toybox/tests/amplify"
)

// Each route below uses fd 3, which a vat has once: one route per run.

// amplifyUnserved writes to fd 3, raw, a Bootstrap and eight obsoleteSave
// messages whose object is a DAG of 24 MiB in 536 bytes, reads nothing
// for a second, then reads until the supervisor ends the connection:
// "ended: ..." once it has, "kept: ..." if it has not within 5 s.
func amplifyUnserved(w http.ResponseWriter, _ *http.Request) {
	say := func(f string, a ...any) { fmt.Fprintf(w, f+"\n", a...) }
	msgs := make([]*capnp.Message, 0, 9)
	boot, err := amplify.Bootstrap()
	if err != nil {
		say("denied: %v", err)
		return
	}
	msgs = append(msgs, boot)
	for range 8 {
		m, err := amplify.ObsoleteSave()
		if err != nil {
			say("denied: %v", err)
			return
		}
		msgs = append(msgs, m)
	}
	b, err := amplify.Frames(msgs...)
	if err != nil {
		say("denied: %v", err)
		return
	}
	c, err := net.FileConn(os.NewFile(3, "vat-cap"))
	if err != nil {
		say("denied: fd 3: %v", err)
		return
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	n, werr := c.Write(b)
	say("wrote %d of %d bytes (%v)", n, len(b), werr)
	time.Sleep(time.Second)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64<<10)
	read := 0
	for {
		k, err := c.Read(buf)
		read += k
		if err != nil {
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				say("kept: %d bytes read, then nothing for 5 s", read)
			} else {
				say("ended: %d bytes read, then %v", read, err)
			}
			return
		}
	}
}

// amplifyRelay asks fd 3 for its egress Handle and sends through it, n
// times each (n from ?n=, default 10):
//   - request(url) with headers as a list of four million empty structs;
//   - connect(addr) with a Target carrying extra pointers, each to a DAG
//     of 24 MiB in 536 bytes, that no reader of the schema sees;
//   - request(url) with headers whose structs carry the same.
//
// Each outcome is one line: "<shape> <i>: ok" or "<shape> <i>: <error>".
//
//	GET /amplify/relay?url=http://HOST:PORT/&addr=HOST:PORT[&n=10]
func amplifyRelay(w http.ResponseWriter, r *http.Request) {
	say := func(f string, a ...any) { fmt.Fprintf(w, f+"\n", a...) }
	q := r.URL.Query()
	host, port, err := net.SplitHostPort(q.Get("addr"))
	if err != nil {
		say("denied: addr: %v", err)
		return
	}
	p, _ := strconv.Atoi(port)
	n := 10
	if s := q.Get("n"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	conn, h, done, err := egress(ctx)
	if err != nil {
		say("denied: %v", err)
		return
	}
	defer done()
	outcome := func(shape string, i int, err error) {
		if err == nil {
			say("%s %d: ok", shape, i)
			return
		}
		msg := err.Error()
		if len(msg) > 300 { // go-capnp names every pointer of a failed copy
			msg = msg[:150] + " ... " + msg[len(msg)-150:]
		}
		say("%s %d: %s", shape, i, msg)
	}
	for i := range n {
		outcome("empty headers", i, amplify.Request(ctx, h, q.Get("url"), amplify.EmptyHeaders(4<<20)))
	}
	for i := range n {
		f, release := h.Connect(ctx, func(ps schema.Handle_connect_Params) error {
			st, err := amplify.Fat(ps.Segment(), capnp.ObjectSize{DataSize: 8, PointerCount: 2}, 4)
			if err != nil {
				return err
			}
			t := schema.Target(st)
			_ = t.SetScheme("tcp")
			_ = t.SetHost(host)
			t.SetPort(uint16(p))
			ps.SetWantFd(true)
			return ps.SetTarget(t)
		})
		res, err := f.Struct()
		if err == nil {
			if sock, terr := conn.TakeFD(res.Fd()); terr == nil {
				_ = sock.Close()
			} else {
				err = terr
			}
		}
		release()
		outcome("fat target", i, err)
	}
	for i := range n {
		outcome("fat headers", i, amplify.Request(ctx, h, q.Get("url"), func(seg *capnp.Segment) (schema.Header_List, error) {
			l, err := capnp.NewCompositeList(seg, capnp.ObjectSize{PointerCount: 2 + 4}, 2)
			if err != nil {
				return schema.Header_List{}, err
			}
			d, err := amplify.DAG(seg, amplify.Depth)
			if err != nil {
				return schema.Header_List{}, err
			}
			hl := schema.Header_List(l)
			for j := 0; j < hl.Len(); j++ {
				_ = hl.At(j).SetName("X-Fat")
				_ = hl.At(j).SetValue("1")
				for k := uint16(2); k < 6; k++ {
					_ = capnp.Struct(hl.At(j)).SetPtr(k, d.ToPtr())
				}
			}
			return hl, nil
		}))
	}
}
