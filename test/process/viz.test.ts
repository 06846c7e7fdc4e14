import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { sessionMachine, turnMachine } from '../../machines/index.ts';
import { RunState } from '../../src/protocol/index.ts';
import { machineGraph } from '../../src/viz/index.ts';

const BIN = fileURLToPath(new URL('../../bin/agentbus.js', import.meta.url));
const README = fileURLToPath(new URL('../../README.md', import.meta.url));
const run = promisify(execFile);

/** Runs the real `agentbus viz`; resolves with stdout, or the exit code and stderr of a failure. */
async function viz(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [BIN, 'viz', ...args]);
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

describe('machine graphs read from the machines themselves', () => {
  it('has every state of the turn machine the machine can rest in, and folds its transient states away', () => {
    const graph = machineGraph(turnMachine);
    expect(graph.states.map((state) => state.id).sort()).toEqual(Object.values(RunState).sort());
    expect(graph.initial).toBe('Preparing');
    // `streamed` is transient: Streaming's done goes straight on, with the guard that picks each way.
    expect(graph.transitions).toContainEqual({ source: 'Streaming', target: 'ToolExecution', event: 'stream done', guards: ['hasPending'], global: false });
    expect(graph.transitions).toContainEqual({ source: 'ToolExecution', target: 'BudgetExceeded', event: 'executeTools done', guards: ['outOfSteps'], global: false });
    expect(graph.transitions.filter((transition) => transition.event === 'CANCEL').map((transition) => transition.source).sort()).toEqual(
      ['AwaitingApproval', 'Compacting', 'Preparing', 'Streaming', 'ToolExecution'],
    );
    expect(graph.transitions.some((transition) => ['streamed', 'toolsRan'].includes(transition.target))).toBe(false);
  });

  it('has the session machine: idle, starting, running, finishing, unwritable', () => {
    const graph = machineGraph(sessionMachine);
    expect(graph.states.map((state) => [state.id, state.type])).toEqual([['idle', 'normal'], ['starting', 'normal'], ['running', 'normal'], ['finishing', 'normal'], ['unwritable', 'final']]);
    expect(graph.transitions).toContainEqual({ source: 'finishing', target: 'idle', event: 'finishTurn done', guards: [], global: false });
  });
});

describe('agentbus viz', () => {
  it('prints the turn machine as Mermaid, naming every state of it', async () => {
    const { code, stdout } = await viz('--format', 'mermaid');
    expect(code).toBe(0);
    expect(stdout.startsWith('stateDiagram-v2\n')).toBe(true);
    for (const state of Object.values(RunState)) expect(stdout).toMatch(new RegExp(`\\b${state}\\b`));
    expect(stdout).toContain('[*] --> Preparing');
    expect(stdout).toContain('Yielding --> [*]');
  });

  it('keeps the README diagram in step with what it prints', async () => {
    const readme = await readFile(README, 'utf8');
    const block = /<!-- agentbus viz --machine turn --format mermaid -->\n```mermaid\n([\s\S]*?)```/.exec(readme);
    expect(block, 'the README has the generated turn machine block').not.toBeNull();
    const { stdout } = await viz('--machine', 'turn', '--format', 'mermaid');
    expect(block![1]).toBe(stdout);
  });

  it('draws an SVG laid out by ELK, one node per state, and JSON with the layout', async () => {
    const svg = await viz('--machine', 'turn', '--format', 'svg');
    expect(svg.stdout).toMatch(/^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    for (const state of Object.values(RunState)) expect(svg.stdout).toContain(`data-state="${state}"`);
    const json = JSON.parse((await viz('--machine', 'session', '--format', 'json')).stdout) as { layout: { states: Array<{ id: string; x: number; y: number }> } };
    expect(json.layout.states.map((state) => state.id)).toEqual(['idle', 'starting', 'running', 'finishing', 'unwritable']);
    // Laid out, not stacked: no two states share a box corner.
    expect(new Set(json.layout.states.map((state) => `${state.x},${state.y}`)).size).toBe(5);
  });

  it('refuses an unknown machine or format with a usage error', async () => {
    const format = await viz('--format', 'png');
    expect(format.code).toBe(2);
    expect(format.stderr).toContain('--format must be one of mermaid, svg, json');
    const machine = await viz('--machine', 'tool');
    expect(machine.code).toBe(2);
    expect(machine.stderr).toContain('--machine must be one of turn, session');
  });
});
