// The control plane through E2B's SDK 2.51 (docs/e2b-wire.md §2): create, getInfo, list
// (metadata and state filters, paging), kill, setTimeout that expires, metrics, pause and
// connect, snapshots, fork. Each test makes and kills its own sandboxes.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, SandboxNotFoundError, AuthenticationError } from 'e2b';
import {
  withSandbox, killQuietly, until, sleep, assertGone, allPages, RUN, TEST_TIMEOUT_MS,
  SANDBOX_TIMEOUT_MS,
} from './lib.mjs';

const opts = { timeout: TEST_TIMEOUT_MS };

describe('sandbox', { concurrency: 3 }, () => {
  test('create, getInfo, kill', opts, async () => {
    const meta = { suite: 'e2b', run: RUN, 'with space': 'a b&c=d' };
    const t0 = Date.now();
    const sbx = await Sandbox.create({ metadata: meta, timeoutMs: 120_000 });
    try {
      assert.match(sbx.sandboxId, /^[A-Za-z0-9_-]+$/);
      const info = await sbx.getInfo();
      assert.equal(info.sandboxId, sbx.sandboxId);
      assert.equal(info.state, 'running');
      assert.deepEqual(info.metadata, meta);
      assert.equal(info.envdVersion, '0.6.4');
      assert.equal(info.templateId.length > 0, true);
      assert.ok(info.startedAt instanceof Date && Math.abs(info.startedAt - t0) < 60_000, `startedAt ${info.startedAt}`);
      const ttl = info.endAt - info.startedAt;
      assert.ok(ttl > 110_000 && ttl <= 125_000, `endAt - startedAt = ${ttl} ms for a 120 s timeout`);
      assert.ok(info.cpuCount >= 1 && info.memoryMB > 0, `cpuCount ${info.cpuCount} memoryMB ${info.memoryMB}`);
      // the static form and the instance's agree
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).sandboxId, sbx.sandboxId);
      assert.equal(await sbx.kill(), true);
      assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'a second kill');
      await assertGone(sbx.sandboxId);
      await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError);
    } finally {
      await killQuietly(sbx.sandboxId);
    }
  });

  test('connect to a running sandbox; isRunning before and after the kill', opts, async () => {
    const sbx = await Sandbox.create({ timeoutMs: SANDBOX_TIMEOUT_MS });
    try {
      assert.equal(await sbx.isRunning(), true);
      await sbx.files.write('/tmp/mark', sbx.sandboxId);
      const again = await Sandbox.connect(sbx.sandboxId);
      assert.equal(again.sandboxId, sbx.sandboxId);
      assert.equal(await again.files.read('/tmp/mark'), sbx.sandboxId);
      assert.equal((await again.getInfo()).state, 'running');
      assert.equal(await sbx.kill(), true);
      assert.equal(await sbx.isRunning(), false);
      assert.equal(await again.isRunning(), false);
    } finally {
      await killQuietly(sbx.sandboxId);
    }
  });

  test('create: the default timeout is 300 s; an unknown template is refused', opts, async () => {
    await withSandbox({ timeoutMs: undefined }, async (sbx) => {
      const info = await sbx.getInfo();
      const ttl = info.endAt - info.startedAt;
      assert.ok(ttl > 290_000 && ttl <= 305_000, `endAt - startedAt = ${ttl} ms, want 300 s`);
    });
    await assert.rejects(Sandbox.create('no-such-template-e2b', { timeoutMs: 30_000 }), (e) => {
      assert.match(`${e}`, /no-such-template-e2b|not found|template/i);
      return true;
    });
    await assert.rejects(Sandbox.create({ apiKey: 'e2b_0000000000000000000000000000000000000000' }), AuthenticationError);
    await assert.rejects(Sandbox.getInfo('definitely-not-a-sandbox'), SandboxNotFoundError);
  });

  test('list: metadata filter, state filter, paging', opts, async () => {
    const tag = `${RUN}-list`;
    const made = [];
    try {
      for (let i = 0; i < 3; i++) {
        made.push(await Sandbox.create({ metadata: { list: tag, n: String(i), 'odd key&=': 'v a=l%ue' }, timeoutMs: SANDBOX_TIMEOUT_MS }));
      }
      const ids = made.map((s) => s.sandboxId).sort();
      const all = await allPages(Sandbox.list({ query: { metadata: { list: tag } } }));
      assert.deepEqual(all.items.map((s) => s.sandboxId).sort(), ids);
      for (const s of all.items) {
        assert.equal(s.state, 'running');
        assert.equal(s.metadata.list, tag);
        assert.equal(s.metadata['odd key&='], 'v a=l%ue');
      }
      // two pairs must both match; a value with the characters the triple encoding carries
      const one = await allPages(Sandbox.list({ query: { metadata: { list: tag, n: '1' } } }));
      assert.deepEqual(one.items.map((s) => s.sandboxId), [made[1].sandboxId]);
      const odd = await allPages(Sandbox.list({ query: { metadata: { 'odd key&=': 'v a=l%ue', n: '2' } } }));
      assert.deepEqual(odd.items.map((s) => s.sandboxId), [made[2].sandboxId]);
      const none = await allPages(Sandbox.list({ query: { metadata: { list: tag, n: '9' } } }));
      assert.deepEqual(none.items, []);

      // paging: one a page, every one once, and the last page says so (no X-Next-Token)
      const paged = await allPages(Sandbox.list({ query: { metadata: { list: tag } }, limit: 1 }));
      assert.deepEqual(paged.items.map((s) => s.sandboxId).sort(), ids);
      assert.ok(paged.sizes.every((n) => n <= 1), `page sizes ${paged.sizes}`);
      assert.ok(paged.sizes.length === 3 || (paged.sizes.length === 4 && paged.sizes[3] === 0),
        `page sizes ${paged.sizes} for 3 sandboxes`);
      const p = Sandbox.list({ query: { metadata: { list: tag } }, limit: 2 });
      assert.equal((await p.nextItems()).length, 2);
      assert.equal(p.hasNext, true);
      assert.equal((await p.nextItems()).length, 1);
      assert.equal(p.hasNext, false);

      // state: one paused
      assert.equal(await made[0].pause(), true);
      const paused = await allPages(Sandbox.list({ query: { metadata: { list: tag }, state: ['paused'] } }));
      assert.deepEqual(paused.items.map((s) => [s.sandboxId, s.state]), [[made[0].sandboxId, 'paused']]);
      const running = await allPages(Sandbox.list({ query: { metadata: { list: tag }, state: ['running'] } }));
      assert.deepEqual(running.items.map((s) => s.sandboxId).sort(), [made[1].sandboxId, made[2].sandboxId].sort());
      const both = await allPages(Sandbox.list({ query: { metadata: { list: tag }, state: ['running', 'paused'] } }));
      assert.equal(both.items.length, 3);

      // a killed one is no longer listed
      assert.equal(await made[2].kill(), true);
      const after = await allPages(Sandbox.list({ query: { metadata: { list: tag } } }));
      assert.deepEqual(after.items.map((s) => s.sandboxId).sort(), [made[0].sandboxId, made[1].sandboxId].sort());
    } finally {
      for (const s of made) await killQuietly(s.sandboxId);
    }
  });

  test('setTimeout: a short timeout expires and the sandbox is gone', opts, async () => {
    await withSandbox({ timeoutMs: 120_000 }, async (sbx) => {
      const t0 = Date.now();
      await sbx.setTimeout(3000);
      const info = await sbx.getInfo();
      assert.ok(Math.abs(info.endAt - (t0 + 3000)) < 2500, `endAt ${info.endAt.toISOString()}, set at ${new Date(t0).toISOString()} + 3 s`);
      const gone = await until(20_000, async () => {
        try {
          await Sandbox.getInfo(sbx.sandboxId);
          return false;
        } catch (e) {
          return e instanceof SandboxNotFoundError;
        }
      }, 250);
      assert.ok(gone, 'getInfo still finds the sandbox 20 s after its 3 s timeout');
      const took = Date.now() - t0;
      assert.ok(took >= 2500, `gone after ${took} ms, before its 3 s timeout`);
      const listed = await allPages(Sandbox.list());
      assert.ok(!listed.items.some((s) => s.sandboxId === sbx.sandboxId), 'still listed after its timeout');
      await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError);
      // the data plane no longer answers for it
      await assert.rejects(sbx.commands.run('true'));
    });
  });

  test('setTimeout: extending keeps it alive past the first deadline', opts, async () => {
    await withSandbox({ timeoutMs: 4000 }, async (sbx) => {
      await sbx.setTimeout(60_000);
      await sleep(5500);
      const info = await sbx.getInfo();
      assert.equal(info.state, 'running');
      assert.ok(info.endAt - Date.now() > 40_000, `endAt ${info.endAt.toISOString()}`);
    });
  });

  test('getMetrics: the session\'s usage', opts, async () => {
    await withSandbox({}, async (sbx) => {
      const m = await until(15_000, async () => {
        const v = await sbx.getMetrics();
        return v.length > 0 ? v : null;
      }, 500);
      assert.ok(m, 'no metrics within 15 s');
      const last = m[m.length - 1];
      assert.ok(last.timestamp instanceof Date && !Number.isNaN(+last.timestamp), `timestamp ${last.timestamp}`);
      assert.ok(Math.abs(last.timestamp - Date.now()) < 120_000, `timestamp ${last.timestamp.toISOString()}`);
      assert.ok(last.cpuCount >= 1, `cpuCount ${last.cpuCount}`);
      assert.ok(last.cpuUsedPct >= 0, `cpuUsedPct ${last.cpuUsedPct}`);
      assert.ok(last.memTotal > 0 && last.memUsed > 0 && last.memUsed <= last.memTotal,
        `memUsed ${last.memUsed} memTotal ${last.memTotal}`);
      assert.ok(Number.isFinite(last.diskUsed) && Number.isFinite(last.diskTotal), `disk ${last.diskUsed}/${last.diskTotal}`);
      await assert.rejects(Sandbox.getMetrics('definitely-not-a-sandbox'), SandboxNotFoundError);
    });
  });

  test('pause, then connect resumes it with its files', opts, async () => {
    await withSandbox({}, async (sbx) => {
      await sbx.files.write('kept.txt', 'before the pause');
      await sbx.commands.run('echo from-a-command > /home/user/cmd.txt');
      assert.equal(await sbx.pause(), true);
      assert.equal(await Sandbox.pause(sbx.sandboxId), false, 'pausing a paused sandbox (409)');
      assert.equal((await sbx.getInfo()).state, 'paused');
      const c = await Sandbox.connect(sbx.sandboxId);
      assert.equal(c.sandboxId, sbx.sandboxId);
      assert.equal((await c.getInfo()).state, 'running');
      assert.equal(await c.files.read('kept.txt'), 'before the pause');
      assert.equal((await c.commands.run('cat /home/user/cmd.txt')).stdout, 'from-a-command\n');
      // the old handle's access token still works: it is the sandbox's, not the connection's
      assert.equal(await sbx.files.read('kept.txt'), 'before the pause');
      // pause through the instance, resume through its connect()
      assert.equal(await c.pause(), true);
      await c.connect();
      assert.equal((await c.commands.run('cat kept.txt')).stdout, 'before the pause');
      await assert.rejects(Sandbox.pause('definitely-not-a-sandbox'), SandboxNotFoundError);
    });
  });

  // A pause keeps every file of the sandbox's disk, not only the home's. /tmp is not one of
  // them on ns (a tmpfs, memory: docs/e2b.md "What does not work"), so this uses /var/tmp.
  test('pause keeps files outside the home too', opts, async () => {
    await withSandbox({}, async (sbx) => {
      await sbx.commands.run('echo kept > /var/tmp/outside.txt && mkdir -p /opt/x && echo too > /opt/x/y',
        { user: 'root' });
      assert.equal(await sbx.pause(), true);
      const c = await Sandbox.connect(sbx.sandboxId);
      assert.equal(await c.files.read('/var/tmp/outside.txt'), 'kept\n');
      assert.equal(await c.files.read('/opt/x/y'), 'too\n');
    });
  });

  test('snapshots: createSnapshot, listSnapshots, create from one; deleteSnapshot is 501', opts, async () => {
    const extra = [];
    let snapId;
    try {
      await withSandbox({}, async (sbx) => {
        await sbx.files.write('snap.txt', 'in the snapshot');
        const snap = await sbx.createSnapshot();
        snapId = snap.snapshotId;
        assert.equal(typeof snap.snapshotId, 'string');
        assert.ok(snap.snapshotId.length > 0);
        assert.ok(Array.isArray(snap.names));
        // the source goes on after its snapshot, and changes after it are not in it
        await sbx.files.write('snap.txt', 'after the snapshot');
        assert.equal(await sbx.files.read('snap.txt'), 'after the snapshot');

        const listed = await allPages(Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }));
        assert.ok(listed.items.some((s) => s.snapshotId === snap.snapshotId), JSON.stringify(listed.items));
        const mine = await allPages(sbx.listSnapshots());
        assert.ok(mine.items.some((s) => s.snapshotId === snap.snapshotId));

        const from = await Sandbox.create(snap.snapshotId, { timeoutMs: SANDBOX_TIMEOUT_MS });
        extra.push(from.sandboxId);
        assert.notEqual(from.sandboxId, sbx.sandboxId);
        assert.equal(await from.files.read('snap.txt'), 'in the snapshot');
        assert.equal((await from.commands.run('whoami')).stdout, 'user\n');

        // Deleting one snapshot is not supported (docs/e2b.md "Snapshots"): 501 for one of
        // the caller's, 404 (false) for any other id; the snapshot stays.
        await assert.rejects(Sandbox.deleteSnapshot(snap.snapshotId), (e) => e.statusCode === 501);
        assert.equal(await Sandbox.deleteSnapshot('snap_0000000000000000'), false);
        const still = await allPages(Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }));
        assert.ok(still.items.some((s) => s.snapshotId === snap.snapshotId));
      });
      // ... and goes with its sandbox: after the kill, listed no more, no create from it
      const gone = await allPages(Sandbox.listSnapshots());
      assert.ok(!gone.items.some((s) => s.snapshotId === snapId), 'a killed sandbox\'s snapshot is listed');
      await assert.rejects(Sandbox.create(snapId, { timeoutMs: 30_000 }));
    } finally {
      for (const id of extra) await killQuietly(id);
    }
  });

  test('fork: copies with the files, apart from the source', opts, async () => {
    const forks = [];
    try {
      await withSandbox({}, async (sbx) => {
        await sbx.files.write('fork.txt', 'shared past');
        const res = await sbx.fork({ count: 2, timeoutMs: SANDBOX_TIMEOUT_MS });
        for (const f of res) if (!(f instanceof Error)) forks.push(f.sandboxId);
        assert.equal(res.length, 2);
        for (const f of res) assert.ok(f instanceof Sandbox, `a fork failed: ${f}`);
        const ids = new Set([sbx.sandboxId, ...forks]);
        assert.equal(ids.size, 3, 'forks have ids of their own');
        for (const f of res) assert.equal(await f.files.read('fork.txt'), 'shared past');
        await res[0].files.write('fork.txt', 'fork 0');
        assert.equal(await sbx.files.read('fork.txt'), 'shared past');
        assert.equal(await res[1].files.read('fork.txt'), 'shared past');
        assert.equal((await sbx.getInfo()).state, 'running', 'the source runs on');
        await assert.rejects(Sandbox.fork('definitely-not-a-sandbox'), SandboxNotFoundError);
      });
    } finally {
      for (const id of forks) await killQuietly(id);
    }
  });
});
