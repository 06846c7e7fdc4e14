import { describe, expect, it } from 'vitest';
import { ProviderError } from '../../src/errors.ts';
import type { ChunkBody } from '../../src/protocol/index.ts';
import type { AdapterRequest, ProviderAdapter } from '../../services/provider/adapter.ts';
import { jsonActionInstructions, parseJsonAction, toJsonActionMessages, withJsonActions } from '../../services/provider/json-action.ts';
import { findJsonObject, repairJson } from '../../services/provider/json-repair.ts';

const tools = [
  { name: 'read_file', description: 'Reads a file.', parameters: { type: 'object', properties: { path: { type: 'string' } } } },
  { name: 'list_dir', description: 'Lists a folder.', parameters: { type: 'object', properties: {} } },
];
const toolNames = tools.map((tool) => tool.name);

describe('repairJson', () => {
  it('leaves valid JSON equal', () => {
    const text = '{"a": [1, 2, {"b": "c, }"}], "d": null}';
    expect(JSON.parse(repairJson(text))).toEqual(JSON.parse(text));
  });

  it('removes trailing commas in objects and arrays', () => {
    expect(JSON.parse(repairJson('{"a": [1, 2,], "b": 3,}'))).toEqual({ a: [1, 2], b: 3 });
  });

  it('turns single-quoted strings into JSON strings, keeping quotes inside', () => {
    expect(JSON.parse(repairJson(`{'path': 'it\\'s "here".txt'}`))).toEqual({ path: `it's "here".txt` });
  });

  it('quotes unquoted keys but not words inside strings', () => {
    expect(JSON.parse(repairJson('{action: "finish", final: "key: value, done"}'))).toEqual({ action: 'finish', final: 'key: value, done' });
  });

  it('maps Python literals and typographic quotes', () => {
    expect(JSON.parse(repairJson('{\u201Cok\u201D: True, "none": None}'))).toEqual({ ok: true, none: null });
  });
});

describe('findJsonObject', () => {
  it('takes the object out of a code fence', () => {
    expect(findJsonObject('Here you go:\n```json\n{"action": "finish", "final": "hi"}\n```\nBye')).toEqual({ action: 'finish', final: 'hi' });
  });

  it('takes the object out of surrounding prose', () => {
    expect(findJsonObject('I will call {"action": "tool", "tool_name": "list_dir", "args": {}} now.')).toEqual({
      action: 'tool',
      tool_name: 'list_dir',
      args: {},
    });
  });

  it('returns undefined for text without an object', () => {
    expect(findJsonObject('just words')).toBeUndefined();
  });
});

describe('parseJsonAction', () => {
  it('reads a tool action with its arguments', () => {
    expect(parseJsonAction('{"action":"tool","tool_name":"read_file","args":{"path":"a.txt"}}', toolNames)).toEqual({
      ok: true,
      action: { action: 'tool', toolName: 'read_file', args: { path: 'a.txt' } },
    });
  });

  it('mends a fenced reply with single quotes, unquoted keys and a trailing comma', () => {
    const text = "Sure!\n```\n{action: 'tool', tool_name: 'read_file', args: {path: 'b.txt',},}\n```";
    expect(parseJsonAction(text, toolNames)).toEqual({ ok: true, action: { action: 'tool', toolName: 'read_file', args: { path: 'b.txt' } } });
  });

  it('reads a finish action', () => {
    expect(parseJsonAction('{"action": "finish", "final": "The answer is 4."}', toolNames)).toEqual({
      ok: true,
      action: { action: 'finish', final: 'The answer is 4.' },
    });
  });

  it('accepts arguments sent as a JSON string', () => {
    const result = parseJsonAction('{"action":"tool","tool_name":"read_file","args":"{\\"path\\":\\"c\\"}"}', toolNames);
    expect(result).toEqual({ ok: true, action: { action: 'tool', toolName: 'read_file', args: { path: 'c' } } });
  });

  it('refuses a tool that is not offered, naming the ones that are', () => {
    const result = parseJsonAction('{"action":"tool","tool_name":"rm_rf","args":{}}', toolNames);
    expect(result.ok).toBe(false);
    expect(!result.ok && result.reason).toContain('read_file, list_dir');
  });

  it('refuses an unknown action and plain prose', () => {
    expect(parseJsonAction('{"action":"dance"}', toolNames)).toMatchObject({ ok: false, foundJson: true });
    expect(parseJsonAction('Hello there', toolNames)).toMatchObject({ ok: false, foundJson: false });
  });
});

describe('toJsonActionMessages', () => {
  it('adds the instructions after the system messages and rewrites tool history', () => {
    const messages = toJsonActionMessages(
      [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Read a.txt' },
        { role: 'assistant', content: '', toolCalls: [{ id: 'c1', name: 'read_file', args: { path: 'a.txt' } }] },
        { role: 'tool', toolCallId: 'c1', name: 'read_file', content: 'hello', isError: false },
      ],
      tools,
    );
    expect(messages.map((message) => message.role)).toEqual(['system', 'system', 'user', 'assistant', 'user']);
    expect(messages[1]?.content).toBe(jsonActionInstructions(tools));
    expect(JSON.parse(messages[3]!.content)).toEqual({ action: 'tool', tool_name: 'read_file', args: { path: 'a.txt' } });
    expect(messages[4]?.content).toContain('read_file (call c1) returned:\nhello');
  });
});

/** An adapter that answers each call with the next text and records what it was asked. */
function replies(texts: readonly string[]): ProviderAdapter & { requests: AdapterRequest[] } {
  const requests: AdapterRequest[] = [];
  let index = 0;
  return {
    name: 'ollama',
    requests,
    async *generate(request) {
      requests.push(request);
      const text = texts[Math.min(index, texts.length - 1)] ?? '';
      index += 1;
      yield { type: 'text-delta', text: text.slice(0, 5) };
      yield { type: 'text-delta', text: text.slice(5) };
      yield { type: 'usage', usage: { inputTokens: 10, outputTokens: 5 } };
      yield { type: 'done', finishReason: 'stop' };
    },
  };
}

async function collect(iterable: AsyncIterable<ChunkBody>): Promise<ChunkBody[]> {
  const chunks: ChunkBody[] = [];
  for await (const chunk of iterable) chunks.push(chunk);
  return chunks;
}

const request: AdapterRequest = { requestId: 'r1', model: 'llama3', messages: [{ role: 'user', content: 'Read a.txt' }], tools };

describe('withJsonActions', () => {
  it('turns a JSON tool action into a tool-call chunk and sends no native tools', async () => {
    const inner = replies(['{"action":"tool","tool_name":"read_file","args":{"path":"a.txt"}}']);
    const chunks = await collect(withJsonActions(inner, { newId: () => 'call-1' }).generate(request, { signal: new AbortController().signal }));
    expect(chunks).toEqual([
      { type: 'tool-call', toolCallId: 'call-1', name: 'read_file', args: { path: 'a.txt' } },
      { type: 'usage', usage: { inputTokens: 10, outputTokens: 5 } },
      { type: 'done', finishReason: 'tool_calls' },
    ]);
    expect(inner.requests[0]?.tools).toEqual([]);
  });

  it('asks once more for JSON only after an unusable reply, and sums the usage', async () => {
    const inner = replies(['{"action":"tool","tool_name":"nope"}', '{"action":"finish","final":"done"}']);
    const chunks = await collect(withJsonActions(inner).generate(request, { signal: new AbortController().signal }));
    expect(chunks).toEqual([
      { type: 'text-delta', text: 'done' },
      { type: 'usage', usage: { inputTokens: 20, outputTokens: 10 } },
      { type: 'done', finishReason: 'stop' },
    ]);
    expect(inner.requests).toHaveLength(2);
    expect(inner.requests[1]?.messages.at(-1)?.content).toContain('no tool named "nope"');
  });

  it('takes plain prose as the answer when the model never writes JSON', async () => {
    const inner = replies(['Hello! Nice to meet you.', 'Still no JSON.']);
    const chunks = await collect(withJsonActions(inner).generate(request, { signal: new AbortController().signal }));
    expect(chunks[0]).toEqual({ type: 'text-delta', text: 'Hello! Nice to meet you.' });
  });

  it('fails with invalid_response when both replies hold broken actions', async () => {
    const inner = replies(['{"action":"tool","tool_name":"nope"}']);
    const failure = collect(withJsonActions(inner).generate(request, { signal: new AbortController().signal }));
    await expect(failure).rejects.toBeInstanceOf(ProviderError);
    await expect(failure).rejects.toMatchObject({ code: 'invalid_response', retryable: false });
  });

  it('passes models it does not apply to straight through', async () => {
    const inner = replies(['plain']);
    const chunks = await collect(
      withJsonActions(inner, { appliesTo: (model) => model.startsWith('tiny') }).generate(request, { signal: new AbortController().signal }),
    );
    expect(chunks.slice(0, 2)).toEqual([
      { type: 'text-delta', text: 'plain' },
      { type: 'text-delta', text: '' },
    ]);
    expect(inner.requests[0]?.tools).toEqual(tools);
  });
});
