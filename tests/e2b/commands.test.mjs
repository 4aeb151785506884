// commands.* and pty.* of E2B's SDK 2.51 against spaced (process.Process over Connect:
// docs/e2b-wire.md §3.5, §3.6). Each test makes and kills its own sandbox.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { CommandExitError, TimeoutError, SandboxError } from 'e2b';
import { withSandbox, until, sleep, enc, dec, TEST_TIMEOUT_MS } from './lib.mjs';

const opts = { timeout: TEST_TIMEOUT_MS };

describe('commands', { concurrency: 3 }, () => {
  test('run: stdout, stderr and exit code 0', opts, async () => {
    await withSandbox({}, async (sbx) => {
      const r = await sbx.commands.run('echo hello; echo oops >&2; printf "no newline"');
      assert.equal(r.exitCode, 0);
      assert.equal(r.stdout, 'hello\nno newline');
      assert.equal(r.stderr, 'oops\n');
      assert.equal(r.error, undefined);
      // a command the SDK wraps in bash -l -c: shell syntax works
      const r2 = await sbx.commands.run('x=$((6*7)); for i in 1 2; do echo "$x-$i"; done | tr - :');
      assert.equal(r2.stdout, '42:1\n42:2\n');
    });
  });

  test('run: a non-zero exit is CommandExitError with the code and the output', opts, async () => {
    await withSandbox({}, async (sbx) => {
      await assert.rejects(sbx.commands.run('echo partial; echo bad >&2; exit 7'), (e) => {
        assert.ok(e instanceof CommandExitError, `${e}`);
        assert.equal(e.exitCode, 7);
        assert.equal(e.stdout, 'partial\n');
        assert.equal(e.stderr, 'bad\n');
        return true;
      });
      await assert.rejects(sbx.commands.run('false'), (e) => e instanceof CommandExitError && e.exitCode === 1);
      // a command that does not exist: bash's 127
      await assert.rejects(sbx.commands.run('no-such-command-here'), (e) => {
        assert.ok(e instanceof CommandExitError);
        assert.equal(e.exitCode, 127);
        assert.match(e.stderr, /no-such-command-here/);
        return true;
      });
      // onStdout/onStderr see the data as it comes
      const seen = { out: '', err: '' };
      const r = await sbx.commands.run('echo a; echo b >&2; echo c', {
        onStdout: (d) => { seen.out += d; },
        onStderr: (d) => { seen.err += d; },
      });
      assert.equal(seen.out, 'a\nc\n');
      assert.equal(seen.err, 'b\n');
      assert.equal(r.stdout, 'a\nc\n');
    });
  });

  test('run: envs of the sandbox and of the command, the command\'s winning', opts, async () => {
    await withSandbox({ envs: { SBX_ONLY: 'from-create', BOTH: 'sandbox' } }, async (sbx) => {
      const r = await sbx.commands.run('echo "$SBX_ONLY|$BOTH|$CMD_ONLY"', {
        envs: { BOTH: 'command', CMD_ONLY: 'a b  c' },
      });
      assert.equal(r.stdout, 'from-create|command|a b  c\n');
      const r2 = await sbx.commands.run('echo "$SBX_ONLY|$BOTH|${CMD_ONLY-unset}"');
      assert.equal(r2.stdout, 'from-create|sandbox|unset\n');
    });
  });

  test('run: cwd, absolute and relative to the home', opts, async () => {
    await withSandbox({}, async (sbx) => {
      assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n');
      await sbx.commands.run('mkdir -p sub/dir');
      assert.equal((await sbx.commands.run('pwd', { cwd: 'sub/dir' })).stdout, '/home/user/sub/dir\n');
      // a cwd that does not exist fails the start, it does not run elsewhere
      await assert.rejects(sbx.commands.run('echo ran', { cwd: '/no/such/dir' }), SandboxError);
    });
  });

  test('run: the default user is user (home /home/user), root on request', opts, async () => {
    await withSandbox({}, async (sbx) => {
      const d = await sbx.commands.run('whoami; pwd; echo "$HOME"; id -u');
      assert.equal(d.stdout, 'user\n/home/user\n/home/user\n1000\n');
      const r = await sbx.commands.run('whoami; pwd; echo "$HOME"; id -u', { user: 'root' });
      assert.equal(r.stdout, 'root\n/root\n/root\n0\n');
      const u = await sbx.commands.run('whoami', { user: 'user' });
      assert.equal(u.stdout, 'user\n');
      // what user makes is user's; root's home is not user's to write
      await sbx.commands.run('touch mine');
      assert.equal((await sbx.commands.run('stat -c %U /home/user/mine', { user: 'root' })).stdout, 'user\n');
      await assert.rejects(sbx.commands.run('touch /root/x'), CommandExitError);
    });
  });

  test('run: timeoutMs kills the command at its deadline', opts, async () => {
    await withSandbox({}, async (sbx) => {
      const t0 = Date.now();
      await assert.rejects(
        sbx.commands.run('sleep 4; echo late > /tmp/late', { timeoutMs: 1000 }),
        (e) => e instanceof TimeoutError || e instanceof CommandExitError,
      );
      const took = Date.now() - t0;
      assert.ok(took < 3500, `the command came back after ${took} ms, not at its 1 s timeout`);
      // envd's semantics: the process dies with the deadline, it does not outlive it
      await sleep(4500 - (Date.now() - t0));
      const r = await sbx.commands.run('cat /tmp/late 2>/dev/null || echo none');
      assert.equal(r.stdout, 'none\n');
      const left = await sbx.commands.list();
      assert.ok(!left.some((p) => p.args.join(' ').includes('sleep 4')), JSON.stringify(left));
      // a background command's deadline holds with nobody connected to it
      const h = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 1500 });
      await h.disconnect();
      assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid));
      assert.ok(await until(8000, async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid), 250),
        'a disconnected background command outlived its 1.5 s timeout');
    });
  });

  test('background: list, kill, and the handle ends', opts, async () => {
    await withSandbox({}, async (sbx) => {
      const h = await sbx.commands.run('sleep 60', { background: true, timeoutMs: 0 });
      assert.ok(Number.isInteger(h.pid) && h.pid > 0, `pid ${h.pid}`);
      const list = await sbx.commands.list();
      const me = list.find((p) => p.pid === h.pid);
      assert.ok(me, `pid ${h.pid} not in ${JSON.stringify(list)}`);
      assert.equal(me.cmd, '/bin/bash');
      assert.deepEqual(me.args, ['-l', '-c', 'sleep 60']);
      assert.equal(await sbx.commands.kill(h.pid), true);
      await assert.rejects(h.wait(), (e) => e instanceof CommandExitError && e.exitCode !== 0);
      assert.ok(await until(5000, async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid)),
        'the killed command is still listed');
      assert.equal(await sbx.commands.kill(h.pid), false, 'a second kill of a gone pid');
      assert.equal(await sbx.commands.kill(999999), false, 'a pid that never was');
    });
  });

  test('background: connect by pid after a disconnect sees later output and the end', opts, async () => {
    await withSandbox({}, async (sbx) => {
      const h = await sbx.commands.run('for i in 1 2 3 4 5 6 7 8; do echo tick$i; sleep 0.4; done; exit 3',
        { background: true });
      await h.disconnect();
      await sleep(500);
      // the process outlived the stream that started it
      assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid), 'gone after the disconnect');
      let streamed = '';
      const h2 = await sbx.commands.connect(h.pid, { onStdout: (d) => { streamed += d; } });
      assert.equal(h2.pid, h.pid);
      await assert.rejects(h2.wait(), (e) => {
        assert.ok(e instanceof CommandExitError, `${e}`);
        assert.equal(e.exitCode, 3);
        assert.match(e.stdout, /tick8\n$/);
        return true;
      });
      assert.match(streamed, /tick8\n$/);
    });
  });

  test('background: sendStdin and closeStdin with stdin:true', opts, async () => {
    await withSandbox({}, async (sbx) => {
      const h = await sbx.commands.run('read a; read b; echo "got $a and $b"', { background: true, stdin: true });
      await sbx.commands.sendStdin(h.pid, 'one\n');
      await h.sendStdin(enc('two\n'));
      const r = await h.wait();
      assert.equal(r.stdout, 'got one and two\n');
      const c = await sbx.commands.run('wc -c', { background: true, stdin: true });
      await c.sendStdin('abcdef');
      await sbx.commands.closeStdin(c.pid);
      assert.equal((await c.wait()).stdout.trim(), '6');
      // without stdin:true there is nothing to send to
      const n = await sbx.commands.run('sleep 30', { background: true });
      await assert.rejects(sbx.commands.sendStdin(n.pid, 'x'), SandboxError);
      await n.kill();
    });
  });
});

describe('pty', { concurrency: 2 }, () => {
  test('pty: create, sendInput, resize, kill', opts, async () => {
    await withSandbox({}, async (sbx) => {
      let out = '';
      const h = await sbx.pty.create({ cols: 80, rows: 24, timeoutMs: 60_000, onData: (d) => { out += dec(d); } });
      assert.ok(h.pid > 0);
      await sbx.pty.sendInput(h.pid, enc('echo "pty:$((6*7))"; tty; stty size; echo "me:$(whoami)"\n'));
      assert.ok(await until(10_000, () => /pty:42/.test(out) && /24 80/.test(out) && /me:\w+\r?\n/.test(out)),
        `pty output: ${JSON.stringify(out)}`);
      assert.match(out, /\/dev\/pts\/\d+/);
      assert.match(out, /me:user\r?\n/);
      await sbx.pty.resize(h.pid, { cols: 100, rows: 30 });
      out = '';
      await sbx.pty.sendInput(h.pid, enc('stty size\n'));
      assert.ok(await until(10_000, () => /30 100/.test(out)), `after resize: ${JSON.stringify(out)}`);
      // a pty is a process like the others
      assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid));
      assert.equal(await sbx.pty.kill(h.pid), true);
      await assert.rejects(h.wait(), CommandExitError);
      assert.equal(await sbx.pty.kill(h.pid), false);
    });
  });

  test('pty: the shell\'s exit code ends the handle', opts, async () => {
    await withSandbox({}, async (sbx) => {
      let out = '';
      const h = await sbx.pty.create({ cols: 80, rows: 24, cwd: '/tmp', envs: { PTY_VAR: 'pv' }, user: 'root',
        onData: (d) => { out += dec(d); } });
      await sbx.pty.sendInput(h.pid, enc('echo "$PTY_VAR:$(pwd):$(whoami)"; exit 5\n'));
      await assert.rejects(h.wait(), (e) => e instanceof CommandExitError && e.exitCode === 5);
      assert.match(out, /pv:\/tmp:root/);
    });
  });
});
