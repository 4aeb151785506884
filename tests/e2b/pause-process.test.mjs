// Pause keeps a running process where the runtime can (gvisor, microvm: docs/e2b.md; ns
// keeps the files only, and sandbox.test.mjs checks those). run.sh runs this file on the
// runtime it was given; on ns the test is skipped.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox } from 'e2b';
import { withSandbox, until, RUNTIME, TEST_TIMEOUT_MS } from './lib.mjs';

const opts = { timeout: TEST_TIMEOUT_MS };

test(`pause keeps a running process (${RUNTIME})`, { ...opts, skip: RUNTIME === 'ns' && 'ns keeps files only (docs/e2b.md)' }, async () => {
  await withSandbox({}, async (sbx) => {
    const h = await sbx.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.2; done',
      { background: true, timeoutMs: 0 });
    assert.ok(await until(5000, async () => Number(await sbx.files.read('/tmp/counter')) > 2));
    await h.disconnect();
    assert.equal(await sbx.pause(), true);
    const c = await Sandbox.connect(sbx.sandboxId);
    const before = Number(await c.files.read('/tmp/counter'));
    assert.ok((await c.commands.list()).some((p) => p.pid === h.pid), 'the loop is not listed after the resume');
    assert.ok(await until(5000, async () => Number(await c.files.read('/tmp/counter')) > before + 2),
      'the loop does not count on after the resume');
    assert.equal(await c.commands.kill(h.pid), true);
  });
});
