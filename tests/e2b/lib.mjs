// What the E2B test files share: the environment run.sh sets, a sandbox per test that is
// killed whatever happens, polling, and the raw wire helpers (Connect envelopes, a
// de-chunker) the checks without the SDK use.
import assert from 'node:assert/strict';
import { Sandbox, SandboxNotFoundError } from 'e2b';

export const API_URL = required('E2B_API_URL');
export const KEY_A = required('E2B_API_KEY');
export const KEY_B = required('E2B_API_KEY_B');
export const RUNTIME = process.env.SPACE_E2B_RUNTIME || 'ns';
// Tells this run's sandboxes from any other's in lists (metadata filter).
export const RUN = `r${process.pid}-${Date.now().toString(36)}`;
// Bounds of one test; the whole suite must stay within run.sh's.
export const TEST_TIMEOUT_MS = 90_000;
// A test's sandboxes live this long at most, should a kill in a finally be lost.
export const SANDBOX_TIMEOUT_MS = 180_000;

function required(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the suite through tests/e2b/run.sh`);
  return v;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export const enc = (s) => new TextEncoder().encode(s);
export const dec = (b) => new TextDecoder().decode(b);

// A sandbox for fn, killed afterwards (and the kill's answer checked: true, or false when
// the test already killed it).
export async function withSandbox(opts, fn) {
  const sbx = await Sandbox.create({ timeoutMs: SANDBOX_TIMEOUT_MS, ...opts });
  try {
    return await fn(sbx);
  } finally {
    await killQuietly(sbx.sandboxId, opts?.apiKey);
  }
}

// Kills id and reports a failure to kill on stderr (the test's own assertion is what counts).
export async function killQuietly(id, apiKey) {
  try {
    await Sandbox.kill(id, apiKey ? { apiKey } : undefined);
  } catch (e) {
    console.error(`# kill ${id}: ${e}`);
  }
}

// Polls check (an async function returning a truthy value when done) every stepMs, for at
// most ms; returns its last value (falsy on a timeout). Exceptions count as "not yet".
export async function until(ms, check, stepMs = 100) {
  const end = Date.now() + ms;
  let v;
  for (;;) {
    try {
      v = await check();
    } catch {
      v = undefined;
    }
    if (v || Date.now() >= end) return v;
    await sleep(stepMs);
  }
}

// The sandbox is gone for the control plane: getInfo throws SandboxNotFoundError.
export async function assertGone(id, apiKey) {
  await assert.rejects(Sandbox.getInfo(id, apiKey ? { apiKey } : undefined), SandboxNotFoundError);
}

// Every item of a paginator (at most maxPages pages), and the pages' sizes.
export async function allPages(paginator, maxPages = 50) {
  const items = [];
  const sizes = [];
  while (paginator.hasNext && sizes.length < maxPages) {
    const page = await paginator.nextItems();
    sizes.push(page.length);
    items.push(...page);
  }
  return { items, sizes };
}

// ---- raw wire ----

// One Connect envelope: flags, a 4-byte big-endian length, the JSON.
export function envelope(obj, flags = 0) {
  const json = Buffer.from(JSON.stringify(obj));
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

// The envelopes of a Connect stream's body: [{flags, json}]; throws on a truncated one.
export function parseEnvelopes(buf) {
  const out = [];
  let off = 0;
  while (off < buf.length) {
    assert.ok(buf.length - off >= 5, `a truncated envelope head at byte ${off}`);
    const flags = buf[off];
    const len = buf.readUInt32BE(off + 1);
    assert.ok(buf.length - off - 5 >= len, `a truncated envelope body at byte ${off} (length ${len})`);
    out.push({ flags, json: JSON.parse(buf.subarray(off + 5, off + 5 + len).toString()) });
    off += 5 + len;
  }
  return out;
}

// An HTTP/1.1 chunked body as it came off the wire -> {body, terminated}: terminated when
// the last-chunk (0 CRLF, then the empty trailer line) was there.
export function dechunk(raw) {
  const parts = [];
  let off = 0;
  for (;;) {
    const eol = raw.indexOf('\r\n', off);
    if (eol < 0) return { body: Buffer.concat(parts), terminated: false };
    const size = parseInt(raw.subarray(off, eol).toString().split(';')[0], 16);
    assert.ok(Number.isFinite(size), `a bad chunk size line at byte ${off}`);
    if (size === 0) {
      return { body: Buffer.concat(parts), terminated: raw.subarray(eol + 2).indexOf('\r\n') >= 0 };
    }
    if (raw.length < eol + 2 + size + 2) return { body: Buffer.concat(parts), terminated: false };
    parts.push(raw.subarray(eol + 2, eol + 2 + size));
    assert.equal(raw.subarray(eol + 2 + size, eol + 4 + size).toString(), '\r\n', 'a chunk not followed by CRLF');
    off = eol + 4 + size;
  }
}
