#!/usr/bin/env node
// A minimal stdio MCP server: initialize, ping, tools/list, tools/call.
'use strict';
const readline = require('readline');
const { greet } = require('tb-greeting');
const versions = ['2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05'];
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.id === undefined) return; // a notification
  const p = m.params || {};
  switch (m.method) {
    case 'initialize':
      send({ jsonrpc: '2.0', id: m.id, result: {
        protocolVersion: versions.includes(p.protocolVersion) ? p.protocolVersion : versions[0],
        capabilities: { tools: {} },
        serverInfo: { name: 'tb-mcp-hello', version: '1.0.0' },
      } });
      break;
    case 'ping':
      send({ jsonrpc: '2.0', id: m.id, result: {} });
      break;
    case 'tools/list':
      send({ jsonrpc: '2.0', id: m.id, result: { tools: [{
        name: 'greet', description: 'Greets someone',
        inputSchema: { type: 'object', properties: { name: { type: 'string' } } },
      }] } });
      break;
    case 'tools/call':
      send({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: greet((p.arguments || {}).name || 'world') }] } });
      break;
    default:
      send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'Method not found' } });
  }
});
