import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compiledCli } from '../../bin/compiled.js';

/** Time to ready of `agentbus up`, compiled and from the sources, against a bare `node -e` start, in one run. */
export interface ColdStartFigure {
  /** `node -e` printing one line: spawn to that line (ms), the floor of any Node process. */
  readonly bareNodeMs: readonly number[];
  /** `agentbus up` (all five services, embedded nats-server) from spawn to "agentbus is up", compiled CLI and services. */
  readonly upCompiledMs: readonly number[];
  /** The same with `AGENTBUS_FROM_SOURCE=1`: the TypeScript through tsx. */
  readonly upSourceMs: readonly number[];
  /** The 1-minute load average before and after: the figures are only comparable with it. */
  readonly loadAverage: readonly [number, number];
}

/** Options of {@link measureColdStart}. */
export interface ColdStartOptions {
  /** The agentbus checkout (its bin/agentbus.js is started). */
  readonly root: string;
  readonly rounds: number;
  /** Environment of the started processes (offline: no keys, no NATS_URL). */
  readonly env: NodeJS.ProcessEnv;
  readonly readLoad: () => number;
  readonly timeoutMs?: number;
}

/** Spawns `args`, resolves with the ms until `ready` shows on stdout or stderr, then stops it (SIGINT) and awaits its exit. */
function timeToReady(args: readonly string[], options: { cwd: string; env: NodeJS.ProcessEnv; ready: string; timeoutMs: number }): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, args, { cwd: options.cwd, env: options.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    let readyMs: number | undefined;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${args.join(' ')}: not ready within ${options.timeoutMs} ms\n${output}`));
    }, options.timeoutMs);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (readyMs === undefined && output.includes(options.ready)) {
        readyMs = performance.now() - started;
        // Stopping is not timed: up stops its services (and SIGKILLs them after its grace) before it exits.
        child.kill('SIGINT');
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      if (readyMs === undefined) reject(new Error(`${args.join(' ')} exited (code ${code}) before it was ready\n${output}`));
      else resolve(readyMs);
    });
  });
}

/** Compiles dist/ as `npm install` does (bin/build.js), so that the compiled runs are of the sources as they are. */
export function buildCompiled(root: string): void {
  const build = spawnSync(process.execPath, [join(root, 'bin', 'build.js')], { cwd: root, encoding: 'utf8' });
  if (build.status !== 0 || compiledCli(root) === undefined) throw new Error(`bin/build.js did not leave a fresh dist/: ${build.stderr}`);
}

/** This environment without what would pick a bus or a real model: `up` runs offline on its embedded bus. */
export function offlineEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const copy = { ...env };
  for (const name of ['NATS_URL', 'OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'OLLAMA_HOST', 'AGENTBUS_MODEL', 'AGENTBUS_CONFIG', 'AGENTBUS_SCRIPT']) delete copy[name];
  return copy;
}

/** The figure as one line for the log: the best of each, and its ratio to a bare Node start. */
export function describeColdStart(figure: ColdStartFigure): string {
  const bare = Math.min(...figure.bareNodeMs);
  const compiled = Math.min(...figure.upCompiledMs);
  const source = Math.min(...figure.upSourceMs);
  return `agentbus up ready in ${compiled.toFixed(0)} ms compiled (${(compiled / bare).toFixed(1)}× a bare node -e start of ${bare.toFixed(0)} ms), ${source.toFixed(0)} ms from the sources through tsx (${(source / bare).toFixed(1)}×); best of ${figure.bareNodeMs.length}, load ${figure.loadAverage.map((load) => load.toFixed(2)).join(' → ')}`;
}

/**
 * Starts `agentbus up` in an empty folder `rounds` times compiled and as many from the sources, interleaved with a
 * bare `node -e` start, each process stopped before the next starts. The compiled runs need a fresh dist/
 * (`npm run build`).
 */
export async function measureColdStart(options: ColdStartOptions): Promise<ColdStartFigure> {
  const loadBefore = options.readLoad();
  const timeoutMs = options.timeoutMs ?? 60_000;
  const bin = join(options.root, 'bin', 'agentbus.js');
  const bareNodeMs: number[] = [];
  const upCompiledMs: number[] = [];
  const upSourceMs: number[] = [];
  for (let round = 0; round < options.rounds; round++) {
    const cwd = await mkdtemp(join(tmpdir(), 'agentbus-cold-'));
    try {
      await writeFile(join(cwd, 'README.md'), '# cold start\n');
      const env = { ...options.env, AGENTBUS_DASHBOARD_PORT: '0' };
      bareNodeMs.push(await timeToReady(['-e', 'console.log("ready")'], { cwd, env, ready: 'ready', timeoutMs }));
      upCompiledMs.push(await timeToReady([bin, 'up'], { cwd, env: { ...env, AGENTBUS_FROM_SOURCE: '0' }, ready: 'agentbus is up', timeoutMs }));
      upSourceMs.push(await timeToReady([bin, 'up'], { cwd, env: { ...env, AGENTBUS_FROM_SOURCE: '1' }, ready: 'agentbus is up', timeoutMs }));
    } finally {
      await rm(cwd, { recursive: true, force: true });
    }
  }
  return { bareNodeMs, upCompiledMs, upSourceMs, loadAverage: [loadBefore, options.readLoad()] };
}
