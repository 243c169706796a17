// Serves a built site under /peakplan/ on a loopback port, as the benchmarks open it: any unknown path gets
// index.html. Shared by bench.mjs and startup.mjs.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';

export const SUB = '/peakplan/';
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.css': 'text/css', '.svg': 'image/svg+xml' };

export async function serveSite(dist) {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    let p = path.join(dist, decodeURIComponent(url.pathname.slice(SUB.length)) || 'index.html');
    if (!url.pathname.startsWith(SUB) || !fs.existsSync(p) || fs.statSync(p).isDirectory()) p = path.join(dist, 'index.html');
    res.writeHead(200, { 'content-type': TYPES[path.extname(p)] || 'application/octet-stream' });
    res.end(fs.readFileSync(p));
  });
  await new Promise(r => server.listen(0, '127.0.0.1', r));
  return { base: `http://127.0.0.1:${server.address().port}${SUB}`, close: () => server.close() };
}
