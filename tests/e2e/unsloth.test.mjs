// End-to-end tests of the Unsloth profile on the page (#42): the framework selector offers it and moves the keys
// Unsloth decides, a link naming it opens with its defaults, its offloaded checkpoints show their host memory
// beside the GPU's, and the keys it does not run are refused with the core's words.
// Usage: node tests/e2e/unsloth.test.mjs DIST_DIR   (the site built with --public-url /peakplan/)
// Prints one line per test and a closing "N passed, N failed" line; screenshots (p42-*.png) go to tests/e2e/out/.
import path from 'node:path';
import { test, bytes, ready, assert, axeViolations, out, base, finish, param, urlHas } from './harness.mjs';

const PLAN = '?model=llama-3.1-8b&method=qlora&r=16&targets=all-linear&b=2&s=2048';
const value = (page, key) => page.locator(`[data-testid="select-${key}"]`).inputValue();

await test('a link naming Unsloth opens with its defaults, its host memory and its reload buffers', async page => {
  await page.goto(base + PLAN + '&fw=unsloth');
  await ready(page);
  assert(await value(page, 'fw') === 'unsloth', `fw: ${await value(page, 'fw')}`);
  const got = [await value(page, 'gc'), await value(page, 'loss'), await value(page, 'opt'), await value(page, 'alloc')];
  assert(got.join(',') === 'offload,fused,adamw_8bit,expandable', `defaults: ${got}`);
  // 31 layer inputs of 2 x 2048 x 4096 x 2 B on the host, and the 169 staging buffers no layer grew (256 KiB each).
  const host = await bytes(page, 'value-host');
  assert(host === 31 * 2 * 2048 * 4096 * 2 + 169 * 128 * 1024 * 2, `host: ${host}`);
  assert((await page.locator('[data-testid="value-host"]').innerText()).includes('pinned CPU memory'), 'host label');
  // No logits: the fused loss is a component of its own.
  const fused = page.locator('[data-testid="component-fused_loss"]');
  assert(Number(await fused.getAttribute('data-bytes')) > 0, 'no fused-loss row');
  const logits = page.locator('[data-testid="component-logits"]');
  assert(await logits.count() === 0 || Number(await logits.getAttribute('data-bytes')) === 0, 'a logits row under Unsloth');
  const reload = page.locator('[data-testid="component-reload_buffers"]');
  assert(Number(await reload.getAttribute('data-bytes')) === 2 * 2 * 2048 * 4096 * 2, 'reload buffers');
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.screenshot({ path: path.join(out, 'p42-unsloth-laptop.png') });
  await page.locator('[data-testid="value-host"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(out, 'p42-unsloth-figures-laptop.png') });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: path.join(out, 'p42-unsloth-phone.png') });
  const violations = await axeViolations(page);
  assert(violations.length === 0, violations.join('; '));
});

await test('choosing Unsloth moves its keys and lowers the peak; choosing the Trainer again moves them back', async page => {
  await page.goto(base + PLAN + '&fw=hf');
  await ready(page);
  const before = await bytes(page, 'value-peak');
  assert(await page.locator('[data-testid="value-host"]').count() === 0, 'a host figure under fw=hf');
  await page.selectOption('[data-testid="select-fw"]', 'unsloth');
  await urlHas(page, 'fw', 'unsloth');
  for (const [k, v] of [['gc', 'offload'], ['loss', 'fused'], ['opt', 'adamw_8bit'], ['alloc', 'expandable']]) {
    await urlHas(page, k, v);
  }
  await page.waitForSelector('[data-testid="value-host"]', { timeout: 10000 });
  const after = await bytes(page, 'value-peak');
  assert(after < before * 0.75, `peak ${before} -> ${after}`);
  await page.selectOption('[data-testid="select-fw"]', 'hf');
  await urlHas(page, 'gc', '1');
  assert(param(page, 'loss') === 'standard' && param(page, 'opt') === 'adamw_torch' && param(page, 'alloc') === null,
    `back under hf: ${page.url()}`);
  assert(await bytes(page, 'value-peak') === before, 'the Trainer plan did not come back');
});

await test('a loss Unsloth does not run is refused with the core\'s words, and offloading is Unsloth\'s only', async page => {
  await page.goto(base + PLAN + '&fw=unsloth');
  await ready(page);
  await page.selectOption('[data-testid="select-loss"]', 'standard');
  await page.locator('[data-testid="url-error"]').waitFor({ timeout: 5000 });
  const banner = await page.locator('[data-testid="url-error"]').innerText();
  assert(banner.includes('loss=standard is not a loss fw=unsloth runs'), `banner: ${banner}`);
  assert(await value(page, 'loss') === 'fused' && param(page, 'loss') === 'fused', `loss: ${page.url()}`);
  // A link asking for offloaded checkpoints under the Trainer gets plain ones, and the reason.
  await page.goto(base + PLAN + '&fw=hf&gc=offload');
  await ready(page);
  const said = await page.locator('[data-testid="url-error"]').innerText();
  assert(said.includes('gc=offload is Unsloth'), `banner: ${said}`);
  assert(await value(page, 'gc') === '1', 'gc not back to on');
});

await finish();
