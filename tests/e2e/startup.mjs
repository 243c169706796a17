// Where the wait for the first figure goes: opens the release site's shared-link plan several times, each in a fresh browser,
// and prints each start-up milestone (ms since navigation) as a median with its run-to-run spread.
// Usage: node tests/e2e/startup.mjs DIST_DIR [RUNS]   A benchmark, not a test: it reports and never fails on a timing.
// Milestones: the HTML, JS glue and wasm received (Resource Timing), the wasm started (compiled and instantiated),
// the first estimate, the app mounted, the chart painted (`performance.mark` from the page, `browser::milestone`),
// and the first figure in the DOM (`value-peak` with its bytes, seen by a MutationObserver from navigation on).
import { createRequire } from 'node:module';
import path from 'node:path';
import { serveSite } from './serve.mjs';

const require = createRequire(path.resolve('.tools/node_modules/x.js'));
const { chromium } = require('playwright-core');
const dist = path.resolve(process.argv[2] || 'dist');
const runs = Number(process.argv[3] || 5);
const server = await serveSite(dist);
const base = server.base;
// The flags of the contract's checks (WebGPU on SwiftShader), and a fresh browser each run: a first visit, with no
// compiled wasm cached and the GPU process starting.
const FLAGS = ['--no-sandbox', '--disable-quic', '--disable-background-networking', '--disable-component-update', '--disable-sync',
  '--no-first-run', '--enable-unsafe-webgpu', '--enable-features=Vulkan', '--use-vulkan=swiftshader', '--use-webgpu-adapter=swiftshader',
  '--use-angle=swiftshader'];

const STEPS = [
  ['html', 'HTML received'],
  ['js', 'JS glue received'],
  ['wasm', 'wasm received'],
  ['peakplan:wasm-started', 'wasm compiled, instantiated, started'],
  ['peakplan:first-estimate', 'first estimate (three methods)'],
  ['figure', 'first figure in the DOM'],
  ['peakplan:mounted', 'app mounted'],
  ['peakplan:chart-painted', 'chart painted'],
  ['load', 'load event (what page.goto waits for)'],
];
const samples = Object.fromEntries(STEPS.map(([k]) => [k, []]));
const tasks = new Map();
for (let i = 0; i < runs; i++) {
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: FLAGS });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.addInitScript(() => {
    new MutationObserver((_, mo) => {
      if (document.querySelector('[data-testid="value-peak"][data-bytes]')) { window.__figureAt = performance.now(); mo.disconnect(); }
    }).observe(document, { subtree: true, childList: true, attributes: true });
  });
  await page.goto(base + '?model=llama-2-7b&method=qlora');
  await page.waitForFunction(() => window.__figureAt !== undefined &&
    performance.getEntriesByName('peakplan:chart-painted').length > 0 &&
    performance.getEntriesByType('navigation')[0].loadEventEnd > 0, null, { timeout: 20000 });
  // What runs once the figure is there (the deferred panels' work, the warm-up), in the next two seconds.
  await page.waitForTimeout(2000);
  for (const [name, start, ms] of await page.evaluate(() => window.__peakplanTasks || [])) {
    const a = tasks.get(name) || { n: 0, ms: 0, max: 0, first: Infinity };
    tasks.set(name, { n: a.n + 1, ms: a.ms + ms, max: Math.max(a.max, ms), first: Math.min(a.first, start) });
  }
  const t = await page.evaluate(() => {
    const nav = performance.getEntriesByType('navigation')[0];
    const out = { figure: window.__figureAt, html: nav.responseEnd, load: nav.loadEventStart };
    for (const r of performance.getEntriesByType('resource')) {
      if (r.name.endsWith('.js')) out.js = r.responseEnd;
      if (r.name.endsWith('.wasm')) out.wasm = r.responseEnd;
    }
    for (const m of performance.getEntriesByType('mark')) out[m.name] = m.startTime;
    return out;
  });
  for (const [k] of STEPS) if (t[k] !== undefined) samples[k].push(t[k]);
  await browser.close();
}
server.close();

const median = v => { const s = [...v].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
console.log(`start-up milestones, ms since navigation (${runs} first visits, a fresh browser each; median, min-max):`);
console.log(`| ${'milestone'.padEnd(40)} | ${'median'.padStart(7)} | ${'spread'.padStart(11)} |`);
console.log(`|${'-'.repeat(42)}|${'-'.repeat(9)}|${'-'.repeat(13)}|`);
for (const [k, label] of STEPS) {
  const v = samples[k];
  if (!v.length) { console.log(`| ${label.padEnd(40)} | ${'-'.padStart(7)} | ${'-'.padStart(11)} |`); continue; }
  const spread = `${Math.min(...v).toFixed(0)}-${Math.max(...v).toFixed(0)}`;
  console.log(`| ${label.padEnd(40)} | ${median(v).toFixed(0).padStart(7)} | ${spread.padStart(11)} |`);
}
console.log(`\nafter the first figure, per page (the mean of ${runs} runs): tasks of their own, longest first`);
console.log(`| ${'task'.padEnd(40)} | ${'count'.padStart(7)} | ${'total ms'.padStart(9)} | ${'longest ms'.padStart(11)} | ${'first at'.padStart(9)} |`);
console.log(`|${'-'.repeat(42)}|${'-'.repeat(9)}|${'-'.repeat(11)}|${'-'.repeat(13)}|${'-'.repeat(11)}|`);
for (const [name, a] of [...tasks].sort((x, y) => y[1].max - x[1].max)) {
  console.log(`| ${name.padEnd(40)} | ${(a.n / runs).toFixed(1).padStart(7)} | ${(a.ms / runs).toFixed(1).padStart(9)} | ${a.max.toFixed(1).padStart(11)} | ${a.first.toFixed(0).padStart(9)} |`);
}
