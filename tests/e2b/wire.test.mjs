// The wire without the SDK (docs/e2b-wire.md §0, §2.1, §3.4): a chunked POST /v2/sandboxes,
// the {"code":404,...} error bodies the SDK branches on, 401s, and a Connect server stream
// whose last envelope is an end-stream (flag 0x02) and whose chunked body is terminated,
// with keepalives on a quiet one.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { Sandbox } from 'e2b';
import { API_URL, KEY_A, killQuietly, envelope, parseEnvelopes, dechunk, TEST_TIMEOUT_MS } from './lib.mjs';

const opts = { timeout: TEST_TIMEOUT_MS };
const url = new URL(API_URL);

// One request by node:http; body: a list of chunks written one by one (chunked, no
// Content-Length), a Buffer (with Content-Length) or nothing. -> {status, headers, body}
function request(method, path, { headers = {}, chunks, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, method, path, headers, agent: false }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(parts), complete: res.complete }));
      res.on('error', reject);
    });
    req.on('error', reject);
    if (chunks) {
      for (const c of chunks) req.write(c);
      req.end();
    } else {
      req.end(body);
    }
  });
}
const json = (r) => JSON.parse(r.body.toString());
const api = { 'X-API-KEY': KEY_A };

// The raw bytes of one exchange on a fresh socket (Connection: close), response head and
// body apart.
function rawExchange(head, body) {
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(url.port), url.hostname);
    const parts = [];
    s.on('data', (d) => parts.push(d));
    s.on('error', reject);
    s.on('end', () => {
      const all = Buffer.concat(parts);
      const sep = all.indexOf('\r\n\r\n');
      if (sep < 0) return reject(new Error(`no response head in ${JSON.stringify(all.toString())}`));
      resolve({ head: all.subarray(0, sep).toString(), body: all.subarray(sep + 4) });
    });
    s.setTimeout(30_000, () => s.destroy(new Error('no answer within 30 s')));
    // not end(): a client that half-closes is a client gone, to spaced as to envd (the
    // stream is dropped); Connection: close has the server close after the answer
    s.write(head);
    s.write(body);
  });
}

describe('wire', { concurrency: 2 }, () => {
  test('POST /v2/sandboxes with a chunked body; DELETE twice; error bodies', opts, async () => {
    const r = await request('POST', '/v2/sandboxes', {
      headers: { ...api, 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' },
      chunks: ['{"templ', 'ateID":"base",', '"timeout":120,"metadata":{"via":"raw"}}'],
    });
    assert.equal(r.status, 201, r.body.toString());
    const sbx = json(r);
    try {
      assert.equal(typeof sbx.sandboxID, 'string');
      assert.equal(sbx.envdVersion, '0.6.4');
      assert.equal(typeof sbx.envdAccessToken, 'string');
      assert.ok(sbx.envdAccessToken.length >= 32, 'an access token too short to be unguessable');
      const info = await request('GET', `/sandboxes/${encodeURIComponent(sbx.sandboxID)}`, { headers: api });
      assert.equal(info.status, 200);
      assert.deepEqual(json(info).metadata, { via: 'raw' });

      const d = await request('DELETE', `/sandboxes/${encodeURIComponent(sbx.sandboxID)}`, { headers: api });
      assert.equal(d.status, 204);
      assert.equal(d.body.length, 0);
      const d2 = await request('DELETE', `/sandboxes/${encodeURIComponent(sbx.sandboxID)}`, { headers: api });
      assert.equal(d2.status, 404);
      const e = json(d2);
      assert.equal(e.code, 404);
      assert.equal(typeof e.message, 'string');
    } finally {
      await killQuietly(sbx.sandboxID);
    }
  });

  test('errors: {"code":404,...} for an unknown sandbox and route, 401 for an unknown key', opts, async () => {
    for (const [m, p] of [['GET', '/sandboxes/nope-not-a-sandbox'], ['POST', '/sandboxes/nope-not-a-sandbox/pause'],
      ['GET', '/sandboxes/nope-not-a-sandbox/metrics'], ['GET', '/v2/no-such-route']]) {
      const r = await request(m, p, { headers: { ...api, 'Content-Type': 'application/json' }, body: m === 'POST' ? '{}' : undefined });
      assert.equal(r.status, 404, `${m} ${p}: ${r.status} ${r.body}`);
      assert.match(String(r.headers['content-type']), /application\/json/);
      const e = json(r);
      assert.equal(e.code, 404, `${m} ${p}: ${r.body}`);
      assert.equal(typeof e.message, 'string');
    }
    // (a request with neither X-API-KEY nor E2b-Sandbox-Id is SPACE's own API: docs/e2b.md)
    const badKey = await request('GET', '/v2/sandboxes', { headers: { 'X-API-KEY': 'e2b_0123456789abcdef0123456789abcdef01234567' } });
    assert.equal(badKey.status, 401);
    assert.equal(json(badKey).code, 401);
  });

  test('a Connect stream: start first, the output, the end, an end-stream envelope, a terminated body', opts, async () => {
    const sbx = await Sandbox.create({ timeoutMs: 120_000 });
    try {
      const body = envelope({ process: { cmd: '/bin/bash', args: ['-l', '-c', 'echo out; echo err >&2; exit 3'] }, stdin: false });
      const head = [
        'POST /process.Process/Start HTTP/1.1',
        `Host: ${url.host}`,
        'Connection: close',
        'Content-Type: application/connect+json',
        'Connect-Protocol-Version: 1',
        `E2b-Sandbox-Id: ${sbx.sandboxId}`,
        'E2b-Sandbox-Port: 49983',
        `X-Access-Token: ${sbx.envdAccessToken}`,
        `Content-Length: ${body.length}`,
        '', '',
      ].join('\r\n');
      const r = await rawExchange(head, body);
      assert.match(r.head, /^HTTP\/1\.1 200 /);
      assert.match(r.head, /\r\ncontent-type: application\/connect\+json/i);
      assert.match(r.head, /\r\ntransfer-encoding: chunked/i);
      const { body: payload, terminated } = dechunk(r.body);
      assert.ok(terminated, 'the chunked body does not end with its last-chunk (0 CRLF CRLF)');
      const env = parseEnvelopes(payload);
      assert.ok(env.length >= 3, JSON.stringify(env));
      assert.ok(env.slice(0, -1).every((e) => e.flags === 0), 'a flag other than 0 before the end');
      assert.ok(Number.isInteger(env[0].json.event?.start?.pid), `first: ${JSON.stringify(env[0].json)}`);
      const last = env[env.length - 1];
      assert.equal(last.flags, 0x02, 'the last envelope is not an end-stream');
      assert.deepEqual(last.json, {}, 'an error in the end-stream of a command that ran');
      const events = env.slice(1, -1).map((e) => e.json.event);
      const out = Buffer.concat(events.filter((e) => e.data?.stdout).map((e) => Buffer.from(e.data.stdout, 'base64')));
      const err = Buffer.concat(events.filter((e) => e.data?.stderr).map((e) => Buffer.from(e.data.stderr, 'base64')));
      assert.equal(out.toString(), 'out\n');
      assert.equal(err.toString(), 'err\n');
      const end = events.filter((e) => e.end);
      assert.equal(end.length, 1);
      assert.equal(end[0].end.exitCode, 3);
      assert.equal(end[0].end.exited, true);

      // a quiet stream carries keepalives at the interval the client asks (envd's
      // Keepalive-Ping-Interval, whole seconds), before the output that ends the quiet
      const quiet = envelope({ process: { cmd: '/bin/bash', args: ['-l', '-c', 'sleep 2.5; echo woke'] }, stdin: false });
      const k = await rawExchange(head.replace('Content-Length: ' + body.length, 'Keepalive-Ping-Interval: 1\r\nContent-Length: ' + quiet.length), quiet);
      const kd = dechunk(k.body);
      assert.ok(kd.terminated);
      const kev = parseEnvelopes(kd.body);
      const firstOut = kev.findIndex((e) => e.json.event?.data);
      const alive = kev.slice(0, firstOut).filter((e) => e.json.event && 'keepalive' in e.json.event);
      assert.ok(firstOut > 0 && alive.length >= 1, `no keepalive in 2.5 s of quiet: ${JSON.stringify(kev.map((e) => e.json))}`);
      assert.equal(kev[kev.length - 1].flags, 0x02);

      // a unary call's error: a non-200 JSON with a string code
      const stat = Buffer.from(JSON.stringify({ path: '/no/such/file' }));
      const u = await request('POST', '/filesystem.Filesystem/Stat', {
        headers: {
          'Content-Type': 'application/json', 'Connect-Protocol-Version': '1', 'E2b-Sandbox-Id': sbx.sandboxId,
          'E2b-Sandbox-Port': '49983', 'X-Access-Token': sbx.envdAccessToken, 'Content-Length': stat.length,
        },
        body: stat,
      });
      assert.equal(u.status, 404, u.body.toString());
      assert.equal(json(u).code, 'not_found');
      // and the same without the access token: 401, before anything is looked at
      const noTok = await request('POST', '/filesystem.Filesystem/Stat', {
        headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'Content-Length': stat.length },
        body: stat,
      });
      assert.equal(noTok.status, 401, noTok.body.toString());
      const h = await request('GET', '/health', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken } });
      assert.equal(h.status, 204);
    } finally {
      await killQuietly(sbx.sandboxId);
    }
  });
});
