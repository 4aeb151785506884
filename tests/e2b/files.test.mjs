// files.* of E2B's SDK 2.51 against spaced (filesystem.Filesystem over Connect, GET and
// POST /files: docs/e2b-wire.md §3.7-3.9). Each test makes and kills its own sandbox.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { FileNotFoundError, FileType, FilesystemEventType, SandboxError } from 'e2b';
import { withSandbox, until, TEST_TIMEOUT_MS } from './lib.mjs';

const opts = { timeout: TEST_TIMEOUT_MS };
// Every byte value, twice, and a size that is not a round number.
const BYTES = (() => {
  const b = new Uint8Array(512 + 77);
  for (let i = 0; i < b.length; i++) b[i] = (i * 7 + (i >> 8)) & 0xff;
  return b;
})();
const sha = async (sbx, path) => (await sbx.commands.run(`sha256sum ${path} | cut -d' ' -f1`)).stdout.trim();
const hostSha = async (b) => Buffer.from(await crypto.subtle.digest('SHA-256', b)).toString('hex');

describe('files', { concurrency: 3 }, () => {
  test('write and read text: relative paths are in /home/user and belong to user', opts, async () => {
    await withSandbox({}, async (sbx) => {
      const w = await sbx.files.write('notes/a.txt', 'hello, wörld\n');
      assert.equal(w.path, '/home/user/notes/a.txt');
      assert.equal(w.name, 'a.txt');
      assert.equal(await sbx.files.read('notes/a.txt'), 'hello, wörld\n');
      assert.equal(await sbx.files.read('/home/user/notes/a.txt'), 'hello, wörld\n');
      assert.equal((await sbx.commands.run('cat /home/user/notes/a.txt')).stdout, 'hello, wörld\n');
      assert.equal((await sbx.commands.run('stat -c %U:%G /home/user/notes/a.txt /home/user/notes')).stdout,
        'user:user\nuser:user\n');
      // an existing file is replaced, not appended to
      await sbx.files.write('notes/a.txt', 'short');
      assert.equal(await sbx.files.read('notes/a.txt'), 'short');
      // an empty file
      await sbx.files.write('empty', '');
      assert.equal(await sbx.files.read('empty'), '');
      // as root, in root's home
      const r = await sbx.files.write('r.txt', 'root file', { user: 'root' });
      assert.equal(r.path, '/root/r.txt');
      assert.equal(await sbx.files.read('/root/r.txt', { user: 'root' }), 'root file');
      assert.equal((await sbx.commands.run('stat -c %U /root/r.txt', { user: 'root' })).stdout, 'root\n');
    });
  });

  test('write and read bytes: multipart (the default) and octet-stream', opts, async () => {
    await withSandbox({}, async (sbx) => {
      const want = await hostSha(BYTES);
      await sbx.files.write('/tmp/multi.bin', BYTES.buffer.slice(0));
      assert.deepEqual(await sbx.files.read('/tmp/multi.bin', { format: 'bytes' }), BYTES);
      assert.equal(await sha(sbx, '/tmp/multi.bin'), want);
      const w = await sbx.files.write('/tmp/octet.bin', BYTES.buffer.slice(0), { useOctetStream: true });
      assert.equal(w.path, '/tmp/octet.bin');
      assert.deepEqual(await sbx.files.read('/tmp/octet.bin', { format: 'bytes' }), BYTES);
      assert.equal(await sha(sbx, '/tmp/octet.bin'), want);
      // a Blob, and a larger body (1 MiB) by octet-stream
      const big = new Uint8Array(1 << 20);
      for (let i = 0; i < big.length; i += 4096) big[i] = i >> 12;
      await sbx.files.write('big.bin', new Blob([big]), { useOctetStream: true });
      assert.equal((await sbx.commands.run('stat -c %s big.bin')).stdout, `${1 << 20}\n`);
      assert.equal(await sha(sbx, 'big.bin'), await hostSha(big));
      // what a command wrote reads back byte for byte
      await sbx.commands.run('printf "\\000\\001\\377\\n" > /tmp/cmd.bin');
      assert.deepEqual(await sbx.files.read('/tmp/cmd.bin', { format: 'bytes' }), new Uint8Array([0, 1, 255, 10]));
    });
  });

  test('writeFiles: several files in one upload, parents made', opts, async () => {
    await withSandbox({}, async (sbx) => {
      const infos = await sbx.files.writeFiles([
        { path: 'multi/a.txt', data: 'A' },
        { path: 'multi/deep/b.bin', data: BYTES.buffer.slice(0) },
        { path: '/tmp/c.txt', data: 'C\n' },
      ]);
      assert.deepEqual(infos.map((i) => i.path).sort(),
        ['/home/user/multi/a.txt', '/home/user/multi/deep/b.bin', '/tmp/c.txt']);
      assert.equal(await sbx.files.read('multi/a.txt'), 'A');
      assert.deepEqual(await sbx.files.read('multi/deep/b.bin', { format: 'bytes' }), BYTES);
      assert.equal(await sbx.files.read('/tmp/c.txt'), 'C\n');
    });
  });

  test('makeDir, list with depth, exists, getInfo', opts, async () => {
    await withSandbox({}, async (sbx) => {
      assert.equal(await sbx.files.makeDir('tree/a/b'), true);
      assert.equal(await sbx.files.makeDir('tree/a/b'), false, 'makeDir of an existing dir');
      await sbx.files.write('tree/top.txt', '12345');
      await sbx.files.write('tree/a/mid.txt', 'm');
      await sbx.files.write('tree/a/b/low.txt', 'l');

      const one = await sbx.files.list('tree');
      assert.deepEqual(one.map((e) => [e.name, e.type, e.path]).sort(), [
        ['a', FileType.DIR, '/home/user/tree/a'],
        ['top.txt', FileType.FILE, '/home/user/tree/top.txt'],
      ]);
      const two = await sbx.files.list('tree', { depth: 2 });
      assert.deepEqual(two.map((e) => e.path).sort(), [
        '/home/user/tree/a', '/home/user/tree/a/b', '/home/user/tree/a/mid.txt', '/home/user/tree/top.txt',
      ]);
      const three = await sbx.files.list('/home/user/tree', { depth: 3 });
      assert.ok(three.some((e) => e.path === '/home/user/tree/a/b/low.txt'));
      await assert.rejects(sbx.files.list('no-such-dir'), FileNotFoundError);

      assert.equal(await sbx.files.exists('tree/top.txt'), true);
      assert.equal(await sbx.files.exists('tree/a'), true);
      assert.equal(await sbx.files.exists('tree/nope'), false);

      const info = await sbx.files.getInfo('tree/top.txt');
      assert.equal(info.name, 'top.txt');
      assert.equal(info.path, '/home/user/tree/top.txt');
      assert.equal(info.type, FileType.FILE);
      assert.equal(info.size, 5);
      assert.equal(info.owner, 'user');
      assert.equal(info.group, 'user');
      assert.match(info.permissions, /^-[r-][w-][x-][r-][w-][x-][r-][w-][x-]$/);
      assert.equal(info.mode & 0o777, modeOf(info.permissions));
      assert.ok(info.modifiedTime instanceof Date && Math.abs(info.modifiedTime - Date.now()) < 120_000,
        `modifiedTime ${info.modifiedTime}`);
      const dir = await sbx.files.getInfo('tree/a');
      assert.equal(dir.type, FileType.DIR);
      assert.match(dir.permissions, /^d/);
      await assert.rejects(sbx.files.getInfo('tree/nope'), FileNotFoundError);
      await assert.rejects(sbx.files.read('tree/nope'), FileNotFoundError);
    });
  });

  test('rename and remove', opts, async () => {
    await withSandbox({}, async (sbx) => {
      await sbx.files.write('old.txt', 'moved');
      const e = await sbx.files.rename('old.txt', 'new.txt');
      assert.equal(e.path, '/home/user/new.txt');
      assert.equal(e.name, 'new.txt');
      assert.equal(await sbx.files.exists('old.txt'), false);
      assert.equal(await sbx.files.read('new.txt'), 'moved');
      await sbx.files.makeDir('d');
      await sbx.files.rename('new.txt', 'd/in-dir.txt');
      assert.equal(await sbx.files.read('d/in-dir.txt'), 'moved');
      await assert.rejects(sbx.files.rename('missing', 'x'), SandboxError);

      await sbx.files.write('d/sub/more.txt', 'x');
      await sbx.files.remove('d/in-dir.txt');
      assert.equal(await sbx.files.exists('d/in-dir.txt'), false);
      // recursive, as envd's os.RemoveAll
      await sbx.files.remove('d');
      assert.equal(await sbx.files.exists('d'), false);
      assert.equal((await sbx.commands.run('test -e /home/user/d && echo there || echo gone')).stdout, 'gone\n');
      // and a missing path is no error
      await sbx.files.remove('never-was');
    });
  });

  test('watchDir: events for a file written, by the SDK and by a command', opts, async () => {
    await withSandbox({}, async (sbx) => {
      await sbx.files.makeDir('watched/sub');
      const events = [];
      const h = await sbx.files.watchDir('watched', (ev) => { events.push(ev); }, {
        recursive: true, timeoutMs: 60_000,
      });
      try {
        await sbx.files.write('watched/by-sdk.txt', 'x');
        assert.ok(await until(10_000, () => events.some((e) => e.name === 'by-sdk.txt')),
          `no event for by-sdk.txt: ${JSON.stringify(events)}`);
        const kinds = new Set(events.filter((e) => e.name === 'by-sdk.txt').map((e) => e.type));
        assert.ok(kinds.has(FilesystemEventType.CREATE) || kinds.has(FilesystemEventType.WRITE), [...kinds].join());
        await sbx.commands.run('echo y > /home/user/watched/sub/by-cmd.txt; rm /home/user/watched/by-sdk.txt');
        assert.ok(await until(10_000, () => events.some((e) => e.name === 'sub/by-cmd.txt')),
          `no event for sub/by-cmd.txt (recursive, relative name): ${JSON.stringify(events)}`);
        assert.ok(await until(10_000, () => events.some((e) => e.name === 'by-sdk.txt' && e.type === FilesystemEventType.REMOVE)),
          `no remove event: ${JSON.stringify(events)}`);
      } finally {
        await h.stop();
      }
      // a directory that is not there
      await assert.rejects(sbx.files.watchDir('not-there', () => {}), FileNotFoundError);
    });
  });
});

// '-rw-r--r--' -> 0o644
function modeOf(perm) {
  let m = 0;
  for (let i = 1; i < 10; i++) m = (m << 1) | (perm[i] === '-' ? 0 : 1);
  return m;
}
