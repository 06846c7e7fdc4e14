import { z } from 'zod';
import { AgentbusError, ErrorCode } from '../../../src/errors.ts';
import type { EventDataMap, Prompt } from '../../../src/protocol/index.ts';
import type { ToolInfo } from '../ports.ts';
import { agentToolOf } from '../agents/agent-tools.ts';

/**
 * The `user.message` a prompt is logged as: its attachments appended to the text, each in a `<file name="…">`
 * block (what the model reads, and what memory indexes), and listed by name and size in `files`. `dryRun` is
 * never logged: a dry run logs nothing.
 *
 * @example
 * loggedPrompt({ text: 'Review this', attachments: [{ name: 'a.ts', content: 'let x = 1;\n' }] }).text;
 * // 'Review this\n\n<file name="a.ts">\nlet x = 1;\n</file>'
 */
export function loggedPrompt(prompt: Prompt): EventDataMap['user.message'] {
  const { attachments, dryRun: _dryRun, ...rest } = prompt;
  if (!attachments || attachments.length === 0) return rest;
  const blocks = attachments.map(({ name, content }) => `<file name=${JSON.stringify(name)}>\n${content}${content.endsWith('\n') || content === '' ? '' : '\n'}</file>`);
  return { ...rest, text: [prompt.text, ...blocks].join('\n\n'), files: attachments.map(({ name, content }) => ({ name, chars: content.length })) };
}

/**
 * Checks a prompt's `forceTool` against the tools its first step would be offered (live workers' tools, and the
 * session's agent tools: `agent__<name>` / `handoff__<name>` of its tenant's profiles, as the active profile allows):
 * the name must be one of them, and the arguments must match its parameter schema. Throws `unknown_tool` or
 * `invalid_arguments` with what is wrong. A schema that cannot be read here is left to the worker, which checks the
 * arguments again.
 */
export function checkForcedCall(tools: readonly ToolInfo[], call: NonNullable<Prompt['forceTool']>): void {
  const tool = tools.find((candidate) => candidate.name === call.name);
  if (!tool) {
    const names = tools.map((candidate) => candidate.name).sort();
    const what = agentToolOf(call.name)
      ? `this session may use no agent tool named ${JSON.stringify(call.name)} (a profile of its own tenant, allowed by the profile it runs as)`
      : `no live worker serves a tool named ${JSON.stringify(call.name)}`;
    throw new AgentbusError(ErrorCode.unknownTool, `forceTool: ${what}; tools: ${names.join(', ') || '(none)'}`);
  }
  let schema: z.ZodType;
  try {
    schema = z.fromJSONSchema(tool.parameters as Parameters<typeof z.fromJSONSchema>[0]);
  } catch {
    return;
  }
  const checked = schema.safeParse(call.args);
  if (checked.success) return;
  const problems = checked.error.issues.map((issue) => `${issue.path.length > 0 ? `${issue.path.join('.')}: ` : ''}${issue.message}`);
  throw new AgentbusError(ErrorCode.invalidArguments, `forceTool: arguments do not match the schema of ${call.name}: ${problems.join('; ')}`);
}
