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

await test('longer sequences cut or dropped: the select writes ltrunc, allocated stays, and the link opens with it', async page => {
  // ms-swift's benchmark dataset (3,234 +- 2,548 tokens) at L = 2,048, batch size 1.
  const swift = '?model=qwen2.5-7b&method=lora&b=1&s=2048&lens=padded&lmean=3234&lsd=2548&gpu=a100-80gb';
  await page.goto(base + swift);
  await ready(page);
  assert(await page.locator('[data-testid="select-ltrunc"]').inputValue() === 'cut', 'ltrunc not cut by default');
  const [allocated, reserved] = [await bytes(page, 'value-allocated'), await bytes(page, 'value-reserved')];
  await page.selectOption('[data-testid="select-ltrunc"]', 'drop');
  await urlHas(page, 'ltrunc', 'drop');
  await page.waitForFunction(v => Number(document.querySelector('[data-testid="value-reserved"]').getAttribute('data-bytes')) !== v,
    reserved, { timeout: 10000 });
  assert(await bytes(page, 'value-allocated') === allocated, 'allocated moved with ltrunc');
  const dropped = await bytes(page, 'value-reserved');
  await page.goto(base + swift + '&ltrunc=drop');
  await ready(page);
  assert(await page.locator('[data-testid="select-ltrunc"]').inputValue() === 'drop', 'the link did not open with drop');
  assert(await bytes(page, 'value-reserved') === dropped, 'the link opens with other figures');
  // Off where every batch is b x s, as the boxes are.
  await page.goto(base + PLAN);
  await ready(page);
  assert(await page.locator('[data-testid="select-ltrunc"]').isDisabled(), 'ltrunc is on under fixed lengths');
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

await test('the allocator\'s segments at the peak: in use is the peak allocated figure, the segments what is reserved', async page => {
  await page.goto(base + PLAN + '&lens=padded&lmean=300&lsd=200');
  await ready(page);
  const allocated = await bytes(page, 'value-allocated');
  const reserved = await bytes(page, 'value-reserved');
  await page.locator('[data-testid="segments"] summary').click();
  const summary = page.locator('[data-testid="segments-summary"][data-in-use-bytes]');
  await summary.waitFor({ timeout: 30000 });
  const inUse = Number(await summary.getAttribute('data-in-use-bytes'));
  const held = Number(await summary.getAttribute('data-reserved-bytes'));
  const free = Number(await summary.getAttribute('data-free-bytes'));
  assert(inUse === allocated, `in use ${inUse}, peak allocated ${allocated}`);
  assert(held >= inUse && held <= reserved, `segments hold ${held}, reserved ${reserved}`);
  assert(free === held - inUse, 'free is not reserved less in use');
  assert(await page.locator('[data-testid="segments"] .seg').count() > 1, 'no segment bars');
  assert((await summary.innerText()).includes('cached but free'), 'summary words');
  // A plan change redraws it for the new plan.
  await type(page, 'lmean', '600');
  await urlHas(page, 'lmean', '600');
  await page.waitForFunction(v => {
    const s = document.querySelector('[data-testid="segments-summary"][data-in-use-bytes]');
    return s && Number(s.getAttribute('data-in-use-bytes')) === v;
  }, await bytes(page, 'value-allocated'), { timeout: 30000 });
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.locator('[data-testid="segments"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(out, 'p45-segments-laptop.png') });
  const violations = await axeViolations(page);
  assert(violations.length === 0, violations.join('; '));
});

await test('a dataset\'s token lengths pasted become the plan\'s statistics; bad input is said and kept', async page => {
  await page.goto(base + PLAN.replace('s=4096', 's=2048'));
  await ready(page);
  await page.locator('details.dataset-lengths summary').click();
  const box = page.locator('[data-testid="dataset-lengths"]');
  await box.fill('120, 80, 3x, 400');
  await page.click('[data-testid="dataset-lengths-apply"]');
  const said = page.locator('[data-testid="dataset-lengths-said"]');
  await said.waitFor({ timeout: 5000 });
  assert((await said.innerText()).includes('entry 3 (`3x`) is not a whole number of tokens'), await said.innerText());
  assert(await box.inputValue() === '120, 80, 3x, 400', 'the pasted text was lost');
  await urlHas(page, 'lens', null);
  // Whole counts: padded batches with their mean, deviation and longest (cut to s).
  await box.fill('[100, 200, 300, 400, 500, 600, 3000]');
  await page.click('[data-testid="dataset-lengths-apply"]');
  await urlHas(page, 'lens', 'padded');
  await urlHas(page, 'lmean', '729');
  await urlHas(page, 'lmax', '2048');
  const line = await said.innerText();
  assert(line.includes('7 sequences: mean 729') && line.includes('cut to s = 2048'), line);
  assert(await page.locator('[data-testid="num-lmean"]').inputValue() === '729', 'the mean box');
});

await test('a slider drag on a varying plan: every bar ends at the figures the link opens with', async page => {
  // Each move estimates the plan's own method at once and fills the other two bars a task later each
  // (src/methods.rs); once the drag stops, all three are the new plan's.
  const plan = PLAN.replace('b=8&s=4096&gpu=a100-80gb', 'b=4&s=2048&gpu=rtx-4090') + '&lens=grouped&lmean=300&lsd=200&gc=1';
  await page.goto(base + plan);
  await ready(page);
  const aria = () => page.locator('[data-testid="chart"]').getAttribute('aria-label');
  const before = await aria();
  await page.locator('[data-testid="slider-seq"]').evaluate(async s => {
    for (let i = 0; i < 6; i++) {
      s.value = String(Number(s.value) - 1);
      s.dispatchEvent(new Event('input', { bubbles: true }));
      await new Promise(r => requestAnimationFrame(() => r()));
    }
  });
  await page.waitForTimeout(1500);
  const moved = await aria();
  assert(moved !== before, `the drag changed no bar: ${moved}`);
  const link = page.url();
  assert(!link.includes('s=2048'), `the link kept s=2048: ${link}`);
  await page.goto(link);
  await ready(page);
  const opened = await aria();
  assert(moved === opened, `after the drag: ${moved}; the link opens with: ${opened}`);
});

await test('a drag finds the plans it showed and the positions made ahead: their figures are the links', async page => {
  // The page keeps recent plans' estimates and makes the sliders' neighbouring positions in tasks of their own
  // (src/methods.rs): once the plan has settled, and after each move. A drag on or back estimates nothing.
  const plan = PLAN.replace('b=8&s=4096&gpu=a100-80gb', 'b=4&s=2048&gpu=rtx-4090') + '&lens=grouped&lmean=300&lsd=200&gc=1';
  await page.goto(base + plan);
  await ready(page);
  // The settled plan's neighbours: 1024 and 4096 tokens, batches of 3 and 5.
  await page.waitForFunction(() => (window.__peakplanTasks || []).filter(([n]) => n === 'neighbour').length >= 4,
    null, { timeout: 10000 }).catch(() => assert(false, 'the settled plan had no neighbours made'));
  const peaks = await page.locator('[data-testid="slider-seq"]').evaluate(async s => {
    window.__peakplanTimings = [];
    window.__peakplanColdTimings = [];
    const peaks = [];
    const neighbours = () => (window.__peakplanTasks || []).filter(([name]) => name === 'neighbour').length;
    // Down three positions, then back up: 2048 -> 256 -> 2048. After each move, the next waits for that move's
    // neighbour task (or 2 s), as a reader's next move comes after the frame the last one painted.
    let waited = 0;
    for (const d of [-1, -1, -1, 1, 1, 1]) {
      const before = neighbours();
      s.value = String(Number(s.value) + d);
      s.dispatchEvent(new Event('input', { bubbles: true }));
      const t0 = performance.now();
      while (neighbours() === before && performance.now() - t0 < 2000) await new Promise(r => setTimeout(r, 5));
      if (neighbours() === before) waited++;
      await new Promise(r => requestAnimationFrame(() => r()));
      peaks.push([s.dataset.value, document.querySelector('[data-testid="value-peak"]').dataset.bytes]);
    }
    return { peaks, waited, moves: window.__peakplanTimings.length, cold: window.__peakplanColdTimings.length };
  });
  assert(peaks.moves === 6, `moves timed: ${peaks.moves}`);
  assert(peaks.waited === 0, `moves after which no neighbour task ran: ${peaks.waited} of 6`);
  assert(peaks.cold === 0, `moves that estimated: ${peaks.cold} of 6 (none should)`);
  // Every position the drag showed (1024, 512, 256, 512 again, 1024 again, 2048): the figure its link opens with.
  const opened = new Map();
  for (const [s, bytes] of peaks.peaks) {
    if (!opened.has(s)) {
      await page.goto(base + plan.replace('s=2048', `s=${s}`));
      await ready(page);
      opened.set(s, await page.locator('[data-testid="value-peak"]').getAttribute('data-bytes'));
    }
    assert(opened.get(s) === bytes, `s=${s}: the drag showed ${bytes}, the link opens with ${opened.get(s)}`);
  }
});

await test('a first move of the batch or rank slider shows figures made once the plan settled', async page => {
  const plan = PLAN.replace('b=8&s=4096&gpu=a100-80gb', 'b=4&s=2048&gpu=rtx-4090') + '&lens=grouped&lmean=300&lsd=200&gc=1';
  for (const [id, key] of [['slider-batch', 'b'], ['slider-rank', 'r']]) {
    await page.goto(base + plan);
    await ready(page);
    // Six neighbours: the sequence's, the batch's and the rank's, below and above.
    await page.waitForFunction(() => (window.__peakplanTasks || []).filter(([n]) => n === 'neighbour').length >= 6,
      null, { timeout: 10000 }).catch(() => assert(false, 'the settled plan had not its six neighbours made'));
    const moved = await page.locator(`[data-testid="${id}"]`).evaluate(async s => {
      window.__peakplanColdTimings = [];
      s.value = String(Number(s.value) + 1);
      s.dispatchEvent(new Event('input', { bubbles: true }));
      await new Promise(r => requestAnimationFrame(() => r()));
      return { value: s.dataset.value, cold: window.__peakplanColdTimings.length,
        bytes: document.querySelector('[data-testid="value-peak"]').dataset.bytes };
    });
    assert(moved.cold === 0, `${key}=${moved.value}: the move estimated`);
    await page.goto(base + (key === 'b' ? plan.replace('b=4', `b=${moved.value}`) : plan + `&r=${moved.value}`));
    await ready(page);
    const opened = await page.locator('[data-testid="value-peak"]').getAttribute('data-bytes');
    assert(opened === moved.bytes, `${key}=${moved.value}: the move showed ${moved.bytes}, the link opens with ${opened}`);
  }
});

await test('an embedded chart, which has no sliders, makes no neighbouring positions ahead', async page => {
  const plan = PLAN.replace('b=8&s=4096&gpu=a100-80gb', 'b=4&s=2048&gpu=rtx-4090') + '&lens=grouped&lmean=300&lsd=200&gc=1';
  await page.goto(base + plan + '&embed=1');
  await page.waitForSelector('[data-testid="embed-caption"]');
  await page.waitForTimeout(1500);
  const made = await page.evaluate(() => (window.__peakplanTasks || []).filter(([n]) => n.startsWith('neighbour')).length);
  assert(made === 0, `neighbour tasks in the embed: ${made}`);
  // The planner's page, the same time after opening, has them (the test above waits for them).
  await page.goto(base + plan);
  await ready(page);
  await page.waitForTimeout(1500);
  const planner = await page.evaluate(() => (window.__peakplanTasks || []).filter(([n]) => n === 'neighbour').length);
  assert(planner >= 4, `neighbour tasks on the planner: ${planner}`);
});

await test('Download SVG right after a slider move holds every bar at the new value', async page => {
  // The bars a move has not estimated yet (src/methods.rs) are made for the file: it never keeps the earlier value's.
  const plan = PLAN.replace('b=8&s=4096&gpu=a100-80gb', 'b=4&s=2048&gpu=rtx-4090') + '&lens=grouped&lmean=300&lsd=200&gc=1';
  await page.goto(base + plan);
  await ready(page);
  const before = await page.locator('[data-testid="chart"]').getAttribute('aria-label');
  const [dl] = await Promise.all([page.waitForEvent('download'), page.evaluate(() => {
    const s = document.querySelector('[data-testid="slider-seq"]');
    s.value = String(Number(s.value) + 1);
    s.dispatchEvent(new Event('input', { bubbles: true }));
    document.querySelector('[data-testid="download-svg"]').click();
  })]);
  const file = path.join(out, 'p45-moved.svg'); await dl.saveAs(file);
  const svg = (await import('node:fs')).readFileSync(file, 'utf8');
  await page.waitForTimeout(1000);
  const link = page.url();
  await page.goto(link);
  await ready(page);
  const aria = await page.locator('[data-testid="chart"]').getAttribute('aria-label');
  const lines = svg.split('\n').map(l => l.trim());
  for (const [, bar, total] of aria.matchAll(/(Full|LoRA|QLoRA): ([0-9.]+ [KMGT]?i?B)/g)) {
    assert(lines.includes(total), `the SVG lacks ${bar}'s ${total} (the link's page: ${aria})`);
  }
  for (const [, bar, total] of before.matchAll(/(Full|LoRA|QLoRA): ([0-9.]+ [KMGT]?i?B)/g)) {
    assert(aria.includes(`${bar}: ${total}`) || !lines.includes(total), `the SVG keeps ${bar}'s earlier ${total}`);
  }
});

await finish();
