#!/usr/bin/env node
// A stdio MCP server whose tool "env" answers with the values of the
// variables it is asked for (null for one not set).
'use strict';
const readline = require('readline');
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.id === undefined) return; // a notification
  const p = m.params || {};
  switch (m.method) {
    case 'initialize':
      return send({ jsonrpc: '2.0', id: m.id, result: {
        protocolVersion: '2025-11-25', capabilities: { tools: {} },
        serverInfo: { name: 'tb-mcp-env', version: require('./package.json').version },
      } });
    case 'tools/list':
      return send({ jsonrpc: '2.0', id: m.id, result: { tools: [{
        name: 'env', description: 'Shows variables of its environment',
        inputSchema: { type: 'object', properties: { names: { type: 'array', items: { type: 'string' } } } },
      }] } });
    case 'tools/call': {
      const out = {};
      for (const n of (p.arguments || {}).names || []) out[n] = n in process.env ? process.env[n] : null;
      return send({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: JSON.stringify(out) }] } });
    }
  }
  send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'Method not found' } });
});
