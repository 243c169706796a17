// End-to-end tests of DeepSpeed's own settings on the page (#47): the boxes and selects open where DeepSpeed
// shards the plan, say `auto`'s value for this model, write the link, move the figures the core prices, and the
// advisor offers the levers.
// Usage: node tests/e2e/deepspeed.test.mjs DIST_DIR   (the site built with --public-url /peakplan/)
// Prints one line per test and a closing "N passed, N failed" line; screenshots (p47-*.png) go to tests/e2e/out/.
import path from 'node:path';
import { test, bytes, ready, assert, axeViolations, out, base, finish, urlHas, typeNumber as type } from './harness.mjs';

const PLAN = '?model=qwen2.5-7b&method=full&gpus=4&b=1&s=8192&zero=3&shard=deepspeed&gpu=h100-80gb';

await test('ZeRO-3: the sizes show auto\'s values, a smaller sub-group lowers reserved memory, and the link keeps it', async page => {
  await page.goto(base + PLAN);
  await ready(page);
  const sub = page.locator('[data-testid="num-ds_sub"]');
  assert(!await sub.isDisabled(), 'the sub-group box is off under ZeRO-3 DeepSpeed');
  assert(await sub.getAttribute('placeholder') === 'auto (1.00B)', `ds_sub placeholder: ${await sub.getAttribute('placeholder')}`);
  // Qwen2.5-7B: hidden 3,584, so reduce_bucket_size auto is 3584² and the persistence threshold 35,840.
  assert(await page.locator('[data-testid="num-ds_rbucket"]').getAttribute('placeholder') === 'auto (12.85M)', 'rbucket placeholder');
  assert(await page.locator('[data-testid="num-ds_persist"]').getAttribute('placeholder') === 'auto (35.8K)', 'persist placeholder');
  const reserved = await bytes(page, 'value-reserved');
  await type(page, 'ds_sub', '100000000');
  await urlHas(page, 'ds_sub', '100000000');
  await page.waitForFunction(v => Number(document.querySelector('[data-testid="value-reserved"]').getAttribute('data-bytes')) < v,
    reserved, { timeout: 10000 });
  // An emptied box is auto again; a link with the key opens with it.
  await type(page, 'ds_sub', '');
  await urlHas(page, 'ds_sub', null);
  await page.goto(base + PLAN + '&ds_sub=100000000&zinit=0');
  await ready(page);
  assert(await sub.inputValue() === '100000000', 'ds_sub not shown from the link');
  assert(await page.locator('[data-testid="select-zinit"]').inputValue() === '0', 'zinit not shown from the link');
  await page.setViewportSize({ width: 1280, height: 800 });
  await sub.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(out, 'p47-deepspeed-laptop.png') });
  const violations = await axeViolations(page);
  assert(violations.length === 0, violations.join('; '));
});

await test('the settings are off where DeepSpeed does not shard, ZeRO-3\'s off under ZeRO-2, and the advisor offers zero.Init', async page => {
  await page.goto(base + PLAN.replace('shard=deepspeed', 'shard=fsdp1'));
  await ready(page);
  assert(await page.locator('[data-testid="num-ds_rbucket"]').isDisabled(), 'rbucket on under FSDP');
  await page.goto(base + PLAN.replace('zero=3', 'zero=2'));
  await ready(page);
  assert(!await page.locator('[data-testid="num-ds_rbucket"]').isDisabled(), 'rbucket off under ZeRO-2');
  assert(await page.locator('[data-testid="num-ds_sub"]').isDisabled(), 'sub-group on under ZeRO-2');
  // LoRA on 2 GPUs at 128 tokens, loaded whole: partitioning at load saves 7 GiB, free.
  await page.goto(base + '?model=qwen2.5-7b&method=lora&gpus=2&b=1&s=128&zero=3&shard=deepspeed&zinit=0&gpu=h100-80gb');
  await ready(page);
  const advisor = page.locator('[data-testid="advisor"]');
  await advisor.getByText('Partition the model as it loads').first().waitFor({ timeout: 20000 });
});

await finish();
