// The shared harness of the end-to-end tests (page.test.mjs, hub_share.test.mjs): serves DIST_DIR (process.argv[2],
// the site built with --public-url /peakplan/) under /peakplan/ on a local port, launches Debian's Chromium through
// playwright-core (no browser download), and gives the tests their `test` runner and helpers. Importing it starts the
// server and the browser; a test file ends with `await finish()`, which prints the closing "e2e: N passed, N failed"
// line and exits 1 if any test failed or the page asked for anything outside the sub-path.
// E2E_ONLY=words runs only the tests whose name holds them. Screenshots go to tests/e2e/out/ (`out`).
import { createRequire } from 'node:module';
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(path.resolve('.tools/node_modules/x.js'));
const { chromium } = require('playwright-core');
const dist = path.resolve(process.argv[2] || 'dist');
export const out = path.resolve('tests/e2e/out');
fs.mkdirSync(out, { recursive: true });
const SUB = '/peakplan/';
const FLAGS = ['--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--enable-unsafe-webgpu', '--use-webgpu-adapter=swiftshader'];
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.css': 'text/css', '.svg': 'image/svg+xml' };

// Every request outside the sub-path is answered 404 and recorded; finish() fails the run if there was any.
const foreign = [];
const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  if (!url.pathname.startsWith(SUB)) { foreign.push(url.pathname); res.writeHead(404); return res.end(); }
  let p = path.join(dist, decodeURIComponent(url.pathname.slice(SUB.length)) || 'index.html');
  if (!p.startsWith(dist) || !fs.existsSync(p) || fs.statSync(p).isDirectory()) p = path.join(dist, 'index.html');
  res.writeHead(200, { 'content-type': TYPES[path.extname(p)] || 'application/octet-stream' });
  res.end(fs.readFileSync(p));
});
await new Promise(r => server.listen(0, '127.0.0.1', r));
export const base = `http://127.0.0.1:${server.address().port}${SUB}`;
export const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: FLAGS });

let passed = 0, failed = 0;
// E2E_ONLY=words runs only the tests whose name holds them.
const only = process.env.E2E_ONLY;
export async function test(name, body) {
  if (only && !name.includes(only)) return;
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, acceptDownloads: true });
  const errors = [];
  page.on('pageerror', e => errors.push(e.message));
  // The page's Content-Security-Policy holds: no inline style or script is refused (csp.py sends no 'unsafe-inline').
  // A test that injects something to see it refused says so by setting page.cspProbe.
  page.on('console', m => { if (m.type() === 'error' && /Content Security Policy/i.test(m.text()) && !page.cspProbe) errors.push(m.text()); });
  try {
    await body(page);
    if (errors.length) throw new Error('page error: ' + errors[0]);
    passed++; console.log(`ok   ${name}`);
  } catch (e) {
    failed++; console.log(`FAIL ${name}: ${String(e.message || e).split('\n')[0]}`);
  } finally { await page.close(); }
}
export const bytes = async (page, id) => Number(await page.locator(`[data-testid="${id}"]`).getAttribute('data-bytes'));
export const ready = page => page.waitForSelector('[data-testid="value-peak"][data-bytes]', { timeout: 20000 });
export const setSlider = (page, id, where) => page.locator(`[data-testid="${id}"]`).evaluate((e, where) => {
  e.value = where === 'min' ? e.min : where === 'max' ? e.max : where;
  e.dispatchEvent(new Event('input', { bubbles: true }));
}, where);
export function assert(cond, msg) { if (!cond) throw new Error(msg); }
// The link's value of `key`, and a wait until it is `value` (the URL is written at the end of the task that
// changed the plan; `null`: the key gone).
export const param = (page, key) => new URL(page.url()).searchParams.get(key);
export const urlHas = (page, key, value) => page.waitForFunction(([k, v]) => new URL(location.href).searchParams.get(k) === v,
  [key, value], { timeout: 10000 });
// Types `value` into the `num-KEY` box and commits it, as leaving the box does.
export const typeNumber = async (page, key, value) => {
  await page.fill(`[data-testid="num-${key}"]`, value);
  await page.locator(`[data-testid="num-${key}"]`).dispatchEvent('change');
};

// The Hugging Face Hub, answered by the test (nothing reaches the internet): repo -> config (object or raw text),
// status, abort, or a token the repo wants. Records each request's path and Authorization header.
export const realConfig = name => JSON.parse(fs.readFileSync(`/work/shared/models/${name}.json`, 'utf8'));
export async function routeHub(page, repos) {
  const asked = [];
  await page.route(/^https:\/\/huggingface\.co\//, async route => {
    const u = new URL(route.request().url());
    const auth = await route.request().headerValue('authorization');
    asked.push({ path: u.pathname, auth });
    const m = u.pathname.match(/^\/(?:api\/models\/)?([^/]+\/[^/]+)/);
    const r = m && repos[m[1]];
    const headers = { 'access-control-allow-origin': '*', 'access-control-allow-headers': 'authorization' };
    if (route.request().method() === 'OPTIONS') return route.fulfill({ status: 204, headers });
    if (r?.hold) await r.hold;
    if (r?.abort) return route.abort('internetdisconnected');
    if (!r) return route.fulfill({ status: 404, headers, contentType: 'application/json', body: '{"error":"Repository not found"}' });
    if (r.token && auth !== `Bearer ${r.token}`) return route.fulfill({ status: 401, headers, body: 'Access to model is restricted' });
    const info = u.pathname.startsWith('/api/models/');
    const body = info ? JSON.stringify({ id: m[1], safetensors: r.stated ? { total: r.stated } : undefined })
      : typeof r.config === 'string' ? r.config : JSON.stringify(r.config);
    return route.fulfill({ status: 200, headers, contentType: 'application/json', body });
  });
  return asked;
}
export const hubError = page => page.locator('[data-testid="hub-error"]');

// axe-core (installed by scripts/setup.sh), for the accessibility audits: evaluate it in a page, then window.axe.run.
const axeSource = fs.readFileSync(path.resolve('.tools/node_modules/axe-core/axe.min.js'), 'utf8');
// The page's serious and critical axe-core violations (and any rule named in `also`), one line each; axe is put
// into the page first where it is not there yet.
export async function axeViolations(page, also = []) {
  if (!await page.evaluate(() => !!window.axe)) await page.evaluate(axeSource);
  return page.evaluate(async also => (await window.axe.run(document, { resultTypes: ['violations'] })).violations
    .filter(v => v.impact === 'serious' || v.impact === 'critical' || also.includes(v.id))
    .map(v => `${v.id} (${v.impact}) on ${v.nodes.length}: ${v.nodes[0].target.join(' ')}`), also);
}

// Ends the run: fails it for any request outside the sub-path, closes the browser and the server, prints the
// summary line and exits 1 if anything failed, 0 otherwise.
export async function finish() {
  if (foreign.length) { failed++; console.log('FAIL requests outside the sub-path: ' + foreign.slice(0, 3).join(' ')); }
  await browser.close(); server.close();
  console.log(`e2e: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}
