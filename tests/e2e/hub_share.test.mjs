// End-to-end tests of issue #43's page work: a Hub request that hangs, times out, fails or is cancelled keeps the
// answer, the plan, the URL and the history (items 4 and 5); the compact sticky verdict (item 7); Copy link with a
// pasted config.json (item 8); the skip link, the GPU table's header, and axe-core over the new parts.
// Usage: node tests/e2e/hub_share.test.mjs DIST_DIR   (the site built with --public-url /peakplan/)
// Prints one line per test and a closing "N passed, N failed" line; screenshots (p43-*.png) go to tests/e2e/out/.
// The server, the browser, `test` and the helpers are tests/e2e/harness.mjs's (shared with page.test.mjs).
import path from 'node:path';
import { test, bytes, ready, assert, realConfig, routeHub, hubError, axeViolations, out, base, browser, finish }
  from './harness.mjs';

// Hub requests that hang or fail keep the answer (#43 items 4 and 5).
// What the answer column shows, once its limits line is worked out: the verdict's words, the peak, whether the chart
// and the advisor are there.
const answerNow = async page => ({
  settled: await page.waitForFunction(() => {
    const line = document.querySelectorAll('[data-testid="verdict"] p')[1]?.innerText || '';
    return /batch|sequence/i.test(line) && !/working/i.test(line);
  }, null, { timeout: 20000 }).then(() => true),
  verdict: await page.locator('[data-testid="verdict"]').innerText(),
  peak: await bytes(page, 'value-peak'),
  chart: await page.locator('[data-testid="chart"]').count(),
  advisor: await page.locator('[data-testid="advisor"]').count(),
});
const sameAnswer = (a, b, when) => assert(a.verdict === b.verdict && a.peak === b.peak && b.chart === 1 && b.advisor === 1,
  `${when}: the answer changed or went (${JSON.stringify(b)})`);
const PRESET_PLAN = '?model=llama-3.1-8b&method=qlora&r=16&b=2&s=2048&gpu=rtx-4090';
// Types a Hub id into the model box and presses Enter.
async function askHub(page, id) {
  await page.fill('[data-testid="model-filter"]', id);
  await page.press('[data-testid="model-filter"]', 'Enter');
}

await test('#43.4: a Hub request that never answers keeps the previous answer, says so in a polite live region, and Cancel stops it', async page => {
  const asked = await routeHub(page, { 'acme/never': { config: realConfig('llama-2-13b'), hold: new Promise(() => {}) } });
  await page.goto(base + PRESET_PLAN);
  await ready(page);
  await page.locator('[data-testid="advisor"]').waitFor({ timeout: 20000 });
  const before = await answerNow(page); const url = page.url();
  await askHub(page, 'acme/never');
  const loading = page.locator('[data-testid="hub-loading"]');
  await loading.waitFor({ timeout: 10000 });
  assert((await loading.innerText()).includes('Loading acme/never'), `loading: ${await loading.innerText()}`);
  assert(await loading.evaluate(e => e.closest('[aria-live="polite"]') !== null), 'the loading line is in no polite live region');
  assert(await loading.evaluate(e => e.closest('.essentials') !== null), 'the loading line is not beside the model box');
  await page.waitForTimeout(1500);
  sameAnswer(before, await answerNow(page), 'while loading');
  assert(page.url() === url, `the URL moved while loading: ${page.url()}`);
  await page.screenshot({ path: path.join(out, 'p43-hub-hanging.png') });
  await page.click('[data-testid="hub-cancel"]');
  await loading.waitFor({ state: 'detached', timeout: 5000 });
  assert(await hubError(page).count() === 0, 'a cancel over a plan is no error');
  sameAnswer(before, await answerNow(page), 'after Cancel');
  assert(page.url() === url, `the URL moved after Cancel: ${page.url()}`);
  assert(await page.inputValue('[data-testid="model-filter"]') === 'acme/never', 'the typed id was lost');
  assert(asked.some(a => a.path === '/acme/never/resolve/main/config.json'), 'no request was made');
});

await test('#43.4: a link whose Hub model never answers shows loading with Cancel; Cancel says so beside the model box', async page => {
  await routeHub(page, { 'acme/never': { config: realConfig('llama-2-13b'), hold: new Promise(() => {}) } });
  await page.goto(base + '?model=acme/never&method=lora&r=32');
  const loading = page.locator('[data-testid="hub-loading"]');
  await loading.waitFor({ timeout: 20000 });
  assert(await loading.evaluate(e => e.closest('[aria-live="polite"]') !== null), 'the loading line is in no polite live region');
  await page.click('[data-testid="hub-cancel"]');
  await hubError(page).waitFor({ timeout: 5000 });
  const text = await hubError(page).innerText();
  assert(text.includes("Stopped loading acme/never's config.json"), `hub-error: ${text}`);
  assert(await hubError(page).evaluate(e => e.closest('.essentials') !== null), 'hub-error is not beside the model box');
  assert(await page.locator('[data-testid="hub-failed"]').count() === 1, 'the answer column does not point to the message');
  assert(new URL(page.url()).searchParams.get('r') === '32', `URL ${page.url()}`);
});

await test('#43.4: a Hub request past its 30 s is stopped with a clear message, and the previous answer stays', async page => {
  await routeHub(page, { 'acme/never': { config: realConfig('llama-2-13b'), hold: new Promise(() => {}) } });
  await page.clock.install();
  await page.goto(base + PRESET_PLAN);
  await ready(page);
  await page.locator('[data-testid="advisor"]').waitFor({ timeout: 20000 });
  const before = await answerNow(page); const url = page.url();
  await askHub(page, 'acme/never');
  await page.locator('[data-testid="hub-loading"]').waitFor({ timeout: 10000 });
  await page.clock.fastForward(31000);
  await hubError(page).waitFor({ timeout: 10000 });
  const text = await hubError(page).innerText();
  assert(text.includes('did not answer within 30 seconds'), `hub-error: ${text}`);
  sameAnswer(before, await answerNow(page), 'after the timeout');
  assert(page.url() === url, `the URL moved: ${page.url()}`);
});

for (const [name, repo, want] of [
  ['404', null, 'no model acme/x with a config.json at revision main (HTTP 404)'],
  ['401', { config: realConfig('llama-2-13b'), token: 'hf_secret123' }, 'acme/x is gated or private (HTTP 401)'],
  ['offline', { abort: true }, 'Could not reach the Hugging Face Hub for acme/x'],
  ['malformed', { config: '{"model_type": "llama", "hidden_size": 40' }, 'its config.json is not valid JSON'],
]) {
  await test(`#43.5: a Hub failure (${name}) sits beside the model box and keeps the last good plan shown, in the URL and history`, async page => {
    await routeHub(page, repo ? { 'acme/x': repo } : {});
    await page.goto(base + PRESET_PLAN);
    await ready(page);
    await page.locator('[data-testid="advisor"]').waitFor({ timeout: 20000 });
    const before = await answerNow(page); const url = page.url();
    const entries = await page.evaluate(() => history.length);
    await askHub(page, 'acme/x');
    await hubError(page).waitFor({ timeout: 20000 });
    const text = await hubError(page).innerText();
    assert(text.includes(want), `hub-error: ${text}`);
    assert(await hubError(page).evaluate(e => e.closest('.essentials') !== null), 'hub-error is not beside the model box');
    await page.waitForTimeout(300);
    sameAnswer(before, await answerNow(page), 'after the failure');
    assert(page.url() === url, `the URL holds the failed id: ${page.url()}`);
    assert(await page.evaluate(() => history.length) === entries, 'the failure added a history entry');
    assert(await page.inputValue('[data-testid="select-model"]') === 'llama-3.1-8b', 'the model list shows the failed id');
    assert(await page.inputValue('[data-testid="model-filter"]') === 'acme/x', 'the typed id was lost');
    if (name === '404') await page.screenshot({ path: path.join(out, 'p43-hub-404-kept.png') });
    if (name !== '401') return;
    // The gated model with its token: it loads, then the plan, the URL and the history move to it; Back returns.
    await page.fill('[data-testid="hub-token"]', 'hf_secret123');
    await page.click('[data-testid="hub-retry"]');
    await page.waitForFunction(() => new URL(location.href).searchParams.get('model') === 'acme/x', null, { timeout: 20000 });
    await ready(page);
    assert(await bytes(page, 'value-peak') !== before.peak, 'the 13B model gives the 8B peak');
    assert(await hubError(page).count() === 0, 'the error stays after a load');
    await page.goBack();
    await page.waitForFunction(() => new URL(location.href).searchParams.get('model') === 'llama-3.1-8b', null, { timeout: 10000 });
    await ready(page);
    assert(await bytes(page, 'value-peak') === before.peak, 'Back does not give the previous plan back');
  });
}

await test('#43.5: picking a preset after a Hub failure clears its message', async page => {
  await routeHub(page, {});
  await page.goto(base + PRESET_PLAN);
  await ready(page);
  await askHub(page, 'acme/x');
  await hubError(page).waitFor({ timeout: 20000 });
  await page.selectOption('[data-testid="select-model"]', 'mistral-7b');
  await hubError(page).waitFor({ state: 'detached', timeout: 5000 });
  assert(new URL(page.url()).searchParams.get('model') === 'mistral-7b', `URL ${page.url()}`);
});

// The compact verdict (#43 item 7): one line in view while the full verdict is scrolled away, covering no control.
for (const [view, width, height] of [['phone', 390, 844], ['laptop', 1280, 800]]) {
  await test(`#43.7: a compact verdict stays in view at ${width}x${height} and covers no control`, async page => {
    await page.setViewportSize({ width, height });
    await page.goto(base + '?model=llama-3.1-8b&method=qlora&r=16&gpu=rtx-4090');
    await ready(page);
    const compact = page.locator('[data-testid="verdict-compact"]');
    assert(!(await compact.isVisible()), 'the compact verdict shows while the full one is in view');
    // Far enough down for the verdict to leave: on a phone the controls, on a laptop the training settings.
    await page.locator(view === 'phone' ? '[data-testid="slider-seq"]' : '#config-paste summary').scrollIntoViewIfNeeded();
    await page.evaluate(() => window.scrollBy(0, 300));
    await compact.waitFor({ state: 'visible', timeout: 5000 });
    const line = await compact.innerText();
    const full = (await page.locator('[data-testid="verdict"] p.big').textContent()).match(/needs ([\d.]+ [KMGT]iB)/);
    assert(/^Fits: needs /.test(line) && full && line.includes(full[1]), `compact "${line}" against the verdict's ${full && full[1]}`);
    const bar = await compact.boundingBox();
    assert(bar.height < 60, `the compact verdict is ${bar.height}px tall`);
    if (view === 'laptop') {
      const left = await page.locator('.left').boundingBox();
      assert(bar.x >= left.x + left.width, `the bar (x ${bar.x}) reaches over the controls' column (to ${left.x + left.width})`);
    }
    await page.screenshot({ path: path.join(out, `p43-compact-${view}.png`) });
    // Walking the controls by keyboard: every focused control is in view, clear of the bar.
    await page.focus('[data-testid="model-filter"]');
    let checked = 0;
    for (let i = 0; i < 40; i++) {
      await page.keyboard.press('Tab');
      const r = await page.evaluate(() => {
        const e = document.activeElement; const b = document.querySelector('[data-testid="verdict-compact"]');
        if (!e || b.hidden || b.contains(e)) return null;
        const a = e.getBoundingClientRect(), c = b.getBoundingClientRect();
        return { id: e.id || e.dataset.testid || e.tagName, top: a.top, bottom: a.bottom, left: a.left, right: a.right, barBottom: c.bottom, barLeft: c.left, barRight: c.right };
      });
      if (!r) continue;
      checked++;
      const overlaps = r.top < r.barBottom && r.bottom > 0 && r.right > r.barLeft && r.left < r.barRight;
      assert(!overlaps, `the bar covers ${r.id} (top ${r.top}, bar bottom ${r.barBottom})`);
    }
    assert(checked > 5, `only ${checked} controls were walked past with the bar shown`);
    await page.screenshot({ path: path.join(out, `p43-compact-${view}-focus.png`) });
    await compact.locator('button').click();
    await compact.waitFor({ state: 'hidden', timeout: 5000 });
    assert(await page.locator('[data-testid="verdict"]').isVisible(), 'the button does not bring the verdict back');
  });
}

// A pasted config.json and the link (#43 item 8).
async function paste(page, config) {
  await page.click('#config-paste summary');
  await page.fill('[data-testid="config-input"]', JSON.stringify(config));
  await page.click('[data-testid="config-apply"]');
  await page.waitForTimeout(200);
}

await test('#43.8: with a pasted config.json that is no preset, Copy link says plainly that the link cannot hold it', async page => {
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write']);
  await page.goto(base + '?model=llama-3.1-8b&method=lora&r=32');
  await ready(page);
  const preset = await bytes(page, 'value-peak');
  await paste(page, { ...realConfig('llama-2-13b'), num_hidden_layers: 41 });
  assert(await bytes(page, 'value-peak') > preset, 'the pasted config was not planned');
  const note = await page.locator('[data-testid="link-note"]').innerText();
  assert(note.includes('cannot hold the pasted config.json') && note.includes('Llama 3.1 8B'), `note: ${note}`);
  await page.click('[data-testid="copy-link"]');
  const said = await page.locator('[data-testid="share-status"]').innerText();
  assert(said.includes('without the pasted config.json') && said.includes('reopens with Llama 3.1 8B'), `status: ${said}`);
  const link = await page.evaluate(() => navigator.clipboard.readText());
  assert(new URL(link).searchParams.get('model') === 'llama-3.1-8b' && new URL(link).searchParams.get('r') === '32', `link ${link}`);
  await page.locator('.share').screenshot({ path: path.join(out, 'p43-pasted-link.png') });
});

await test('#43.8: with a pasted config.json that is a preset\'s, the copied link names the preset and reopens to the same figures', async page => {
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write']);
  await page.goto(base + '?model=llama-3.1-8b&method=lora&r=32&b=2');
  await ready(page);
  await paste(page, realConfig('llama-2-13b'));
  const peak = await bytes(page, 'value-peak');
  assert((await page.locator('[data-testid="link-note"]').innerText()).includes('Llama 2 13B'), 'the note names no preset');
  await page.click('[data-testid="copy-link"]');
  const said = await page.locator('[data-testid="share-status"]').innerText();
  assert(said.includes('Llama 2 13B preset'), `status: ${said}`);
  const link = await page.evaluate(() => navigator.clipboard.readText());
  assert(new URL(link).searchParams.get('model') === 'llama-2-13b', `link ${link}`);
  const again = await browser.newPage(); await again.goto(link); await ready(again);
  const p2 = await bytes(again, 'value-peak'); await again.close();
  assert(p2 === peak, `the link reopens at ${p2}, the pasted plan is ${peak}`);
});

// The skip link and the GPU table's header (#43, accessibility).
await test('#43: a skip link is the first Tab stop and brings Copy link within a few', async page => {
  await page.goto(base + '?model=llama-3.1-8b&method=qlora');
  await ready(page);
  await page.keyboard.press('Tab');
  assert(await page.evaluate(() => document.activeElement?.dataset.testid) === 'skip-link', 'the first Tab stop is not the skip link');
  assert(await page.locator('[data-testid="skip-link"]').isVisible(), 'the focused skip link is not visible');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.activeElement?.id === 'answer', null, { timeout: 5000 });
  assert(!page.url().includes('#'), `the skip link wrote a fragment: ${page.url()}`);
  let stops = 0;
  while (stops < 10 && await page.evaluate(() => document.activeElement?.dataset.testid) !== 'copy-link') { await page.keyboard.press('Tab'); stops++; }
  assert(stops < 10, 'Copy link is more than 10 Tab stops past the skip link');
});

await test('#43: every header of the GPU table names its column', async page => {
  await page.goto(base + '?model=llama-3.1-8b&method=qlora');
  await ready(page);
  await page.click('[data-testid="gpu-table-summary"]');
  await page.waitForSelector('[data-testid="gpu-table"] th');
  const heads = await page.locator('[data-testid="gpu-table"] th').allInnerTexts();
  assert(heads.length >= 7 && heads.every(h => h.trim() !== ''), `headers: ${JSON.stringify(heads)}`);
});

// The new parts pass axe-core too: the Hub error and the loading line beside the model box, the compact verdict.
for (const scheme of ['light', 'dark']) {
  await test(`#43: no serious or critical axe-core violation with a Hub error and the compact verdict shown, phone, ${scheme}`, async page => {
    await routeHub(page, { 'acme/never': { config: realConfig('llama-2-13b'), hold: new Promise(() => {}) } });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.emulateMedia({ colorScheme: scheme });
    await page.goto(base + PRESET_PLAN);
    await ready(page);
    const audit = () => axeViolations(page);
    await askHub(page, 'acme/never');
    await page.locator('[data-testid="hub-loading"]').waitFor({ timeout: 10000 });
    let found = await audit();
    assert(found.length === 0, 'loading: ' + found.join('; '));
    await page.click('[data-testid="hub-cancel"]');
    await askHub(page, 'acme/x');
    await hubError(page).waitFor({ timeout: 20000 });
    await hubError(page).scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(out, `p43-hub-error-phone-${scheme}.png`) });
    await page.locator('[data-testid="slider-seq"]').scrollIntoViewIfNeeded();
    await page.evaluate(() => window.scrollBy(0, 300));
    await page.locator('[data-testid="verdict-compact"]').waitFor({ state: 'visible', timeout: 5000 });
    found = await audit();
    assert(found.length === 0, 'error and compact verdict: ' + found.join('; '));
    await page.screenshot({ path: path.join(out, `p43-axe-phone-${scheme}.png`) });
  });
}

// #43 item 1: what the verdict says a plan needs is the smallest card its step runs on, never rising as GPUs are
// added (Llama 3.1 70B full under ZeRO-3 once read 107, 102, then 79.5 GiB at 17, 18 and 19 H100s), and a plan within
// 3% of its card says it is tight.
for (const shard of ['deepspeed', 'fsdp1']) {
  await test(`the needs figure never rises with more GPUs (${shard}) and a nearly full card is tight`, async page => {
    let last = Infinity;
    const seen = [];
    for (const gpus of [16, 17, 18, 19, 20, 24]) {
      await page.goto(base + `?model=llama-3.1-70b&method=full&zero=3&shard=${shard}&gpu=h100-80gb&gpus=${gpus}`);
      await ready(page);
      // The smallest card is worked out once the plan settles (a few replays); until then the card's figure.
      await page.waitForSelector('[data-testid="verdict"][data-needs-bytes]', { timeout: 20000 });
      const verdict = page.locator('[data-testid="verdict"]');
      const needs = Number(await verdict.getAttribute('data-needs-bytes'));
      const words = await verdict.innerText();
      seen.push(`${gpus}: ${(needs / 2 ** 30).toFixed(1)} GiB`);
      assert(needs > 0 && needs <= last, `needs rose: ${seen.join(', ')}`);
      assert(words.includes(`needs ${(needs / 2 ** 30).toFixed(1)} GiB`), `the words say another figure: ${words}`);
      const fraction = needs / (79.6 * 2 ** 30);
      if (/^Fits/.test(words)) assert(/tightly/.test(words) === fraction > 0.97, `${gpus} GPUs: ${words}`);
      last = needs;
    }
    if (shard === 'deepspeed') {
      // 18 GPUs stepping the optimizer in sub-groups of 5 x 10^8 elements fit with 2% to spare.
      await page.goto(base + '?model=llama-3.1-70b&method=full&zero=3&shard=deepspeed&gpu=h100-80gb&gpus=18&ds_sub=500000000');
      await ready(page);
      await page.waitForSelector('[data-testid="verdict"][data-needs-bytes]', { timeout: 20000 });
      const words = await page.locator('[data-testid="verdict"]').innerText();
      assert(/^Fits, tightly: needs 78\.\d GiB per GPU/.test(words), words);
      await page.screenshot({ path: path.join(out, 'p43-tight.png') });
    }
  });
}

await finish();
