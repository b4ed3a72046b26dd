package grant

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"capnproto.org/go/capnp/v3"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
	"toybox/tests/amplify"
)

// seen is what a recording upstream's calls received: the shape of each
// Target and header struct as it came, its fields, and which calls came.
type seen struct {
	mu      sync.Mutex
	shapes  []capnp.ObjectSize
	fields  []string
	methods []string
}

func (s *seen) add(method string, shapes []capnp.ObjectSize, fields ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.methods = append(s.methods, method)
	s.shapes = append(s.shapes, shapes...)
	s.fields = append(s.fields, fields...)
}

// recordingHandle is a switchboard stand-in: it records what it is sent
// and refuses every call (the relay's arguments are what is tested).
type recordingHandle struct{ s *seen }

var errRecorded = errors.New("egress refused: recorded")

func (h recordingHandle) Describe(context.Context, schema.Handle_describe) error { return nil }

func (h recordingHandle) Socket(context.Context, schema.Handle_socket) error { return errRecorded }

func (h recordingHandle) Revoke(context.Context, schema.Handle_revoke) error { return errRecorded }

func (h recordingHandle) Constrain(_ context.Context, call schema.Handle_constrain) error {
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	return res.SetHandle(schema.Handle_ServerToClient(h))
}

func (h recordingHandle) target(method string, t schema.Target, err error) error {
	if err != nil {
		return err
	}
	scheme, _ := t.Scheme()
	host, _ := t.Host()
	h.s.add(method, []capnp.ObjectSize{capnp.Struct(t).Size()}, scheme, host)
	return errRecorded
}

func (h recordingHandle) headers(method string, l schema.Header_List, err error) error {
	if err != nil {
		return err
	}
	var shapes []capnp.ObjectSize
	var fields []string
	for i := 0; i < l.Len(); i++ {
		shapes = append(shapes, capnp.Struct(l.At(i)).Size())
		name, _ := l.At(i).Name()
		value, _ := l.At(i).Value()
		fields = append(fields, name+": "+value)
	}
	h.s.add(method, shapes, fields...)
	return errRecorded
}

func (h recordingHandle) Check(_ context.Context, call schema.Handle_check) error {
	v, err := call.Args().Target()
	return h.target("check", v, err)
}

func (h recordingHandle) Connect(_ context.Context, call schema.Handle_connect) error {
	v, err := call.Args().Target()
	return h.target("connect", v, err)
}

func (h recordingHandle) Request(_ context.Context, call schema.Handle_request) error {
	v, err := call.Args().Headers()
	return h.headers("request", v, err)
}

func (h recordingHandle) WebSocket(_ context.Context, call schema.Handle_webSocket) error {
	v, err := call.Args().Headers()
	return h.headers("webSocket", v, err)
}

// recordingUpstream serves a recordingHandle on a socket of its own and
// returns its path.
func recordingUpstream(t *testing.T, s *seen) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "upstream.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			uc, err := l.AcceptUnix()
			if err != nil {
				return
			}
			rc := wire.NewConn(uc, false).RPC(capnp.Client(schema.Handle_ServerToClient(recordingHandle{s})), nil)
			t.Cleanup(func() { _ = rc.Close() })
		}
	}()
	return sock
}

// fatTarget sets p's target to a Target of the schema's fields with two
// pointers more, each to a text of 4 KiB.
func fatTarget(seg *capnp.Segment, set func(schema.Target) error) error {
	st, err := capnp.NewStruct(seg, capnp.ObjectSize{DataSize: 8, PointerCount: 4})
	if err != nil {
		return err
	}
	t := schema.Target(st)
	_ = t.SetScheme("tcp")
	_ = t.SetHost("127.0.0.1")
	t.SetPort(9)
	for p := uint16(2); p < 4; p++ {
		if err := st.SetText(p, strings.Repeat("x", 4<<10)); err != nil {
			return err
		}
	}
	return set(t)
}

// fatHeaders makes n headers whose structs carry two pointers more than
// the schema's, each to a text of 4 KiB.
func fatHeaders(n int32) amplify.Headers {
	return func(seg *capnp.Segment) (schema.Header_List, error) {
		l, err := capnp.NewCompositeList(seg, capnp.ObjectSize{PointerCount: 4}, n)
		if err != nil {
			return schema.Header_List{}, err
		}
		hl := schema.Header_List(l)
		for i := 0; i < hl.Len(); i++ {
			_ = hl.At(i).SetName("X-Fat")
			_ = hl.At(i).SetValue("1")
			for p := uint16(2); p < 4; p++ {
				if err := capnp.Struct(hl.At(i)).SetText(p, strings.Repeat("x", 4<<10)); err != nil {
					return hl, err
				}
			}
		}
		return hl, nil
	}
}

// TestRelayPassesOnFieldsAlone: the relay deep-copied a vat's Target and
// headers to the switchboard (SetTarget, SetHeaders), pointers beyond the
// schema's included: 1 KiB of them, aliased, cost the supervisor 0.66 s and
// 63 MiB. The switchboard now gets the schema's fields alone, written
// anew; headers past schema.MaxHeaders are refused before they reach it.
func TestRelayPassesOnFieldsAlone(t *testing.T) {
	s := &seen{}
	v, _ := newVat(t, recordingUpstream(t, s), "mallory", labels.Set{Host: "127.0.0.1", Port: 9})
	vc, _ := vatClient(t, v)
	h := egress(t, vc)
	ctx := context.Background()
	calls := []struct {
		name string
		call func() error
	}{
		{"check", func() error {
			f, release := h.Check(ctx, func(p schema.Handle_check_Params) error { return fatTarget(p.Segment(), p.SetTarget) })
			defer release()
			_, err := f.Struct()
			return err
		}},
		{"connect", func() error {
			f, release := h.Connect(ctx, func(p schema.Handle_connect_Params) error { return fatTarget(p.Segment(), p.SetTarget) })
			defer release()
			_, err := f.Struct()
			return err
		}},
		{"request", func() error { return amplify.Request(ctx, h, "http://127.0.0.1:9/", fatHeaders(2)) }},
		{"webSocket", func() error { return amplify.WebSocket(ctx, h, "ws://127.0.0.1:9/", fatHeaders(2)) }},
	}
	for _, c := range calls {
		if err := c.call(); err == nil || !strings.Contains(err.Error(), "recorded") {
			t.Errorf("%s: %v; want the recording upstream's refusal", c.name, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if got := strings.Join(s.methods, " "); got != "check connect request webSocket" {
		t.Fatalf("the upstream was called for %q; want check connect request webSocket", got)
	}
	want := []capnp.ObjectSize{{DataSize: 8, PointerCount: 2}, {DataSize: 8, PointerCount: 2}, {PointerCount: 2}, {PointerCount: 2}, {PointerCount: 2}, {PointerCount: 2}}
	if len(s.shapes) != len(want) {
		t.Fatalf("the upstream saw %d structs %v; want %d", len(s.shapes), s.shapes, len(want))
	}
	for i, sz := range s.shapes {
		if sz != want[i] {
			t.Errorf("struct %d came to the upstream as %+v; want the schema's %+v", i, sz, want[i])
		}
	}
	if got := strings.Join(s.fields, ", "); got != "tcp, 127.0.0.1, tcp, 127.0.0.1, X-Fat: 1, X-Fat: 1, X-Fat: 1, X-Fat: 1" {
		t.Errorf("the upstream saw the fields %q", got)
	}

	// One header past schema.MaxHeaders: refused here, with why.
	s.methods = nil
	s.mu.Unlock()
	err := amplify.Request(ctx, h, "http://127.0.0.1:9/", fatHeaders(schema.MaxHeaders+1))
	s.mu.Lock()
	if err == nil || !strings.Contains(err.Error(), "egress refused: bad headers") || !strings.Contains(err.Error(), "at most 100") {
		t.Errorf("request with %d headers: %v; want it refused for its headers", schema.MaxHeaders+1, err)
	}
	if len(s.methods) != 0 {
		t.Errorf("request with %d headers reached the upstream", schema.MaxHeaders+1)
	}
}
