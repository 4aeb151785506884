// bench-e2b's driver (run by bench/e2b/bench-e2b.sh): in one run, the libspace half
// (bench-e2b-native: create + exec `bash -l -c true` as user, and that exec alone) and the
// SDK half (Sandbox.create() + commands.run('true'), kill timed apart, and
// commands.run('true') alone), then the ratios SDK / libspace: the issue's target is a
// p50 of create + run within 1.5x. JSON lines on stdout, as bench.h prints them.
// Usage: node bench-e2b.mjs E2B_DIR NATIVE_BINARY [--runs N] [--max-seconds S] [--template T]
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [e2bDir, native, ...rest] = process.argv.slice(2);
if (!e2bDir || !native) {
  console.error('usage: bench-e2b.mjs E2B_DIR NATIVE_BINARY [--runs N] [--max-seconds S] [--template T]');
  process.exit(2);
}
const MAX_RUNS = 10000;
const MAX_SECONDS = 3600;
const args = { runs: 20, 'max-seconds': 60, template: 'base' };
for (let i = 0; i < rest.length; i += 2) {
  const k = rest[i].replace(/^--/, '');
  if (!(k in args) || rest[i + 1] === undefined) {
    console.error(`bench-e2b: unknown option ${rest[i]} (--runs N, --max-seconds S, --template T)`);
    process.exit(2);
  }
  args[k] = k === 'template' ? rest[i + 1] : Number(rest[i + 1]);
}
if (!Number.isInteger(args.runs) || args.runs < 1 || args.runs > MAX_RUNS) {
  console.error(`bench-e2b: --runs between 1 and ${MAX_RUNS}`);
  process.exit(2);
}
if (!Number.isInteger(args['max-seconds']) || args['max-seconds'] < 1 || args['max-seconds'] > MAX_SECONDS) {
  console.error(`bench-e2b: --max-seconds between 1 and ${MAX_SECONDS}`);
  process.exit(2);
}
for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY', 'SPACE_HOST']) {
  if (!process.env[v]) {
    console.error(`bench-e2b: ${v} is not set (the same spaced: its E2B listener and its socket)`);
    process.exit(2);
  }
}
const { Sandbox } = await import(pathToFileURL(join(e2bDir, 'node_modules/e2b/dist/index.mjs')).href);
const sdkVersion = JSON.parse(readFileSync(join(e2bDir, 'node_modules/e2b/package.json'), 'utf8')).version;

// nearest rank, as bench.h's bench_pct
const pct = (sorted, p) => sorted[Math.max(1, Math.ceil((p / 100) * sorted.length)) - 1];
const r3 = (x) => Math.round(x * 1000) / 1000;
function report(what, v, failures, extra = {}) {
  const line = { bench: 'e2b', what, ...extra, runs: v.length, failures };
  if (v.length) {
    const s = [...v].sort((a, b) => a - b);
    Object.assign(line, {
      p50_ms: r3(pct(s, 50)), p90_ms: r3(pct(s, 90)), p99_ms: r3(pct(s, 99)),
      mean_ms: r3(s.reduce((a, b) => a + b, 0) / s.length), min_ms: r3(s[0]), max_ms: r3(s[s.length - 1]),
    });
  }
  console.log(JSON.stringify(line));
  return line;
}

// ---- libspace ----
const nat = spawnSync(native, ['--runs', String(args.runs), '--max-seconds', String(args['max-seconds']),
  '--template', args.template], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: (2 * args['max-seconds'] + 120) * 1000 });
if (nat.error || nat.status !== 0) {
  console.error(`bench-e2b: ${native} failed: ${nat.error ?? `exit ${nat.status}`}`);
}
const natLines = (nat.stdout || '').split('\n').filter(Boolean).map((l) => JSON.parse(l));
for (const l of natLines) console.log(JSON.stringify(l));
const natRound = natLines.find((l) => l.what.startsWith('libspace: create'));
const natExec = natLines.find((l) => l.what.endsWith('alone'));

// ---- the SDK ----
const now = () => performance.now();
const round = [];
const kill = [];
let roundFail = 0;
let stop = now() + args['max-seconds'] * 1000;
for (let i = 0; i < args.runs && now() < stop; i++) {
  let sbx;
  try {
    const t0 = now();
    sbx = await Sandbox.create(args.template);
    const r = await sbx.commands.run('true');
    const t1 = now();
    if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}`);
    const killed = await sbx.kill();
    const t2 = now();
    if (!killed) throw new Error('kill answered false');
    sbx = null;
    round.push(t1 - t0);
    kill.push(t2 - t1);
  } catch (e) {
    roundFail++;
    console.error(`bench-e2b: SDK round ${i}: ${e}`);
  } finally {
    if (sbx) await sbx.kill().catch(() => {});
  }
}
const execs = [];
let execFail = 0;
let sbx;
try {
  sbx = await Sandbox.create(args.template);
} catch (e) {
  execFail++;
  console.error(`bench-e2b: SDK create for the runs alone: ${e}`);
}
if (sbx) {
  try {
    await sbx.commands.run('true');
    stop = now() + args['max-seconds'] * 1000;
    for (let i = 0; i < args.runs && now() < stop; i++) {
      try {
        const t0 = now();
        await sbx.commands.run('true');
        execs.push(now() - t0);
      } catch (e) {
        execFail++;
        console.error(`bench-e2b: SDK run ${i}: ${e}`);
      }
    }
  } finally {
    await sbx.kill().catch(() => {});
  }
}
const extra = { template: args.template, sdk: sdkVersion };
const sdkRound = report("sdk: Sandbox.create() + commands.run('true')", round, roundFail, extra);
report('sdk: kill', kill, 0, extra);
const sdkExec = report("sdk: commands.run('true') alone", execs, execFail, extra);

function ratio(what, a, b, target) {
  if (!a?.p50_ms || !b?.p50_ms) return;
  const line = { bench: 'e2b', what, p50: r3(a.p50_ms / b.p50_ms), p90: r3(a.p90_ms / b.p90_ms) };
  if (target) Object.assign(line, { target_p50: target, within_target: line.p50 <= target });
  console.log(JSON.stringify(line));
}
ratio('ratio sdk/libspace: create + run true', sdkRound, natRound, 1.5);
ratio('ratio sdk/libspace: run true alone', sdkExec, natExec);
process.exit(roundFail || execFail || nat.status !== 0 ? 1 : 0);
