package manifest

// The manifest key of R48, kept apart from the other mcp keys.
func init() { manifestKeys = append(manifestKeys, "cacheToolsList") }

// validateCache checks mcp.cacheToolsList: the bridge, which reads every
// message a stdio server writes, alone sees each list_changed; an http
// server's notifications reach only the streams its clients hold open.
func (m *MCP) validateCache() error {
	if m.CacheToolsList && m.Transport != TransportStdio {
		return badMCP("mcp.cacheToolsList is for stdio servers: toybox sees an %s server's notifications/tools/list_changed only on its clients' own streams, so a cached list could outlive a change", m.Transport)
	}
	return nil
}
