import { z } from 'zod';
import { defineTool } from '../../src/tool-sdk/index.ts';
import type { AnyToolDefinition } from '../../src/tool-sdk/index.ts';

/** A side-effecting tool that blocks until the test opens its gate (or the call is cancelled). */
export interface GateTool {
  readonly tool: AnyToolDefinition;
  /** The effectId of every execution, in order. */
  readonly effects: string[];
  /** The request deadline (epoch ms) every execution was given, in order. */
  readonly deadlines: number[];
  /** How many executions saw their signal abort. */
  aborted(): number;
  /** Lets every waiting and later execution finish with `released`. */
  open(): void;
}

/** Creates a {@link GateTool} named `name`; idempotent unless told otherwise. */
export function createGateTool(name: string, options: { idempotent?: boolean } = {}): GateTool {
  const effects: string[] = [];
  const deadlines: number[] = [];
  let aborted = 0;
  let open: () => void = () => {};
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  const tool = defineTool({
    name,
    description: 'waits until the test opens its gate',
    parameters: z.object({}),
    tier: 'side_effecting',
    timeoutMs: 60_000,
    idempotent: options.idempotent ?? true,
    execute: async (_args, { effectId, signal, deadline }) => {
      effects.push(effectId);
      deadlines.push(deadline);
      await Promise.race([
        opened,
        new Promise((_resolve, reject) =>
          signal.addEventListener('abort', () => {
            aborted++;
            reject(signal.reason);
          }),
        ),
      ]);
      return 'released';
    },
  });
  return { tool, effects, deadlines, aborted: () => aborted, open };
}
