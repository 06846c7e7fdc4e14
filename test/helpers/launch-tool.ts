import { z } from 'zod';
import { defineTool } from '../../src/tool-sdk/index.ts';
import type { AnyToolDefinition } from '../../src/tool-sdk/index.ts';

/** A privileged tool (its calls wait for a human yes) that records each target it was run on. */
export interface LaunchTool {
  readonly tool: AnyToolDefinition;
  /** The `target` of every execution, in order. */
  readonly launched: string[];
}

/** Creates a {@link LaunchTool} named `launch`: not idempotent, answers `launched <target>`. */
export function createLaunchTool(): LaunchTool {
  const launched: string[] = [];
  const tool = defineTool({
    name: 'launch',
    description: 'does something that needs a human yes',
    parameters: z.object({ target: z.string() }),
    tier: 'privileged',
    timeoutMs: 5000,
    idempotent: false,
    execute: ({ target }) => {
      launched.push(target);
      return `launched ${target}`;
    },
  });
  return { tool, launched };
}
