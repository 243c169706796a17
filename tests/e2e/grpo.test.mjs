// End-to-end tests of GRPO on the page (#44 step 3): its controls under task=grpo, the generation round in the
// components and the timeline, vLLM's colocated share, the advisor's GRPO cards, and the link they write.
// Usage: node tests/e2e/grpo.test.mjs DIST_DIR   (the site built with --public-url /peakplan/)
// Prints one line per test and a closing "N passed, N failed" line; screenshots (p44-*.png) go to tests/e2e/out/.
import path from 'node:path';
import { test, bytes, ready, assert, out, base, finish, param, urlHas, typeNumber as type } from './harness.mjs';

const GRPO = '?model=qwen2.5-1.5b&method=lora&task=grpo&b=1&gens=8&prompt=256&completion=1024&gpu=rtx-4090';
const component = (page, key) => page.locator(`[data-testid="component-${key}"]`);
const peakChanges = (page, from) => page.waitForFunction(from => Number(document.querySelector(
  '[data-testid="value-peak"]').getAttribute('data-bytes')) !== from, from, { timeout: 10000 });

await test('a GRPO link shows its controls, the generation cache and the generation round in the timeline', async page => {
  await page.goto(base + GRPO);
  await ready(page);
  assert(await page.locator('[data-testid="task"]').inputValue() === 'grpo', 'task not grpo');
  assert(await page.locator('[data-testid="num-gens"]').inputValue() === '8', 'gens box');
  assert(await page.locator('[data-testid="num-completion"]').inputValue() === '1024', 'completion box');
  assert(await page.locator('[data-testid="prompt"]').inputValue() === '256', 'prompt box');
  assert(await page.locator('[data-testid="select-gen"]').inputValue() === 'hf', 'gen select');
  assert(await page.locator('[data-testid="num-vmem"]').isDisabled(), 'vmem on without vLLM colocated');
  // GRPO's reference follows beta: no reference select.
  assert(await page.locator('[data-testid="ref"]').count() === 0, 'a reference select under GRPO');
  // Qwen2.5-1.5B: 28 layers x 2 x 8 sequences x 1,279 positions x 256 key/value widths x 2 bytes.
  const cache = component(page, 'generation_cache');
  assert(Number(await cache.getAttribute('data-bytes')) === 2 * 28 * 8 * 1279 * 256 * 2, 'cache bytes');
  assert((await cache.innerText()).includes('b x gens sequences'), 'cache formula');
  const timeline = await page.locator('[data-testid="timeline"]').getAttribute('aria-label');
  assert(/loaded .*generation .*end of forward .*backward/.test(timeline), `timeline: ${timeline}`);
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.screenshot({ path: path.join(out, 'p44-grpo-laptop.png') });
  await page.locator('[data-testid="task"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(out, 'p44-grpo-controls-laptop.png') });
});

await test('more completions per prompt and longer completions raise the figure; the boxes write the link', async page => {
  await page.goto(base + GRPO);
  await ready(page);
  const at8 = await bytes(page, 'value-peak');
  await type(page, 'gens', '16');
  await urlHas(page, 'gens', '16');
  await peakChanges(page, at8);
  const at16 = await bytes(page, 'value-peak');
  assert(at16 > at8, `gens 16 ${at16} <= gens 8 ${at8}`);
  await type(page, 'completion', '2048');
  await urlHas(page, 'completion', '2048');
  // Completion with a prompt makes the sequence.
  assert(param(page, 's') === '2304', `s: ${param(page, 's')}`);
  await peakChanges(page, at16);
  assert(await bytes(page, 'value-peak') > at16, 'a longer completion did not raise the figure');
  // A value the plan does not take is said, and the box shows the plan's value again.
  await type(page, 'gens', '1');
  await page.waitForFunction(() => (document.querySelector('[data-testid="url-error"]')?.innerText ?? '').includes('gens=1'),
    null, { timeout: 5000 });
  const banner = await page.locator('[data-testid="url-error"]').innerText();
  assert(banner.includes('gens=1 is out of range; accepted: integers 2 to 4096'), `banner: ${banner}`);
  assert(param(page, 'gens') === '16', `gens after a refused value: ${param(page, 'gens')}`);
  assert(await page.locator('[data-testid="num-gens"]').inputValue() === '16', 'the box did not show the plan again');
});

await test("vLLM colocated takes its share of the card, and the advisor's cards cut the round", async page => {
  await page.goto(base + GRPO + '&beta=0.04');
  await ready(page);
  const hf = await bytes(page, 'value-peak');
  await page.selectOption('[data-testid="select-gen"]', 'vllm_colocate');
  await urlHas(page, 'gen', 'vllm_colocate');
  await peakChanges(page, hf);
  assert(!await page.locator('[data-testid="num-vmem"]').isDisabled(), 'vmem off under colocate');
  const share = Number(await component(page, 'vllm_share').getAttribute('data-bytes'));
  // 30% of the RTX 4090's 24,564 MiB.
  assert(Math.abs(share - 0.3 * 24564 * 2 ** 20) < 2 ** 10, `vLLM share ${share}`);
  await type(page, 'vmem', '0.5');
  await urlHas(page, 'vmem', '0.5');
  const advisor = page.locator('[data-testid="advisor"]');
  // (beta=0 is a card only where the reference lowers the peak: under LoRA its pass runs in the round, below it.)
  for (const words of ['completions per prompt instead of 8', 'Cap completions at 512 tokens', 'on a vLLM server',
    'Give vLLM 25% of the GPU']) {
    await advisor.locator('li.suggestion', { hasText: words }).first().waitFor({ timeout: 30000 });
  }
  await page.setViewportSize({ width: 1280, height: 800 });
  await advisor.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(out, 'p44-grpo-advisor-laptop.png') });
  const card = advisor.locator('li.suggestion', { hasText: 'Cap completions at 512 tokens' }).first();
  const needs = await card.locator('.head strong').innerText();
  await card.locator('button').click();
  await urlHas(page, 'completion', '512');
  const shown = await page.locator('[data-testid="value-peak"] .value').innerText();
  assert(needs === `needs ${shown}`, `card "${needs}" vs the applied plan's ${shown}`);
});

await test('phone: the GRPO controls and answer at 390x844', async page => {
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(base + GRPO);
  await ready(page);
  await page.screenshot({ path: path.join(out, 'p44-grpo-phone.png') });
  await page.locator('[data-testid="num-gens"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(out, 'p44-grpo-phone-controls.png') });
});

await finish();
