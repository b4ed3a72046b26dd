package schema

import (
	"errors"
	"strings"
	"testing"

	"capnproto.org/go/capnp/v3"
)

func TestReadHeaders(t *testing.T) {
	list := func(t *testing.T, hs ...HeaderField) Header_List {
		t.Helper()
		_, seg := capnp.NewMultiSegmentMessage(nil)
		var l Header_List
		err := SetHeaderList(func(n int32) (Header_List, error) {
			var err error
			l, err = NewHeader_List(seg, n)
			return l, err
		}, hs)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	many := func(n int, value string) []HeaderField {
		hs := make([]HeaderField, n)
		for i := range hs {
			hs[i] = HeaderField{"X-A", value}
		}
		return hs
	}
	tests := []struct {
		name    string
		headers []HeaderField
		readErr error
		want    string // "" reads them back; else in the error
	}{
		{"none", nil, nil, ""},
		{"two", []HeaderField{{"Accept", "*/*"}, {"X-Empty", ""}}, nil, ""},
		{"at MaxHeaders", many(MaxHeaders, "b"), nil, ""},
		{"past MaxHeaders", many(MaxHeaders+1, "b"), nil, "101 headers; at most 100"},
		{"at MaxHeaderBytes", many(2, strings.Repeat("v", MaxHeaderBytes/2-3)), nil, ""},
		{"past MaxHeaderBytes", many(2, strings.Repeat("v", MaxHeaderBytes/2-2)), nil, "more than 65536 bytes"},
		{"unreadable", nil, errors.New("read pointer: read traversal limit reached"), "traversal limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadHeaders(list(t, tt.headers...), tt.readErr)
			if tt.want != "" {
				if !errors.Is(err, ErrHeaders) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("ReadHeaders = %v; want ErrHeaders saying %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadHeaders = %v; want the headers", err)
			}
			if len(got) != len(tt.headers) {
				t.Fatalf("ReadHeaders = %d headers; want %d", len(got), len(tt.headers))
			}
			for i := range got {
				if got[i] != tt.headers[i] {
					t.Errorf("header %d = %+v; want %+v", i, got[i], tt.headers[i])
				}
			}
		})
	}
}
