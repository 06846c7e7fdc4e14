import { generateText, stepCountIs, tool } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import type { LanguageModelV3CallOptions, LanguageModelV3Content, LanguageModelV3GenerateResult } from '@ai-sdk/provider';
import { z } from 'zod';
import { STEPS, TOOL_NAME, lookup } from '../lib/workload.ts';

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 10, text: 10, reasoning: undefined },
};

/** The scripted model: the step is the number of assistant messages in the prompt. */
function answer(options: LanguageModelV3CallOptions): LanguageModelV3GenerateResult {
  const stepIndex = options.prompt.filter((message) => message.role === 'assistant').length;
  const step = STEPS[stepIndex] ?? STEPS.at(-1)!;
  const content: LanguageModelV3Content[] = [{ type: 'text', text: step.text }];
  step.toolCalls.forEach((call, n) =>
    content.push({ type: 'tool-call', toolCallId: `call_${stepIndex}_${n}`, toolName: call.name, input: JSON.stringify(call.args) }),
  );
  return {
    content,
    finishReason: { unified: step.toolCalls.length > 0 ? 'tool-calls' : 'stop', raw: undefined },
    usage,
    warnings: [],
  };
}

const model = new MockLanguageModelV3({ doGenerate: async (options) => answer(options) });
// The mock records every call; a long run would keep them all in memory.
const forgetCalls = () => {
  model.doGenerateCalls.length = 0;
};

const tools = {
  [TOOL_NAME]: tool({
    description: 'Looks up the value of a key.',
    inputSchema: z.object({ key: z.string() }),
    execute: async ({ key }) => lookup(key),
  }),
};

/** One session of the workload through the Vercel AI SDK's `generateText` with its mock model. */
export async function runVercelSession(prompt: string): Promise<string> {
  const result = await generateText({ model, tools, prompt, stopWhen: stepCountIs(8) });
  if (model.doGenerateCalls.length > 1000) forgetCalls();
  if (result.steps.length !== STEPS.length) throw new Error(`vercel: ${result.steps.length} steps`);
  return result.text;
}
