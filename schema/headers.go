package schema

import "fmt"

// Bounds on the headers of one request a peer sends (Handle.request and
// Handle.webSocket). The list's length is checked before anything loops
// over it: a list of empty structs costs its message one word however
// long it is, and a switchboard that looped over millions of them spent
// 2.3 s and 450 MiB on a call of 300 bytes.
const (
	MaxHeaders     = 100      // Apache httpd's default LimitRequestFields: a server refuses more
	MaxHeaderBytes = 64 << 10 // names and values; four times Node.js's default bound on a request's header
)

// HeaderField is one header, as plain strings.
type HeaderField struct{ Name, Value string }

// ReadHeaders returns the headers of l, or an error that says which bound
// they go past (MaxHeaders, MaxHeaderBytes) or which cannot be read. err
// is the error of reading l itself, so that ReadHeaders(args.Headers())
// reads a call's headers.
func ReadHeaders(l Header_List, err error) ([]HeaderField, error) {
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHeaders, err)
	}
	if n := l.Len(); n > MaxHeaders {
		return nil, fmt.Errorf("%w: %d headers; at most %d", ErrHeaders, n, MaxHeaders)
	}
	out := make([]HeaderField, l.Len())
	size := 0
	for i := range out {
		h := l.At(i)
		name, err := h.Name()
		if err != nil {
			return nil, fmt.Errorf("%w: reading header %d: %w", ErrHeaders, i, err)
		}
		value, err := h.Value()
		if err != nil {
			return nil, fmt.Errorf("%w: reading header %d: %w", ErrHeaders, i, err)
		}
		if size += len(name) + len(value); size > MaxHeaderBytes {
			return nil, fmt.Errorf("%w: more than %d bytes of headers", ErrHeaders, MaxHeaderBytes)
		}
		out[i] = HeaderField{name, value}
	}
	return out, nil
}

// SetHeaderList writes hs into the list made by newList, field by field.
func SetHeaderList(newList func(int32) (Header_List, error), hs []HeaderField) error {
	l, err := newList(int32(len(hs)))
	if err != nil {
		return err
	}
	for i, h := range hs {
		if err := l.At(i).SetName(h.Name); err != nil {
			return err
		}
		if err := l.At(i).SetValue(h.Value); err != nil {
			return err
		}
	}
	return nil
}
