// Package amplify builds Cap'n Proto messages that cost far more than their
// size.
//
// It builds Cap'n Proto messages that cost far more to copy or to walk than
// their size: the attacks of the amplification tests (a hostile vat sends
// them on fd 3, a hostile client to the switchboard).
package amplify

import (
	"bytes"
	"context"

	"capnproto.org/go/capnp/v3"
	rpccp "capnproto.org/go/capnp/v3/std/capnp/rpc"

	"toybox/schema"
)

// Depth is how deep DAG goes by default: 2^20 leaves of 24 bytes (24 MiB)
// when deep-copied, 536 bytes in an obsoleteSave message.
const Depth = 20

// DAG returns a struct in seg whose two pointers both point at a struct of
// the same shape, depth levels down: 24 bytes a level on the wire, 2^depth
// leaves once deep-copied.
func DAG(seg *capnp.Segment, depth int) (capnp.Struct, error) {
	node := func() (capnp.Struct, error) {
		return capnp.NewStruct(seg, capnp.ObjectSize{DataSize: 8, PointerCount: 2})
	}
	top, err := node()
	if err != nil {
		return top, err
	}
	for i := 0; i < depth; i++ {
		n, err := node()
		if err != nil {
			return n, err
		}
		for p := uint16(0); p < 2; p++ {
			if err := n.SetPtr(p, top.ToPtr()); err != nil {
				return n, err
			}
		}
		top = n
	}
	return top, nil
}

// EmptyStructs returns a list of n structs of no size: one word on the
// wire however long it is.
func EmptyStructs(seg *capnp.Segment, n int32) (capnp.List, error) {
	return capnp.NewCompositeList(seg, capnp.ObjectSize{}, n)
}

// Fat returns a struct of size sz (the schema's) with extra pointers
// beyond it, each to a DAG: what a deep copy of it copies, a reader of the
// schema's fields never sees.
func Fat(seg *capnp.Segment, sz capnp.ObjectSize, extra uint16) (capnp.Struct, error) {
	want := sz
	want.PointerCount += extra
	st, err := capnp.NewStruct(seg, want)
	if err != nil {
		return st, err
	}
	if extra == 0 {
		return st, nil
	}
	d, err := DAG(seg, Depth)
	if err != nil {
		return st, err
	}
	for p := sz.PointerCount; p < want.PointerCount; p++ {
		if err := st.SetPtr(p, d.ToPtr()); err != nil {
			return st, err
		}
	}
	return st, nil
}

// message builds one RPC message.
func message(build func(rpccp.Message) error) (*capnp.Message, error) {
	msg, seg := capnp.NewSingleSegmentMessage(nil)
	m, err := rpccp.NewRootMessage(seg)
	if err != nil {
		return nil, err
	}
	return msg, build(m)
}

// Bootstrap is the message asking for the peer's bootstrap capability as
// question 0.
func Bootstrap() (*capnp.Message, error) {
	return message(func(m rpccp.Message) error {
		_, err := m.NewBootstrap()
		return err
	})
}

// ObsoleteSave is an obsoleteSave message (a type no peer serves) whose
// object is a DAG: go-capnp v3.1.0-alpha.2 answered it with an
// unimplemented message holding its deep copy.
func ObsoleteSave() (*capnp.Message, error) {
	return message(func(m rpccp.Message) error {
		d, err := DAG(m.Segment(), Depth)
		if err != nil {
			return err
		}
		return m.SetObsoleteSave(d.ToPtr())
	})
}

// Frames returns msgs stream-framed, one after the other, as they go on
// the wire.
func Frames(msgs ...*capnp.Message) ([]byte, error) {
	var b bytes.Buffer
	enc := capnp.NewEncoder(&b)
	for _, m := range msgs {
		if err := enc.Encode(m); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// Headers makes a header list in the segment of the call it goes in.
type Headers func(*capnp.Segment) (schema.Header_List, error)

// EmptyHeaders are n headers of no size: a list of empty structs.
func EmptyHeaders(n int32) Headers {
	return func(seg *capnp.Segment) (schema.Header_List, error) {
		l, err := EmptyStructs(seg, n)
		return schema.Header_List(l), err
	}
}

// Request calls h.request(GET url) with the headers made by headers and
// returns how it ended.
func Request(ctx context.Context, h schema.Handle, url string, headers Headers) error {
	f, release := h.Request(ctx, func(p schema.Handle_request_Params) error {
		if err := p.SetMethod("GET"); err != nil {
			return err
		}
		if err := p.SetUrl(url); err != nil {
			return err
		}
		l, err := headers(p.Segment())
		if err != nil {
			return err
		}
		return p.SetHeaders(l)
	})
	defer release()
	_, err := f.Struct()
	return err
}

// WebSocket calls h.webSocket(url) with the headers made by headers and
// returns how it ended.
func WebSocket(ctx context.Context, h schema.Handle, url string, headers Headers) error {
	f, release := h.WebSocket(ctx, func(p schema.Handle_webSocket_Params) error {
		if err := p.SetUrl(url); err != nil {
			return err
		}
		l, err := headers(p.Segment())
		if err != nil {
			return err
		}
		return p.SetHeaders(l)
	})
	defer release()
	_, err := f.Struct()
	return err
}
