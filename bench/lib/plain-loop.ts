import { STEPS, TOOL_NAME, deltas, lookup } from './workload.ts';

interface Message {
  readonly role: 'user' | 'assistant' | 'tool';
  readonly content: string;
  readonly toolCalls?: ReadonlyArray<{ id: string; name: string; args: { key: string } }>;
  readonly toolCallId?: string;
}

type Chunk = { type: 'text-delta'; text: string } | { type: 'tool-call'; id: string; name: string; args: { key: string } };

/** The scripted model: the step is the number of assistant messages so far; text streams word by word. */
async function* model(messages: readonly Message[]): AsyncGenerator<Chunk> {
  const step = STEPS[messages.filter((message) => message.role === 'assistant').length] ?? STEPS.at(-1)!;
  for (const text of deltas(step.text)) yield { type: 'text-delta', text };
  let n = 0;
  for (const call of step.toolCalls) yield { type: 'tool-call', id: `call_${messages.length}_${n++}`, name: call.name, args: call.args };
}

const tools: Record<string, (args: { key: string }) => Promise<string>> = {
  [TOOL_NAME]: async ({ key }) => lookup(key),
};

/**
 * The floor without a bus: a plain in-process async loop over the same scripted model and tool. Streams
 * the model, runs the tool calls of a step in parallel, appends to an in-memory history, until the model
 * asks for no tools. Returns the answer.
 */
export async function runPlainSession(prompt: string, onDelta: (text: string) => void = () => {}): Promise<string> {
  const messages: Message[] = [{ role: 'user', content: prompt }];
  for (let step = 0; step < 8; step++) {
    let text = '';
    const calls: Array<{ id: string; name: string; args: { key: string } }> = [];
    for await (const chunk of model(messages)) {
      if (chunk.type === 'text-delta') {
        text += chunk.text;
        onDelta(chunk.text);
      } else calls.push(chunk);
    }
    messages.push(calls.length > 0 ? { role: 'assistant', content: text, toolCalls: calls } : { role: 'assistant', content: text });
    if (calls.length === 0) return text;
    const results = await Promise.all(calls.map((call) => tools[call.name]!(call.args)));
    calls.forEach((call, index) => messages.push({ role: 'tool', content: results[index]!, toolCallId: call.id }));
  }
  throw new Error('the plain loop ran out of steps');
}
