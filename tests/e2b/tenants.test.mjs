// Two tenants' keys (docs/e2b.md, docs/security.md): B's key never sees, inspects, kills,
// pauses, forks, snapshots or connects to A's sandbox (each answers as for an id that does
// not exist), and the data plane with A's sandbox id but B's credentials (B's own sandbox's
// access token, or none) is refused and runs nothing. And SDK 2.45 (npm e2b-245), which
// insists on e2b_ keys and creates with POST /sandboxes.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, SandboxNotFoundError, AuthenticationError } from 'e2b';
import { Sandbox as Sandbox245 } from 'e2b-245';
import { withSandbox, killQuietly, allPages, KEY_A, KEY_B, RUN, TEST_TIMEOUT_MS, SANDBOX_TIMEOUT_MS } from './lib.mjs';

const opts = { timeout: TEST_TIMEOUT_MS };
const asB = { apiKey: KEY_B };

describe('tenants', { concurrency: 2 }, () => {
  test('B cannot see, inspect, kill, pause or connect to A\'s sandbox', opts, async () => {
    await withSandbox({ metadata: { tenant: `${RUN}-A` } }, async (a) => {
      await withSandbox({ apiKey: KEY_B, metadata: { tenant: `${RUN}-B` } }, async (b) => {
        const listB = await allPages(Sandbox.list(asB));
        const idsB = listB.items.map((s) => s.sandboxId);
        assert.ok(!idsB.includes(a.sandboxId), 'B lists A\'s sandbox');
        assert.ok(idsB.includes(b.sandboxId), 'B does not list its own');
        const listA = await allPages(Sandbox.list({ query: { metadata: { tenant: `${RUN}-B` } } }));
        assert.deepEqual(listA.items, [], 'A lists B\'s sandbox');

        await assert.rejects(Sandbox.getInfo(a.sandboxId, asB), SandboxNotFoundError);
        assert.equal(await Sandbox.kill(a.sandboxId, asB), false, 'B\'s kill of A\'s sandbox');
        await assert.rejects(Sandbox.setTimeout(a.sandboxId, 1000, asB), SandboxNotFoundError);
        await assert.rejects(Sandbox.pause(a.sandboxId, asB), SandboxNotFoundError);
        await assert.rejects(Sandbox.connect(a.sandboxId, asB), SandboxNotFoundError);
        await assert.rejects(Sandbox.getMetrics(a.sandboxId, asB), SandboxNotFoundError);
        await assert.rejects(Sandbox.createSnapshot(a.sandboxId, asB), SandboxNotFoundError);
        await assert.rejects(Sandbox.fork(a.sandboxId, asB), SandboxNotFoundError);
        // listing snapshots by A's id answers B as for an id that does not exist
        // (whether that is an empty list or a 404 is the server's choice)
        const outcome = (id) => allPages(Sandbox.listSnapshots({ ...asB, sandboxId: id }))
          .then((r) => ({ items: r.items }), (e) => ({ error: e.constructor.name, status: e.statusCode }));
        const snapsB = await outcome(a.sandboxId);
        assert.deepEqual(snapsB, await outcome('ses_00000000deadbeef'));
        assert.ok(snapsB.error || snapsB.items.length === 0, JSON.stringify(snapsB));

        // none of that touched it
        const info = await a.getInfo();
        assert.equal(info.state, 'running');
        assert.ok(info.endAt - Date.now() > 60_000, 'B\'s setTimeout moved A\'s deadline');
        assert.equal((await a.commands.run('echo still')).stdout, 'still\n');
      });
    });
  });

  test('the data plane with A\'s sandbox id and B\'s access token (or none) is refused', opts, async () => {
    await withSandbox({}, async (a) => {
      await withSandbox({ apiKey: KEY_B }, async (b) => {
        assert.equal((await b.commands.run('echo mine')).stdout, 'mine\n');
        for (const token of [b.envdAccessToken, undefined, `${a.envdAccessToken}x`]) {
          const forged = new Sandbox({ sandboxId: a.sandboxId, envdVersion: '0.6.4', envdAccessToken: token });
          await assert.rejects(forged.commands.run('touch /tmp/pwned'), AuthenticationError);
          await assert.rejects(forged.files.write('/tmp/pwned', 'x'), AuthenticationError);
          await assert.rejects(forged.files.read('/etc/hostname'), AuthenticationError);
          await assert.rejects(forged.files.list('/'), AuthenticationError);
          await assert.rejects(forged.commands.list(), AuthenticationError);
        }
        assert.notEqual(a.envdAccessToken, b.envdAccessToken);
        assert.equal((await a.commands.run('test -e /tmp/pwned && echo PWNED || echo clean')).stdout, 'clean\n');
      });
    });
  });
});

describe('SDK 2.45 (e2b-245)', { concurrency: 1 }, () => {
  test('create (POST /sandboxes), commands.run, files, connect, kill with an e2b_ key', opts, async () => {
    assert.match(KEY_A, /^e2b_[0-9a-f]+$/, 'the key 2.45 insists on');
    const sbx = await Sandbox245.create({ timeoutMs: SANDBOX_TIMEOUT_MS, metadata: { sdk: '2.45', run: RUN } });
    try {
      const r = await sbx.commands.run('echo "old sdk $((1+1))"; whoami');
      assert.equal(r.stdout, 'old sdk 2\nuser\n');
      await assert.rejects(sbx.commands.run('exit 4'), (e) => e.exitCode === 4);
      await sbx.files.write('old.txt', 'from 2.45');
      assert.equal(await sbx.files.read('/home/user/old.txt'), 'from 2.45');
      // the new SDK sees what the old one made
      const info = await Sandbox.getInfo(sbx.sandboxId);
      assert.equal(info.metadata.sdk, '2.45');
      // 2.45's connect is POST /sandboxes/{id}/connect
      const again = await Sandbox245.connect(sbx.sandboxId);
      assert.equal(await again.files.read('old.txt'), 'from 2.45');
      assert.equal(await sbx.kill(), true);
      assert.equal(await Sandbox245.kill(sbx.sandboxId), false);
    } finally {
      await killQuietly(sbx.sandboxId);
    }
  });
});
