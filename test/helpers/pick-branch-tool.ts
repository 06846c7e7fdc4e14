import { z } from 'zod';
import { defineTool } from '../../src/tool-sdk/index.ts';

/**
 * `pick_branch`, a side-effecting tool that asks the user twice (`context.ask`: a branch from an enum, then release
 * notes) before it "releases": what the interrupt and chat-question tests suspend a call with. `runs` holds the answers
 * of each run, in order; `onReleased` hears each release's effect id.
 */
export function createPickBranchTool(options: { readonly onReleased?: (effectId: string) => void } = {}) {
  const runs: unknown[][] = [];
  const tool = defineTool({
    name: 'pick_branch',
    description: 'asks the user which branch to release, then releases it',
    parameters: z.object({}),
    tier: 'side_effecting',
    timeoutMs: 10_000,
    idempotent: false,
    execute: async (_args, context) => {
      runs.push([]);
      const branch = await context.ask('Which branch should I release?', { schema: { type: 'string', enum: ['main', 'next'] } });
      runs.at(-1)!.push(branch);
      const notes = await context.ask('Any release notes?');
      runs.at(-1)!.push(notes);
      options.onReleased?.(context.effectId);
      return `released ${String(branch)} with notes: ${String(notes)}`;
    },
  });
  return { tool, runs };
}
