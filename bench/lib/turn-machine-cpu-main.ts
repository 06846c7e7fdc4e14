import { createActor, fromPromise } from 'xstate';
import { SafetyTier, ZERO_USAGE } from '../../src/protocol/index.ts';
import { sessionMachine, turnMachine } from '../../machines/index.ts';
import type { ExecuteToolsOutput, HumanAnswer, PlannedCall, QueuedTurn, StreamOutput } from '../../machines/index.ts';
import { STEPS } from './workload.ts';

// The session and turn machines alone under the bench's workload (3 provider calls, 2 batches of 2 read-only tool
// calls), every effect an actor that resolves at once: what XState costs a session, apart from the bus.
// `node --import tsx bench/lib/turn-machine-cpu-main.ts [--sessions=20000] [--rounds=5]`: CPU µs per session, per round.
const arg = (name: string) => process.argv.find((value) => value.startsWith(`--${name}=`))?.slice(name.length + 3);
const sessions = Number(arg('sessions') ?? 20_000);
const rounds = Number(arg('rounds') ?? 5);

let streamed = 0;
const calls = STEPS.map((step, index) => step.toolCalls.map((call, at): PlannedCall => ({ id: `c${index}${at}`, name: call.name, args: call.args, tier: SafetyTier.readOnly })));
const machine = sessionMachine.provide({
  actors: {
    turn: turnMachine.provide({
      actors: {
        prepare: fromPromise(async ({ input }) => ({ needsCompaction: false, request: { model: input.model, messages: [], tools: [] } })),
        compact: fromPromise(async () => ({ usage: ZERO_USAGE, cost: 0 })),
        stream: fromPromise(async ({ input }): Promise<StreamOutput> => (streamed++, { text: STEPS[input.step - 1]?.text ?? '', toolCalls: calls[input.step - 1] ?? [], usage: ZERO_USAGE, cost: 0 })),
        executeTools: fromPromise(async (): Promise<ExecuteToolsOutput | void> => undefined),
        requestApproval: fromPromise(async (): Promise<HumanAnswer | void> => undefined),
      },
      actions: { stateEntered: () => {} },
    }),
    startTurn: fromPromise(async () => ({})),
    finishTurn: fromPromise(async (): Promise<void> => {}),
  },
  actions: { stateEntered: () => {} },
});

async function session(i: number): Promise<void> {
  const turn: QueuedTurn = { turnId: `t${i}`, model: 'scripted:default', maxSteps: 8 };
  const actor = createActor(machine, { input: { queue: [turn] } });
  const idle = new Promise<void>((resolve) => {
    actor.subscribe((snapshot) => {
      if (snapshot.value === 'idle' && snapshot.context.queue.length === 0 && snapshot.context.current === undefined) resolve();
    });
  });
  actor.start();
  await idle;
  actor.stop();
}

for (let round = 0; round <= rounds; round++) {
  const cpu0 = process.cpuUsage();
  // 200 at a time, as the bench runs them.
  for (let i = 0; i < sessions; i += 200) await Promise.all(Array.from({ length: 200 }, (_, k) => session(i + k)));
  const cpu = process.cpuUsage(cpu0);
  if (round > 0) process.stdout.write(`${(((cpu.user + cpu.system) / sessions)).toFixed(1)} µs CPU per session (${streamed / sessions} provider calls each)\n`);
  streamed = 0;
}
