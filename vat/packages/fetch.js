// fetch.js downloads the tarballs of a lock inside the prepare wall.
//
// It checks nothing: toybox checks every file against the lock's integrity
// outside the wall, before anything is unpacked. Usage:
//   node fetch.js LIST OUTDIR TOTAL
// LIST is a JSON array of URLs; the i-th is written to OUTDIR/<i>.tgz.
// TOTAL is the most bytes they may hold together: past it, fetching
// fails before the chunk that would pass it is written.
// An https URL goes through $HTTPS_PROXY (toybox-entry's CONNECT proxy);
// an http URL on loopback is fetched directly (a forwarded port), any other
// http URL through $HTTP_PROXY in absolute form.
'use strict';
const fs = require('fs');
const http = require('http');
const https = require('https');
const tls = require('tls');
const path = require('path');

const MAX = 512 * 1024 * 1024; // one tarball at most
const [list, outdir, totalArg] = process.argv.slice(2);
const TOTAL = Number(totalArg);
if (!Number.isSafeInteger(TOTAL) || TOTAL <= 0) {
  console.error(`fetch: TOTAL ${totalArg} is not a number of bytes`);
  process.exit(2);
}
const urls = JSON.parse(fs.readFileSync(list, 'utf8'));

function loopback(host) {
  return host === 'localhost' || host === '127.0.0.1' || host === '[::1]';
}

function proxyOf(name) {
  const p = process.env[name] || process.env[name.toLowerCase()];
  return p ? new URL(p) : null;
}

function get(u, redirects) {
  return new Promise((resolve, reject) => {
    const url = new URL(u);
    const done = (res) => {
      if ([301, 302, 303, 307, 308].includes(res.statusCode) && res.headers.location && redirects < 3) {
        res.resume();
        resolve(get(new URL(res.headers.location, url).href, redirects + 1));
        return;
      }
      if (res.statusCode !== 200) {
        res.resume();
        reject(new Error(`${u}: HTTP ${res.statusCode}`));
        return;
      }
      resolve(res);
    };
    if (url.protocol === 'https:') {
      const proxy = proxyOf('HTTPS_PROXY');
      if (!proxy) { reject(new Error(`${u}: no HTTPS_PROXY in the wall`)); return; }
      const port = url.port || '443';
      const c = http.request({ host: proxy.hostname, port: proxy.port, method: 'CONNECT', path: `${url.hostname}:${port}`, headers: { Host: `${url.hostname}:${port}` } });
      c.on('connect', (res, socket) => {
        if (res.statusCode !== 200) { socket.destroy(); reject(new Error(`${u}: the proxy answered ${res.statusCode}`)); return; }
        const req = https.get(u, { createConnection: () => tls.connect({ socket, servername: url.hostname }) }, done);
        req.on('error', reject);
      });
      c.on('error', reject);
      c.end();
      return;
    }
    if (url.protocol !== 'http:') { reject(new Error(`${u}: not http or https`)); return; }
    let req;
    const proxy = proxyOf('HTTP_PROXY');
    if (loopback(url.hostname) || !proxy) {
      req = http.get(u, done);
    } else {
      req = http.get({ host: proxy.hostname, port: proxy.port, path: u, headers: { Host: url.host } }, done);
    }
    req.on('error', reject);
  });
}

async function main() {
  let total = 0;
  for (let i = 0; i < urls.length; i++) {
    const res = await get(urls[i], 0);
    const out = fs.createWriteStream(path.join(outdir, `${i}.tgz`), { flags: 'wx' });
    let n = 0;
    await new Promise((resolve, reject) => {
      res.on('data', (b) => {
        n += b.length;
        total += b.length;
        if (n > MAX) {
          res.destroy(new Error(`${urls[i]}: larger than ${MAX} bytes`));
          return;
        }
        if (total > TOTAL) {
          res.destroy(new Error(`the tarballs are larger than ${TOTAL} bytes together`));
          return;
        }
        if (!out.write(b)) {
          res.pause();
          out.once('drain', () => res.resume());
        }
      });
      res.on('end', () => out.end());
      res.on('error', (e) => { out.destroy(); reject(e); });
      out.on('error', reject);
      out.on('finish', resolve);
    });
  }
}

main().catch((e) => { console.error(`fetch: ${e.message}`); process.exit(1); });
