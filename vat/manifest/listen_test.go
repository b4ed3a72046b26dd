package manifest

import (
	"errors"
	"strings"
	"testing"
)

var listenTests = []struct {
	name, in string
	want     int    // the port; ignored when wantErr is set
	wantErr  string // substring; "" means valid
}{
	{"port", `"listen":{"port":3001}`, 3001, ""},
	{"lowest", `"listen":{"port":1}`, 1, ""},
	{"highest", `"listen":{"port":65535}`, 65535, ""},
	{"http mcp on its port", `"listen":{"port":3001},"mcp":{"transport":"http"}`, 3001, ""},
	{"no port", `"listen":{}`, 0, "listen.port 0 is not a TCP port"},
	{"zero", `"listen":{"port":0}`, 0, "listen.port 0 is not a TCP port"},
	{"negative", `"listen":{"port":-1}`, 0, "listen.port -1 is not a TCP port"},
	{"too high", `"listen":{"port":65536}`, 0, "listen.port 65536 is not a TCP port"},
	{"a string", `"listen":{"port":"3001"}`, 0, "listen.port"},
	{"a fraction", `"listen":{"port":30.5}`, 0, "listen.port"},
	{"a bare number", `"listen":3001`, 0, "bad manifest"},
	{"unknown key", `"listen":{"port":3001,"host":"0.0.0.0"}`, 0, "unknown field"},
	{"key twice", `"listen":{"port":3001,"port":3002}`, 0, "appears twice"},
	{"key in other case", `"listen":{"Port":3001}`, 0, "case-sensitive"},
	{"stdio mcp", `"listen":{"port":3001},"mcp":{"transport":"stdio"}`, 0, "a stdio MCP server"},
	{"a forwarded port", `"listen":{"port":5432},"network":{"hosts":["127.0.0.1:5432"]}`, 0, `the port of network.hosts entry "127.0.0.1:5432"`},
	{"a forwarded port by name", `"listen":{"port":8080},"network":{"hosts":["http://localhost:8080"]}`, 0, "which toybox-entry forwards"},
	{"an outside host's port", `"listen":{"port":5432},"network":{"hosts":["db.example.com:5432"]}`, 5432, ""},
	{"PORT declared", `"listen":{"port":3001},"env":["PORT"]}`, 0, "env declares PORT"},
}

func TestParseListen(t *testing.T) {
	for _, tt := range listenTests {
		t.Run(tt.name, func(t *testing.T) {
			in := `{"command":["./a"],` + tt.in + `}`
			m := parseCase(t, in, tt.wantErr)
			if m == nil {
				return
			}
			if m.Listen == nil || m.Listen.Port != tt.want {
				t.Errorf("Parse(%s).Listen = %+v; want port %d", in, m.Listen, tt.want)
			}
		})
	}
}

func TestParseListenQuery(t *testing.T) {
	tests := []struct {
		in   string
		want int // 0: refused
	}{
		{"3001", 3001},
		{"1", 1},
		{"65535", 65535},
		{"", 0},
		{"0", 0},
		{"65536", 0},
		{"-1", 0},
		{"+80", 0},
		{"080", 0},
		{" 80", 0},
		{"80a", 0},
		{"0x50", 0},
	}
	for _, tt := range tests {
		l, err := ParseListenQuery(tt.in)
		if tt.want == 0 {
			if !errors.Is(err, ErrBadListen) || !strings.Contains(err.Error(), "?listen=") {
				t.Errorf("ParseListenQuery(%q) = %+v, %v; want ErrBadListen naming ?listen=", tt.in, l, err)
			}
			continue
		}
		if err != nil || l.Port != tt.want {
			t.Errorf("ParseListenQuery(%q) = %+v, %v; want port %d", tt.in, l, err, tt.want)
		}
	}
}

func TestCheckListen(t *testing.T) {
	stdio, _ := ParseMCPQuery(TransportStdio)
	web, _ := ParseMCPQuery(TransportHTTP)
	l := &Listen{Port: 3001}
	if err := CheckListen(l, stdio); !errors.Is(err, ErrBadListen) {
		t.Errorf("CheckListen(3001, stdio) = %v; want ErrBadListen", err)
	}
	for _, m := range []*MCP{nil, web} {
		if err := CheckListen(l, m); err != nil {
			t.Errorf("CheckListen(3001, %+v) = %v; want nil", m, err)
		}
	}
}

func FuzzParseListen(f *testing.F) {
	for _, tt := range listenTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := Parse(strings.NewReader(`{"command":["./a"],` + s + `}`))
		if err != nil || m.Listen == nil {
			return
		}
		if p := m.Listen.Port; p < 1 || p > 65535 {
			t.Fatalf("accepted listen.port %d", p)
		}
	})
}
