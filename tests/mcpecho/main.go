// Command mcpecho is an HTTP MCP server that says what reached it.
//
// It binds where the variables an MCP host sets say, and knows nothing of
// toybox: "mcpecho mcp" on $MCP_HOST:$MCP_PORT, "mcpecho fastmcp" on
// 127.0.0.1:$FASTMCP_PORT, "mcpecho port" on :$PORT. It serves POST at
// /mcp and mints no session (a stateless server):
//
//   - initialize, tools/list: minimal answers; server/discover: -32601;
//   - echo: the request's headers and the MCP variables of its environment;
//   - test/status: the HTTP status its params name, with a JSON-RPC error;
//   - a body sent with Mcp-Method test/upload: an event stream with one
//     event per read of the body, saying how many bytes came so far, sent
//     while the body still comes (it needs both directions to stream);
//   - a notification: 202.
//
// GET and DELETE get 405, as a server with no stream and no session says.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
)

// vars are the environment variables echo reports.
var vars = []string{"MCP_TRANSPORT", "MCP_HOST", "MCP_PORT", "FASTMCP_PORT", "PORT", "TOYBOX_LISTEN"}

type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method"`
	Params struct {
		ProtocolVersion string `json:"protocolVersion"`
		Status          int    `json:"status"`
	} `json:"params"`
}

func answer(w http.ResponseWriter, status int, id json.RawMessage, result, rpcErr any) {
	m := map[string]any{"jsonrpc": "2.0", "id": id}
	if rpcErr != nil {
		m["error"] = rpcErr
	} else {
		m["result"] = result
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(m)
}

// upload answers each read of the body with an event, as it reads.
func upload(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	if err := rc.EnableFullDuplex(); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	buf := make([]byte, 64<<10)
	total := 0
	for {
		n, err := r.Body.Read(buf)
		total += n
		if n > 0 {
			fmt.Fprintf(w, "event: message\ndata: {\"got\":%d}\n\n", total)
			_ = rc.Flush()
		}
		if err != nil {
			fmt.Fprintf(w, "event: message\ndata: {\"done\":%d,\"err\":%q}\n\n", total, err.Error())
			return
		}
	}
}

func serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "POST only: this server keeps no stream and no session", http.StatusMethodNotAllowed)
		return
	}
	if r.Header.Get("Mcp-Method") == "test/upload" {
		upload(w, r)
		return
	}
	var m message
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&m); err != nil {
		answer(w, http.StatusBadRequest, nil, nil, map[string]any{"code": -32700, "message": err.Error()})
		return
	}
	if len(m.ID) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	switch m.Method {
	case "initialize":
		answer(w, http.StatusOK, m.ID, map[string]any{
			"protocolVersion": m.Params.ProtocolVersion,
			"capabilities":    map[string]any{"tools": map[string]any{}},
			"serverInfo":      map[string]any{"name": "mcpecho", "version": "1"},
		}, nil)
	case "tools/list":
		answer(w, http.StatusOK, m.ID, map[string]any{"tools": []any{}}, nil)
	case "echo":
		env := map[string]string{}
		for _, k := range vars {
			env[k] = os.Getenv(k)
		}
		answer(w, http.StatusOK, m.ID, map[string]any{"headers": r.Header, "env": env}, nil)
	case "test/status":
		answer(w, m.Params.Status, m.ID, nil, map[string]any{"code": -32000, "message": fmt.Sprintf("status %d as asked", m.Params.Status)})
	default:
		answer(w, http.StatusNotFound, m.ID, nil, map[string]any{"code": -32601, "message": "method not found: " + m.Method})
	}
}

func main() {
	var addr string
	switch len(os.Args) {
	case 2:
		switch os.Args[1] {
		case "mcp":
			addr = net.JoinHostPort(os.Getenv("MCP_HOST"), os.Getenv("MCP_PORT"))
		case "fastmcp":
			addr = net.JoinHostPort("127.0.0.1", os.Getenv("FASTMCP_PORT"))
		case "port":
			addr = ":" + os.Getenv("PORT")
		}
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		log.Fatalf("usage: mcpecho mcp|fastmcp|port, with the variable it names set (address %q)", addr)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", serve)
	log.Printf("mcpecho listening on %s", addr)
	log.Fatal(http.ListenAndServe(addr, mux)) //nolint:gosec // a test fixture: the edge in front bounds what reaches it
}
