// End-to-end tests of preference tasks on the page (#41 step 3): the task selector beside the method, the reference
// source and prompt length under a preference task, the reference's components and its pass in the timeline, the
// advisor's precomputed-reference card, a bad task in a link, ORPO and SimPO (no reference, the full logits), and
// the embed's level-one heading (#43).
// Usage: node tests/e2e/tasks.test.mjs DIST_DIR   (the site built with --public-url /peakplan/)
// Prints one line per test and a closing "N passed, N failed" line; screenshots (p41-*.png) go to tests/e2e/out/.
// The server, the browser, `test` and the helpers are tests/e2e/harness.mjs's.
import path from 'node:path';
import { test, bytes, ready, assert, axeViolations, out, base, finish, param, urlHas } from './harness.mjs';

const DPO = '?task=dpo&method=full&model=llama-3.2-1b&b=2&s=1024';
const peakChanges = (page, from) => page.waitForFunction(from => Number(document.querySelector(
  '[data-testid="value-peak"]').getAttribute('data-bytes')) !== from, from, { timeout: 10000 });
const component = (page, key) => page.locator(`[data-testid="component-${key}"]`);

await test('a DPO link shows the task selector at dpo, the reference and prompt controls, the reference weights and the reference pass', async page => {
  await page.goto(base + DPO);
  await ready(page);
  const task = page.locator('[data-testid="task"]');
  assert(await task.inputValue() === 'dpo', `task: ${await task.inputValue()}`);
  const options = await task.locator('option').evaluateAll(os => os.map(o => o.value));
  assert(options.join(',') === 'sft,dpo,orpo,simpo,cpo,kto,grpo', `task options: ${options}`);
  // The selector sits beside the method, in the plan's essentials.
  assert(await task.evaluate(e => e.closest('.essentials') !== null), 'the task selector is not among the essentials');
  assert(await page.locator('[data-testid="ref"]').inputValue() === 'auto', 'ref not auto');
  const refOptions = await page.locator('[data-testid="ref"] option').evaluateAll(os => os.map(o => o.value));
  assert(refOptions.join(',') === 'auto,model,adapters_off,precomputed,none', `ref options: ${refOptions}`);
  const prompt = page.locator('[data-testid="prompt"]');
  assert(await prompt.inputValue() === '512' && await prompt.getAttribute('max') === '1023', `prompt box: ${await prompt.inputValue()} max ${await prompt.getAttribute('max')}`);
  assert(await page.locator('[data-testid="prompt-auto"]').isChecked(), 'prompt not auto');
  // The reference copy and the reference forward are components of their own, with their formulas.
  for (const key of ['reference_weights', 'reference_pass', 'paired_batch', 'log_probs']) {
    const row = component(page, key);
    assert(await row.count() === 1 && Number(await row.getAttribute('data-bytes')) > 0, `no ${key} row`);
  }
  assert((await component(page, 'reference_weights').innerText()).includes('second copy'), 'reference weights formula');
  // 1.24 B parameters in 16-bit: the copy is at least 2 bytes a parameter.
  assert(Number(await component(page, 'reference_weights').getAttribute('data-bytes')) > 2.4e9, 'reference copy too small');
  const timeline = await page.locator('[data-testid="timeline"]').getAttribute('aria-label');
  assert(/end of forward .*reference pass .*backward/.test(timeline), `timeline: ${timeline}`);
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.screenshot({ path: path.join(out, 'p41-dpo-laptop.png') });
  await page.locator('[data-testid="timeline"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(out, 'p41-dpo-timeline-laptop.png') });
});

await test('an SFT plan hides the reference and prompt controls, and its timeline has no reference pass', async page => {
  await page.goto(base + '?method=full&model=llama-3.2-1b&b=2&s=1024');
  await ready(page);
  assert(await page.locator('[data-testid="task"]').inputValue() === 'sft', 'task not sft');
  assert(await page.locator('[data-testid="ref"]').count() === 0 && await page.locator('[data-testid="prompt"]').count() === 0,
    'reference or prompt controls under SFT');
  assert(await component(page, 'reference_weights').count() === 0, 'a reference copy under SFT');
  const timeline = await page.locator('[data-testid="timeline"]').getAttribute('aria-label');
  assert(!timeline.includes('reference pass'), `timeline: ${timeline}`);
});

await test('switching the task in the selector moves the URL and the figure', async page => {
  await page.goto(base + DPO);
  await ready(page);
  const dpo = await bytes(page, 'value-peak');
  await page.selectOption('[data-testid="task"]', 'sft');
  await peakChanges(page, dpo);
  await urlHas(page, 'task', null);
  const sft = await bytes(page, 'value-peak');
  assert(sft < dpo, `SFT ${sft} not below DPO ${dpo}`);
  assert(await page.locator('[data-testid="ref"]').count() === 0, 'the reference control stayed under SFT');
  await page.selectOption('[data-testid="task"]', 'kto');
  await peakChanges(page, sft);
  await urlHas(page, 'task', 'kto');
  assert(await bytes(page, 'value-peak') > sft, 'KTO not above SFT');
  assert(param(page, 'model') === 'llama-3.2-1b' && param(page, 's') === '1024', `other keys lost: ${page.url()}`);
  // Back restores the plan the URL held.
  await page.goBack();
  await page.waitForFunction(() => document.querySelector('[data-testid="task"]').value !== 'kto', null, { timeout: 10000 });
});

await test('ORPO and SimPO from the selector: no reference control or components, the full logits, the prompt box kept', async page => {
  await page.goto(base + DPO);
  await ready(page);
  const dpo = await bytes(page, 'value-peak');
  await page.selectOption('[data-testid="task"]', 'orpo');
  await peakChanges(page, dpo);
  await urlHas(page, 'task', 'orpo');
  // No reference: its selector goes, and so do its copy and its pass; the prompt box stays (max_prompt_length).
  assert(await page.locator('[data-testid="ref"]').count() === 0, 'a reference control under ORPO');
  assert(await page.locator('[data-testid="prompt"]').count() === 1, 'no prompt box under ORPO');
  for (const key of ['reference_weights', 'reference_pass', 'log_probs']) {
    assert(await component(page, key).count() === 0, `${key} under ORPO`);
  }
  // The doubled batch's full logits are the loss's component, with the formula that says so.
  assert(Number(await component(page, 'logits').getAttribute('data-bytes')) > 0, 'no logits under ORPO');
  assert((await component(page, 'logits').innerText()).includes('ORPO'), 'logits formula does not name ORPO');
  assert(Number(await component(page, 'paired_batch').getAttribute('data-bytes')) > 0, 'no paired batch under ORPO');
  const timeline = await page.locator('[data-testid="timeline"]').getAttribute('aria-label');
  assert(!timeline.includes('reference pass'), `timeline: ${timeline}`);
  // Full fine-tuning: ORPO carries no second copy, so it needs less than DPO's; SimPO skips ORPO's cross-entropy.
  const orpo = await bytes(page, 'value-peak');
  assert(orpo < dpo, `ORPO ${orpo} not below DPO ${dpo} (full fine-tuning, a reference copy)`);
  const orpoLogits = Number(await component(page, 'logits').getAttribute('data-bytes'));
  await page.selectOption('[data-testid="task"]', 'simpo');
  await urlHas(page, 'task', 'simpo');
  await page.waitForFunction(from => Number(document.querySelector('[data-testid="component-logits"]')
    .getAttribute('data-bytes')) !== from, orpoLogits, { timeout: 10000 });
  // The step's allocated peak is the optimizer's here, so only the loss's component moves (and the cache's
  // segments, which are not monotone: SimPO's reserve 30 MB more).
  const simpoLogits = Number(await component(page, 'logits').getAttribute('data-bytes'));
  assert(simpoLogits < orpoLogits, `SimPO's logits ${simpoLogits} vs ORPO's ${orpoLogits}`);
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.screenshot({ path: path.join(out, 'p41-simpo-laptop.png') });
});

await test('a ref in a link beside task=orpo is refused, saying why, and the rest of the plan holds', async page => {
  await page.goto(base + '?task=orpo&ref=model&method=lora&model=llama-3.2-1b&b=2&s=1024');
  await ready(page);
  const msg = await page.locator('[data-testid="url-error"]').innerText();
  assert(msg.includes('ref=model does not apply to task=orpo'), `banner: ${msg}`);
  assert(await page.locator('[data-testid="task"]').inputValue() === 'orpo', 'task not orpo');
  assert(param(page, 'b') === '2' && param(page, 's') === '1024', `keys lost: ${page.url()}`);
});

await test('ref=precomputed lowers the figure; the reference select and the prompt box write their keys', async page => {
  await page.goto(base + DPO);
  await ready(page);
  const dpo = await bytes(page, 'value-peak');
  await page.selectOption('[data-testid="ref"]', 'precomputed');
  await peakChanges(page, dpo);
  await urlHas(page, 'ref', 'precomputed');
  const pre = await bytes(page, 'value-peak');
  assert(pre < dpo, `precomputed ${pre} not below ${dpo}`);
  assert(await component(page, 'reference_weights').count() === 0 && await component(page, 'reference_pass').count() === 0,
    'a precomputed reference still has a copy or a pass');
  const timeline = await page.locator('[data-testid="timeline"]').getAttribute('aria-label');
  assert(!timeline.includes('reference pass'), `timeline: ${timeline}`);
  // The same figure as the link opened with ref=precomputed.
  await page.goto(base + DPO + '&ref=precomputed');
  await ready(page);
  assert(await bytes(page, 'value-peak') === pre, 'the link gives another figure');
  // A prompt length typed in: in the URL, auto off; one not below s is refused beside the box and the plan keeps its.
  await page.fill('[data-testid="prompt"]', '300'); await page.locator('[data-testid="prompt"]').dispatchEvent('change');
  await urlHas(page, 'prompt', '300');
  assert(!await page.locator('[data-testid="prompt-auto"]').isChecked(), 'auto still checked');
  await page.fill('[data-testid="prompt"]', '1024'); await page.locator('[data-testid="prompt"]').dispatchEvent('change');
  await page.locator('[data-testid="url-error"]').waitFor({ timeout: 5000 });
  const said = await page.locator('[data-testid="refused-prompt"]').innerText();
  assert(said.includes('leaves no completion tokens in s=1024'), `refused: ${said}`);
  assert(param(page, 'prompt') !== '1024', `the URL took the refused prompt: ${page.url()}`);
  await page.check('[data-testid="prompt-auto"]');
  await urlHas(page, 'prompt', null);
});

await test('adapters switched off under full fine-tuning are refused, saying why, and the reference stays auto', async page => {
  await page.goto(base + DPO);
  await ready(page);
  await page.selectOption('[data-testid="ref"]', 'adapters_off');
  await page.locator('[data-testid="url-error"]').waitFor({ timeout: 5000 });
  const banner = await page.locator('[data-testid="url-error"]').innerText();
  assert(banner.includes('ref=adapters_off needs adapters to switch off'), `banner: ${banner}`);
  assert(await page.locator('[data-testid="ref"]').inputValue() === 'auto', 'the select kept adapters_off');
  assert(param(page, 'ref') === null, `the URL took it: ${page.url()}`);
});

await test('a shorter sequence than the prompt puts the prompt back to auto and says why', async page => {
  await page.goto(base + DPO + '&prompt=900');
  await ready(page);
  await page.fill('#num-s', '512'); await page.locator('#num-s').dispatchEvent('change');
  await urlHas(page, 's', '512');
  await urlHas(page, 'prompt', null);
  const banner = await page.locator('[data-testid="url-error"]').innerText();
  assert(banner.includes('prompt=900 leaves no completion tokens in s=512'), `banner: ${banner}`);
});

await test('the task selector is off, saying why, outside the HF framework profile; fw=hf turns it back on', async page => {
  await page.goto(base + '?fw=torchtune&method=lora');
  await ready(page);
  const task = page.locator('[data-testid="task"]');
  assert(await task.isDisabled(), 'task selector enabled under torchtune');
  const why = await task.locator('xpath=..').locator('.why').innerText();
  assert(why.includes('HF framework profile'), `why: ${why}`);
  // A DPO plan moved to torchtune goes back to SFT and says why.
  await page.goto(base + DPO);
  await ready(page);
  await page.selectOption('[data-testid="select-fw"]', 'torchtune');
  await urlHas(page, 'task', null);
  const banner = await page.locator('[data-testid="url-error"]').innerText();
  assert(banner.includes('task=dpo is planned as TRL'), `banner: ${banner}`);
});

// A LoRA DPO plan with a second copy as its reference, where the reference and the prompt are among the largest
// savings (under full fine-tuning the optimizer's levers come first, and the advisor lists eight).
const DPO_LORA = '?task=dpo&method=lora&model=llama-3.2-1b&b=4&s=2048&ref=model&gpu=rtx-4090';

await test("the advisor offers precomputed reference log-probabilities, and its card's figure is the applied plan's", async page => {
  await page.goto(base + DPO_LORA);
  await ready(page);
  const advisor = page.locator('[data-testid="advisor"]');
  const card = advisor.locator('li.suggestion', { hasText: 'precompute_ref_log_probs' });
  await card.first().waitFor({ timeout: 30000 });
  const needs = await card.first().locator('.head strong').innerText();
  await page.setViewportSize({ width: 1280, height: 800 });
  await advisor.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(out, 'p41-advisor-laptop.png') });
  await card.first().locator('button').click();
  await urlHas(page, 'ref', 'precomputed');
  const shown = await page.locator('[data-testid="value-peak"] .value').innerText();
  assert(needs === `needs ${shown}`, `card "${needs}" vs the applied plan's ${shown}`);
  assert(await component(page, 'reference_weights').count() === 0, 'the copy stayed');
  // The shorter-prompt card keeps the completions: s and prompt both lower, by the same number of tokens.
  await page.goto(base + DPO_LORA);
  await ready(page);
  const shorter = advisor.locator('li.suggestion', { hasText: 'Cut prompts to 512 tokens' });
  await shorter.first().waitFor({ timeout: 30000 });
  const cut = await shorter.first().locator('.head strong').innerText();
  await shorter.first().locator('button').click();
  await urlHas(page, 'prompt', '512');
  assert(param(page, 's') === '1536', `s: ${param(page, 's')}`);
  const after = await page.locator('[data-testid="value-peak"] .value').innerText();
  assert(cut === `needs ${after}`, `card "${cut}" vs the applied plan's ${after}`);
});

await test('the GPU table prices the DPO plan: its rows need more than the SFT plan, its free changes precompute the reference', async page => {
  const row = async q => {
    await page.goto(base + q);
    await ready(page);
    await page.click('[data-testid="gpu-table-summary"]');
    await page.waitForSelector('[data-testid="gpu-row-h100-80gb"]', { timeout: 10000 });
    return {
      // "fits, 61.2 GiB free": the H100 holds either plan, with less to spare under DPO.
      spare: parseFloat((await page.locator('[data-testid="gpu-row-h100-80gb"] td:nth-child(3)').innerText()).replace(/^fits, /, '')),
      free: await page.locator('[data-testid="gpu-table-free"]').count()
        ? await page.locator('[data-testid="gpu-table-free"]').innerText() : '',
    };
  };
  const dpo = await row(DPO);
  await page.screenshot({ path: path.join(out, 'p41-gpu-table.png') });
  const sft = await row('?method=full&model=llama-3.2-1b&b=2&s=1024');
  assert(dpo.spare < sft.spare, `H100 row: DPO leaves ${dpo.spare} GiB, not less than SFT's ${sft.spare}`);
  if (dpo.free) assert(dpo.free.includes('precompute_ref_log_probs'), `free changes: ${dpo.free}`);
});

await test('task=banana in a link lists its problem like other bad keys and keeps the rest', async page => {
  await page.goto(base + '?task=banana&method=full&model=llama-3.2-1b&b=2&s=1024');
  await page.waitForSelector('[data-testid="url-error"]', { timeout: 20000 });
  const msg = await page.locator('[data-testid="url-error"]').innerText();
  assert(msg.includes('task=`banana` is not accepted; accepted: sft, dpo, orpo, simpo, cpo, kto, grpo'), `banner: ${msg}`);
  await ready(page);
  assert(await page.locator('[data-testid="task"]').inputValue() === 'sft', 'task not back to sft');
  assert(param(page, 'b') === '2' && param(page, 'method') === 'full', `keys lost: ${page.url()}`);
});

await test('phone: the task controls and the DPO answer at 390x844', async page => {
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(base + DPO);
  await ready(page);
  await page.screenshot({ path: path.join(out, 'p41-dpo-phone.png') });
  await page.locator('[data-testid="prompt"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(out, 'p41-dpo-phone-controls.png') });
  await page.locator('[data-testid="timeline"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(out, 'p41-dpo-phone-timeline.png') });
  // Nothing wider than the screen.
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  assert(wide <= 390, `page ${wide}px wide`);
});

// The embed's caption is its level-one heading (#43: axe-core's page-has-heading-one), drawn as the one line it was.
for (const scheme of ['light', 'dark']) {
  await test(`embed: a level-one heading, no serious or critical axe-core violation, ${scheme}`, async page => {
    await page.emulateMedia({ colorScheme: scheme });
    await page.setViewportSize({ width: 600, height: 400 });
    await page.goto(base + DPO + '&embed=1');
    await page.waitForFunction(() => document.querySelector('[data-testid="embed-caption"]')?.dataset.state === 'figures',
      null, { timeout: 20000 });
    const h1 = page.locator('h1');
    assert(await h1.count() === 1 && await h1.getAttribute('data-testid') === 'embed-caption', 'the caption is not the h1');
    const size = await h1.evaluate(e => getComputedStyle(e).fontSize);
    assert(parseFloat(size) < 14, `the heading is drawn large: ${size}`);
    const found = await axeViolations(page, ['page-has-heading-one']);
    assert(found.length === 0, found.join('; '));
    await page.screenshot({ path: path.join(out, `p41-embed-${scheme}.png`) });
  });
}

// The page with a DPO plan passes axe-core too (the new controls have labels).
await test('a DPO plan: no serious or critical axe-core violation, laptop', async page => {
  await page.goto(base + DPO);
  await ready(page);
  const found = await axeViolations(page);
  assert(found.length === 0, found.join('; '));
});

await finish();
