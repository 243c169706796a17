// End-to-end tests of batches of varying length on the page (#45): the batch-lengths select and its three boxes,
// the link they write, and one accounting engine: what is allocated is the longest batch's, exactly the
// fixed-length plan of that many tokens.
// Usage: node tests/e2e/lengths.test.mjs DIST_DIR   (the site built with --public-url /peakplan/)
// Prints one line per test and a closing "N passed, N failed" line; screenshots (p45-*.png) go to tests/e2e/out/.
import path from 'node:path';
import { test, bytes, ready, assert, axeViolations, out, base, finish, urlHas, typeNumber as type } from './harness.mjs';

const PLAN = '?model=llama-3.1-8b&method=lora&b=8&s=4096&gpu=a100-80gb';

await test('padded batches: the boxes open, the link holds the lengths, and allocated memory is the longest batch\'s', async page => {
  // The fixed plan of 1,024 tokens, for its allocated figure.
  await page.goto(base + PLAN.replace('s=4096', 's=1024'));
  await ready(page);
  const fixed1024 = await bytes(page, 'value-allocated');
  await page.goto(base + PLAN);
  await ready(page);
  const allocated = await bytes(page, 'value-allocated');
  // Off under fixed lengths, saying why; the placeholders give the auto values.
  assert(await page.locator('[data-testid="num-lmean"]').isDisabled(), 'the mean box is on under fixed lengths');
  await page.selectOption('[data-testid="select-lens"]', 'padded');
  await urlHas(page, 'lens', 'padded');
  assert(!await page.locator('[data-testid="num-lmean"]').isDisabled(), 'the mean box stays off');
  assert(await page.locator('[data-testid="num-lmax"]').getAttribute('placeholder') === 'auto (4096)', 'lmax placeholder');
  assert(await page.locator('[data-testid="num-lmean"]').getAttribute('placeholder') === 'auto (2048)', 'lmean placeholder');
  await type(page, 'lmean', '300');
  await urlHas(page, 'lmean', '300');
  // The longest batch is s tokens: allocated as the fixed plan.
  assert(await bytes(page, 'value-allocated') === allocated, 'allocated moved with the mean');
  await type(page, 'lmax', '1024');
  await urlHas(page, 'lmax', '1024');
  await page.waitForFunction(v => Number(document.querySelector('[data-testid="value-allocated"]').getAttribute('data-bytes')) === v,
    fixed1024, { timeout: 10000 });
  // A longest sequence beyond s is refused with the core's words and goes back to auto, as in a link.
  await type(page, 'lmax', '9000');
  await page.locator('[data-testid="url-error"]').waitFor({ timeout: 5000 });
  const banner = await page.locator('[data-testid="url-error"]').innerText();
  assert(banner.includes('lmax=9000 is longer than s=4096'), `banner: ${banner}`);
  await urlHas(page, 'lmax', null);
  // An emptied box is auto again.
  await type(page, 'lmax', '2048');
  await urlHas(page, 'lmax', '2048');
  await type(page, 'lmax', '');
  await urlHas(page, 'lmax', null);
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.locator('[data-testid="select-lens"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(out, 'p45-lengths-laptop.png') });
  const violations = await axeViolations(page);
  assert(violations.length === 0, violations.join('; '));
});

await test('a link with varying lengths opens with them, and packed batches are the fixed plan', async page => {
  await page.goto(base + PLAN + '&lens=grouped&lmean=500&lsd=100&lmax=2048');
  await ready(page);
  assert(await page.locator('[data-testid="select-lens"]').inputValue() === 'grouped', 'lens not grouped');
  assert(await page.locator('[data-testid="num-lmean"]').inputValue() === '500', 'lmean not shown');
  assert(await page.locator('[data-testid="num-lsd"]').inputValue() === '100', 'lsd not shown');
  await page.goto(base + PLAN);
  await ready(page);
  const fixed = await bytes(page, 'value-peak');
  await page.goto(base + PLAN + '&lens=packed');
  await ready(page);
  assert(await bytes(page, 'value-peak') === fixed, 'packed differs from fixed');
});

await test('max_split_size_mb: the box writes msplit and the replay takes it', async page => {
  // Qwen2.5-7B QLoRA b=2 s=4096 on a 4090: 16 MiB less reserved with max_split_size_mb:128 (core test).
  const Q = '?model=qwen2.5-7b&method=qlora&b=2&s=4096&gpu=rtx-4090';
  await page.goto(base + Q + '&msplit=128');
  await ready(page);
  const split = await bytes(page, 'value-reserved');
  assert(await page.locator('[data-testid="num-msplit"]').inputValue() === '128', 'msplit not shown');
  await page.goto(base + Q);
  await ready(page);
  const plain = await bytes(page, 'value-reserved');
  assert(split < plain, `reserved with msplit=128 ${split}, without ${plain}`);
  assert(await page.locator('[data-testid="num-msplit"]').getAttribute('placeholder') === 'auto (no limit)', 'placeholder');
  await type(page, 'msplit', '128');
  await urlHas(page, 'msplit', '128');
  await page.waitForFunction(v => Number(document.querySelector('[data-testid="value-reserved"]').getAttribute('data-bytes')) === v,
    split, { timeout: 10000 });
  // PyTorch refuses 20 MiB and less: said with the core's words, the plan kept.
  await type(page, 'msplit', '20');
  await page.locator('[data-testid="url-error"]').waitFor({ timeout: 5000 });
  const banner = await page.locator('[data-testid="url-error"]').innerText();
  assert(banner.includes('msplit=20 is out of range'), `banner: ${banner}`);
  await urlHas(page, 'msplit', '128');
});

await finish();
