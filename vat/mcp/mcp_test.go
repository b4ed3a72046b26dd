package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
)

var parseTests = []struct {
	name   string
	in     string
	kind   Kind
	method string
	id     string
	err    error
}{
	{"request", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`, KindRequest, "tools/call", "1", nil},
	{"string id", `{"jsonrpc":"2.0","id":"a-1","method":"ping"}`, KindRequest, "ping", `"a-1"`, nil},
	{"notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, KindNotification, "notifications/initialized", "", nil},
	{"result", `{"jsonrpc":"2.0","id":7,"result":{}}`, KindResponse, "", "7", nil},
	{"error", `{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no"}}`, KindResponse, "", "7", nil},
	{"spaces", " { \"jsonrpc\" : \"2.0\" , \"id\" : 3 , \"result\" : [ ] } ", KindResponse, "", "3", nil},
	{"escaped key", `{"jsonrpc":"2.0","\u0069d":3,"result":1}`, KindResponse, "", "3", nil},
	{"banner", `Starting server...`, 0, "", "", ErrNotJSON},
	{"dotenv", `[dotenv@17.2.0] injecting env (0) from .env`, 0, "", "", ErrNotJSON},
	{"array", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, 0, "", "", ErrNotJSONRPC},
	{"no version", `{"id":1,"method":"ping"}`, 0, "", "", ErrNotJSONRPC},
	{"old version", `{"jsonrpc":"1.0","id":1,"method":"ping"}`, 0, "", "", ErrNotJSONRPC},
	{"id twice", `{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`, 0, "", "", ErrNotJSONRPC},
	{"id twice escaped", `{"jsonrpc":"2.0","id":1,"\u0069d":2,"method":"ping"}`, 0, "", "", ErrNotJSONRPC},
	{"id case", `{"jsonrpc":"2.0","id":1,"ID":2,"method":"ping"}`, 0, "", "", ErrNotJSONRPC},
	{"method case", `{"jsonrpc":"2.0","id":1,"Method":"ping"}`, 0, "", "", ErrNotJSONRPC},
	{"float id", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, 0, "", "", ErrNotJSONRPC},
	{"null id", `{"jsonrpc":"2.0","id":null,"result":{}}`, 0, "", "", ErrNotJSONRPC},
	{"object id", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, 0, "", "", ErrNotJSONRPC},
	{"result and error", `{"jsonrpc":"2.0","id":1,"result":{},"error":{}}`, 0, "", "", ErrNotJSONRPC},
	{"method and result", `{"jsonrpc":"2.0","id":1,"method":"x","result":{}}`, 0, "", "", ErrNotJSONRPC},
	{"empty method", `{"jsonrpc":"2.0","id":1,"method":""}`, 0, "", "", ErrNotJSONRPC},
	{"params scalar", `{"jsonrpc":"2.0","id":1,"method":"x","params":3}`, 0, "", "", ErrNotJSONRPC},
	{"trailing", `{"jsonrpc":"2.0","id":1,"result":{}} x`, 0, "", "", ErrNotJSON},
}

func TestParse(t *testing.T) {
	for _, tt := range parseTests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(tt.in))
			if !errors.Is(err, tt.err) {
				t.Fatalf("Parse(%s) = %v; want %v", tt.in, err, tt.err)
			}
			if err != nil {
				return
			}
			if m.Kind != tt.kind || m.Method != tt.method || string(m.ID) != tt.id {
				t.Errorf("Parse(%s) = %v %q %s; want %v %q %s", tt.in, m.Kind, m.Method, m.ID, tt.kind, tt.method, tt.id)
			}
		})
	}
}

// TestBytesSurvive: a rewritten message keeps every other byte, a raw
// zero-width joiner and U+2028 inside a string included (ToolHive's
// sanitiser drops them).
func TestBytesSurvive(t *testing.T) {
	in := "{\"jsonrpc\":\"2.0\",\"id\":\"c-1\",\"result\":{\"text\":\"\U0001F469\u200D\U0001F4BB \u2028 <&>\"}}"
	m, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	got := string(m.WithID([]byte("42")))
	want := strings.Replace(in, `"c-1"`, "42", 1)
	if got != want {
		t.Errorf("WithID = %q; want %q", got, want)
	}
}

func TestGetSet(t *testing.T) {
	in := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"n","_meta":{"progressToken":"p","x":{"progressToken":9}}}}`)
	m, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.Get("params", "_meta", "progressToken"); !ok || string(v) != `"p"` {
		t.Errorf("Get = %s %v; want \"p\"", v, ok)
	}
	if s, ok := m.GetString("params", "name"); !ok || s != "n" {
		t.Errorf("GetString = %q %v; want n", s, ok)
	}
	out, ok := Set(in, []string{"params", "_meta", "progressToken"}, []byte(`"tb-1"`))
	want := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"n","_meta":{"progressToken":"tb-1","x":{"progressToken":9}}}}`
	if !ok || string(out) != want {
		t.Errorf("Set = %s %v; want %s", out, ok, want)
	}
	if _, ok := Set(in, []string{"params", "nothing"}, []byte("1")); ok {
		t.Error("Set on a missing key reported a change")
	}
}

func TestInsert(t *testing.T) {
	tests := []struct {
		in   string
		path []string
		want string
		ok   bool
	}{
		{`{"id":1,"result":{"a":1}}`, []string{"result"}, `{"id":1,"result":{"k":true,"a":1}}`, true},
		{`{"id":1,"result":{ }}`, []string{"result"}, `{"id":1,"result":{"k":true }}`, true},
		{`{"id":1,"result":{"k":1}}`, []string{"result"}, `{"id":1,"result":{"k":1}}`, false},
		{`{"id":1,"result":[]}`, []string{"result"}, `{"id":1,"result":[]}`, false},
		{`{"id":1}`, nil, `{"k":true,"id":1}`, true},
	}
	for _, tt := range tests {
		got, ok := Insert([]byte(tt.in), tt.path, "k", []byte("true"))
		if string(got) != tt.want || ok != tt.ok {
			t.Errorf("Insert(%s) = %s %v; want %s %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestLineReader(t *testing.T) {
	big := strings.Repeat("x", 200)
	in := "one\r\n\n" + big + "\ntwo\n" + strings.Repeat("y", 100) + "\nlast"
	r := NewLineReader(strings.NewReader(in), 150)
	type got struct {
		line string
		n    int64
		err  error
	}
	var gs []got
	for {
		line, n, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		gs = append(gs, got{string(line), n, err})
	}
	want := []got{
		{"one", 5, nil},
		{"", 1, nil},
		{big[:min(len(big), prefixKept)], 201, ErrTooLong},
		{"two", 4, nil},
		{strings.Repeat("y", 100), 101, nil},
		{"last", 4, nil},
	}
	if len(gs) != len(want) {
		t.Fatalf("Next gave %d lines; want %d: %+v", len(gs), len(want), gs)
	}
	for i := range want {
		if gs[i].line != want[i].line || gs[i].n != want[i].n || !errors.Is(gs[i].err, want[i].err) {
			t.Errorf("line %d = %.20q %d %v; want %.20q %d %v", i, gs[i].line, gs[i].n, gs[i].err, want[i].line, want[i].n, want[i].err)
		}
	}
}

// TestLineReaderBig reads a 10 MiB line whole and drops a 40 MiB one, and
// the stream goes on after it.
func TestLineReaderBig(t *testing.T) {
	ten := bytes.Repeat([]byte("a"), 10<<20)
	forty := append([]byte(`{"jsonrpc":"2.0","id":9,"result":"`), bytes.Repeat([]byte("b"), 40<<20)...)
	var in bytes.Buffer
	in.Write(ten)
	in.WriteByte('\n')
	in.Write(forty)
	in.WriteString("\"}\nafter\n")
	r := NewLineReader(&in, 0)
	line, _, err := r.Next()
	if err != nil || len(line) != len(ten) {
		t.Fatalf("10 MiB line: %d bytes, %v", len(line), err)
	}
	line, n, err := r.Next()
	if !errors.Is(err, ErrTooLong) || n != int64(len(forty)+3) {
		t.Fatalf("40 MiB line: n %d, %v; want ErrTooLong", n, err)
	}
	if id, ok := PrefixID(line); !ok || string(id) != "9" {
		t.Errorf("PrefixID = %s %v; want 9", id, ok)
	}
	line, _, err = r.Next()
	if err != nil || string(line) != "after" {
		t.Errorf("after the long line: %q %v", line, err)
	}
}

func TestPrefixID(t *testing.T) {
	tests := []struct {
		in, id string
		ok     bool
	}{
		{`{"jsonrpc":"2.0","id":12,"result":{"a":"bbbb`, "12", true},
		{`{"jsonrpc":"2.0","result":{"a":"b"},"id":"x","more`, `"x"`, true},
		{`{"jsonrpc":"2.0","result":{"a":"bbbb`, "", false},
		{`{"jsonrpc":"2.0","id":12`, "", false},
		{`not json`, "", false},
	}
	for _, tt := range tests {
		id, ok := PrefixID([]byte(tt.in))
		if ok != tt.ok || string(id) != tt.id {
			t.Errorf("PrefixID(%s) = %s %v; want %s %v", tt.in, id, ok, tt.id, tt.ok)
		}
	}
}

func TestCheckModern(t *testing.T) {
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"héllo",` + meta + `}}`
	h := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	good := []string{HeaderVersion, "2026-07-28", HeaderMethod, "tools/call", HeaderName, "=?base64?aMOpbGxv?="}
	tests := []struct {
		name   string
		msg    string
		header func(string) string
		code   int
	}{
		{"good", call, h(good...), 0},
		{"plain name", strings.Replace(call, "héllo", "hello", 1), h(HeaderVersion, "2026-07-28", HeaderMethod, "tools/call", HeaderName, "hello"), 0},
		{"no version header", call, h(good[2:]...), CodeHeaderMismatch},
		{"unknown version", call, h(append([]string{HeaderVersion, "2099-01-01"}, good[2:]...)...), CodeUnsupportedVer},
		{"version mismatch", strings.Replace(call, `"2026-07-28"`, `"2026-08-01"`, 1), h(good...), CodeHeaderMismatch},
		{"method mismatch", call, h(HeaderVersion, "2026-07-28", HeaderMethod, "tools/list", HeaderName, "=?base64?aMOpbGxv?="), CodeHeaderMismatch},
		{"no method", call, h(HeaderVersion, "2026-07-28", HeaderName, "x"), CodeHeaderMismatch},
		{"no name", call, h(HeaderVersion, "2026-07-28", HeaderMethod, "tools/call"), CodeHeaderMismatch},
		{"bad base64", call, h(HeaderVersion, "2026-07-28", HeaderMethod, "tools/call", HeaderName, "=?base64?!!?="), CodeHeaderMismatch},
		{"no meta", `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}`, h(HeaderVersion, "2026-07-28", HeaderMethod, "server/discover"), CodeInvalidParams},
		{"no caps", `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, h(HeaderVersion, "2026-07-28", HeaderMethod, "server/discover"), CodeInvalidParams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(tt.msg))
			if err != nil {
				t.Fatal(err)
			}
			if d := CheckModern(tt.header, m); d.Code != tt.code {
				t.Errorf("CheckModern = %+v; want code %d", d, tt.code)
			}
		})
	}
}

func TestCheckParams(t *testing.T) {
	schema := []byte(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"n":{"type":"integer","x-mcp-header":"N"},"opt":{"type":"object","properties":{"flag":{"type":"boolean","x-mcp-header":"Flag"}}}}}`)
	bs := ParamBindings(schema)
	if len(bs) != 3 {
		t.Fatalf("ParamBindings = %+v; want 3", bs)
	}
	call := func(args string) Msg {
		m, err := Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":` + args + `}}`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	h := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if strings.EqualFold(kv[i], k) {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	tests := []struct {
		name string
		args string
		hdr  []string
		ok   bool
	}{
		{"all", `{"region":"eu","n":3,"opt":{"flag":true}}`, []string{"Mcp-Param-Region", "eu", "Mcp-Param-N", "3", "Mcp-Param-Flag", "true"}, true},
		{"base64", `{"region":"é"}`, []string{"Mcp-Param-Region", "=?base64?w6k=?="}, true},
		{"absent arg, no header", `{}`, nil, true},
		{"null arg", `{"region":null}`, nil, true},
		{"missing header", `{"region":"eu"}`, nil, false},
		{"header for absent arg", `{}`, []string{"Mcp-Param-Region", "eu"}, false},
		{"mismatch", `{"region":"eu"}`, []string{"Mcp-Param-Region", "us"}, false},
		{"bad base64", `{"region":"eu"}`, []string{"Mcp-Param-Region", "=?base64?ZX=?="}, false},
		{"number", `{"n":3}`, []string{"Mcp-Param-N", "3.0"}, true},
		{"number mismatch", `{"n":3}`, []string{"Mcp-Param-N", "4"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckParams(h(tt.hdr...), bs, call(tt.args))
			if (err == nil) != tt.ok {
				t.Errorf("CheckParams = %v; want ok %v", err, tt.ok)
			}
		})
	}
}

func TestEventID(t *testing.T) {
	if s, n, ok := ParseEventID(EventID("AB12", 7)); !ok || s != "AB12" || n != 7 {
		t.Errorf("round trip = %q %d %v", s, n, ok)
	}
	for _, bad := range []string{"", "_1", "a_", "a_-1", "a_01", "a_1_2", "a_x"} {
		if _, _, ok := ParseEventID(bad); ok {
			t.Errorf("ParseEventID(%q) ok; want refused", bad)
		}
	}
	a, b := NewSessionID(), NewSessionID()
	if a == b || len(a) < 32 {
		t.Errorf("session ids %q %q", a, b)
	}
	for _, c := range []byte(a) {
		if c < 0x21 || c > 0x7e {
			t.Errorf("session id %q has byte %#x", a, c)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, tt := range parseTests {
		f.Add([]byte(tt.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		// What Parse read, encoding/json reads the same way.
		var std map[string]json.RawMessage
		if err := json.Unmarshal(b, &std); err != nil {
			t.Fatalf("Parse took %q, encoding/json refused it: %v", b, err)
		}
		if m.ID != nil && !bytes.Equal(bytes.TrimSpace(std["id"]), m.ID) {
			t.Fatalf("id %s; encoding/json read %s", m.ID, std["id"])
		}
		if m.Method != "" {
			var meth string
			_ = json.Unmarshal(std["method"], &meth)
			if meth != m.Method {
				t.Fatalf("method %q; encoding/json read %q", m.Method, meth)
			}
		}
		// A replaced id is the only change.
		if m.ID != nil {
			out := m.WithID([]byte(`"tb"`))
			m2, err := Parse(out)
			if err != nil || string(m2.ID) != `"tb"` || m2.Kind != m.Kind {
				t.Fatalf("WithID(%q) = %q: %v", b, out, err)
			}
		}
		_, _ = m.Get("params", "_meta", "progressToken")
	})
}

func TestSplitBatch(t *testing.T) {
	got, err := SplitBatch([]byte(` [ {"a":[1,"]"]} , 2,"x" ] `))
	if err != nil || len(got) != 3 || string(got[0]) != `{"a":[1,"]"]}` || string(got[2]) != `"x"` {
		t.Errorf("SplitBatch = %q, %v", got, err)
	}
	for _, bad := range []string{`[]`, `{}`, `[1,`, `x`} {
		if _, err := SplitBatch([]byte(bad)); err == nil {
			t.Errorf("SplitBatch(%s) took it", bad)
		}
	}
}

func FuzzSplitBatch(f *testing.F) {
	f.Add([]byte(`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"x"}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		parts, err := SplitBatch(b)
		if err != nil {
			return
		}
		var std []json.RawMessage
		if err := json.Unmarshal(b, &std); err != nil || len(std) != len(parts) {
			t.Fatalf("SplitBatch(%q) = %d parts; encoding/json: %d, %v", b, len(parts), len(std), err)
		}
		for i := range parts {
			if !bytes.Equal(bytes.TrimSpace(std[i]), parts[i]) {
				t.Fatalf("part %d = %q; encoding/json %q", i, parts[i], std[i])
			}
		}
	})
}

func FuzzLineReader(f *testing.F) {
	f.Add([]byte("a\nb\r\n"), 4)
	f.Add([]byte("aaaaaaaaaa\nb"), 3)
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		limit = limit%64 + 1
		if limit <= 0 {
			limit += 64
		}
		r := NewLineReader(bytes.NewReader(b), limit)
		var total int64
		for {
			line, n, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil && !errors.Is(err, ErrTooLong) {
				t.Fatal(err)
			}
			if err == nil && len(line) > limit {
				t.Fatalf("line of %d bytes past limit %d", len(line), limit)
			}
			total += n
		}
		if total != int64(len(b)) {
			t.Fatalf("read %d bytes of %d", total, len(b))
		}
	})
}

func FuzzPrefixID(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":12,"result":{"a":"bbbb`))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, ok := PrefixID(b)
		if ok && !ValidID(id) {
			t.Fatalf("PrefixID(%q) = %q, not an id", b, id)
		}
	})
}

func FuzzEventID(f *testing.F) {
	f.Add("AB_1")
	f.Fuzz(func(t *testing.T, s string) {
		st, n, ok := ParseEventID(s)
		if ok && EventID(st, n) != s {
			t.Fatalf("ParseEventID(%q) = %q %d, which prints as %q", s, st, n, EventID(st, n))
		}
	})
}

func TestEnvRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   map[string]string
		want []string
	}{
		{"none", nil, nil},
		{"two, sorted", map[string]string{"TOKEN_B": "b=1", "API_KEY": "sk-\n x"}, []string{"API_KEY=sk-\n x", "TOKEN_B=b=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeEnv(EncodeEnv(tt.in))
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("DecodeEnv(EncodeEnv(%v)) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
	for _, bad := range []map[string]string{{"A=B": "x"}, {"1X": "x"}, {"X": "a\x00b"}, {"": "x"}} {
		if got, err := DecodeEnv(EncodeEnv(bad)); err == nil {
			t.Errorf("DecodeEnv(EncodeEnv(%q)) = %q; want an error", bad, got)
		}
	}
	if got, err := DecodeEnv("not base64!"); err == nil {
		t.Errorf("DecodeEnv(junk) = %q; want an error", got)
	}
}

func TestFields(t *testing.T) {
	tests := []struct {
		name, in string
		want     []Field
		ok       bool
	}{
		{"members in order", `{"b":1,"a":{"x":[1,"}"]},"b":"2"}`, []Field{{"b", []byte("1")}, {"a", []byte(`{"x":[1,"}"]}`)}, {"b", []byte(`"2"`)}}, true},
		{"escaped key", ` {"\u0061" : true } `, []Field{{"a", []byte("true")}}, true},
		{"empty", `{}`, []Field{}, true},
		{"not an object", `[1]`, nil, false},
		{"a value after it", `{} 1`, nil, false},
	}
	for _, tt := range tests {
		got, ok := Fields([]byte(tt.in))
		if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Fields(%s) = %q, %v; want %q, %v", tt.name, tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestHolder(t *testing.T) {
	tests := []struct{ name, principal, want string }{
		{"token", "token:3f9c0a1b2c4d", "token:3f9c0a1b2c4d"},
		{"token with values", "token:3f9c0a1b2c4d/env:0011223344556677", "token:3f9c0a1b2c4d"},
		{"client with values", "client:192.0.2.7/env:0011223344556677", "client:192.0.2.7"},
		{"IPv6 client", "client:2001:db8::/64", "client:2001:db8::/64"},
		{"none", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Holder(tt.principal); got != tt.want {
				t.Errorf("Holder(%q) = %q; want %q", tt.principal, got, tt.want)
			}
		})
	}
}

// TestParseAllocs: the bridge parses every call twice (the client's
// request, the process's answer). It copies no key of a message's own,
// keeps its member list on the stack, finds a key given twice without a
// map and reads a method or an id without escapes without encoding/json:
// a request allocates its method, an answer nothing.
func TestParseAllocs(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want float64
	}{
		{"request", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","arguments":{"a":5,"b":1}}}`, 1},
		{"string id", `{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"add"}}`, 1},
		{"answer", `{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"6"}],"structuredContent":{"sum":6}}}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := []byte(tt.in)
			if _, err := Parse(b); err != nil {
				t.Fatalf("Parse(%s) = %v", tt.in, err)
			}
			if got := testing.AllocsPerRun(200, func() { _, _ = Parse(b) }); got > tt.want+allocSlack {
				t.Errorf("Parse(%s) allocates %v times; want at most %v", tt.in, got, tt.want)
			}
		})
	}
}

func BenchmarkParse(b *testing.B) {
	in := []byte(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","arguments":{"a":5,"b":1}}}`)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Parse(in)
	}
}

// FuzzDecodeString: DecodeString reads any input as json.Unmarshal into
// a string does, its shortcut included.
func FuzzDecodeString(f *testing.F) {
	for _, s := range []string{`"tools/call"`, "\"000\" ", `"a\"b"`, `"\u00e9"`, "\"\xff\"", "\"a\x01\"", `"a"b"`, `7`, `null`, `""`, `"`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeString(b)
		var want string
		werr := json.Unmarshal(b, &want)
		if (err == nil) != (werr == nil) || err == nil && got != want {
			t.Fatalf("DecodeString(%q) = %q, %v; encoding/json: %q, %v", b, got, err, want, werr)
		}
		// A string id is valid where encoding/json reads it.
		if len(b) > 0 && b[0] == '"' && ValidID(b) != (werr == nil) {
			t.Fatalf("ValidID(%q) = %v; encoding/json: %v", b, ValidID(b), werr)
		}
	})
}

// TestGetAllocs: the bridge looks for a call's _meta twice (its
// protocol version, its progress token). Looking allocates nothing for
// a message whose keys are MCP's own: the member lists stay on the
// stack and those keys are not copied.
func TestGetAllocs(t *testing.T) {
	m, err := Parse([]byte(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","arguments":{"a":5,"b":1},"_meta":{"progressToken":7}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if tok, ok := m.Get("params", "_meta", "progressToken"); !ok || string(tok) != "7" {
		t.Fatalf("Get(params, _meta, progressToken) = %s, %v; want 7, true", tok, ok)
	}
	got := testing.AllocsPerRun(200, func() {
		_, _ = m.Get("params", "_meta", "progressToken")
		_, _ = m.Get("params", "_meta", MetaProtocolVersion)
	})
	if got > 0 {
		t.Errorf("two lookups in a tools/call allocate %v times; want 0", got)
	}
}
