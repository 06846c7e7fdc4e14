import { describe, expect, it } from 'vitest';
import { createCodec } from '../../src/protocol/index.ts';
import { parseAgentsConfig } from '../../services/agents/config.ts';
import { thrownFailure, turnEndFailure } from '../../services/agents/failures.ts';
import { handlePrompt } from '../../services/agents/prompt-handler.ts';
import { BadPromptRequestError, decodePromptRequest } from '../../services/agents/request-envelope.ts';
import { isCallerReply } from '../../services/agents/reply-subject.ts';
import { createResponseStream } from '../../services/agents/response-stream.ts';
import type { KeepaliveTimers, ResponseStream } from '../../services/agents/response-stream.ts';
import { approvalDecision, approvalQuestion } from '../../services/agents/approval-query.ts';
import { formatPayloadSize, parsePayloadSize } from '../../services/agents/wire.ts';
import { AgentbusError } from '../../src/errors.ts';
import { createLogger } from '../../src/logging.ts';

const codec = createCodec();
const bytes = (text: string) => new TextEncoder().encode(text);
const limits = { maxPayloadBytes: 64, attachmentsOk: false };

/** A reply subject that records what is published, as text and header code. */
function recorder() {
  const sent: Array<{ text: string; code?: string; headers: number }> = [];
  const publish = (data: Uint8Array, headers?: { get(key: string): string; keys(): string[] }) => {
    sent.push({ text: new TextDecoder().decode(data), headers: headers?.keys().length ?? 0, ...(headers ? { code: headers.get('Nats-Service-Error-Code') } : {}) });
  };
  return { sent, publish };
}

/** Interval timers driven by hand. */
function manualTimers(): KeepaliveTimers & { fire(): void; running: number } {
  const callbacks = new Map<number, () => void>();
  let next = 0;
  return {
    setInterval: (callback) => (callbacks.set(++next, callback), next),
    clearInterval: (handle) => void callbacks.delete(handle as number),
    fire: () => callbacks.forEach((callback) => callback()),
    get running() {
      return callbacks.size;
    },
  };
}

describe('the prompt request decoder (§5.3)', () => {
  it('promotes plain text and reads the envelope, keeping unknown fields', () => {
    expect(decodePromptRequest(codec, bytes('hi there'), limits)).toEqual({ prompt: 'hi there', attachments: [], extra: {} });
    expect(decodePromptRequest(codec, bytes(' \n{"prompt":"hi","x":1}'), limits)).toEqual({ prompt: 'hi', attachments: [], extra: { x: 1 } });
  });

  it('refuses zero bytes, bad JSON, no prompt, oversize and attachments where none are taken', () => {
    for (const body of ['', '{', '{"prompt":1}', '{"prompt":"  "}', '   ', 'x'.repeat(65), '{"prompt":"a","attachments":[{"filename":"f","content":"aGk="}]}']) {
      expect(() => decodePromptRequest(codec, bytes(body), limits), body).toThrow(BadPromptRequestError);
    }
    expect(() => decodePromptRequest(codec, new Uint8Array([0x68, 0xff, 0xfe]), limits)).toThrow(/UTF-8/);
  });

  it('checks attachments as standard padded base64 even where they are taken', () => {
    const withContent = (content: string) => bytes(JSON.stringify({ prompt: 'p', attachments: [{ filename: 'f', content }] }));
    const open = { maxPayloadBytes: 1024, attachmentsOk: true };
    expect(decodePromptRequest(codec, withContent('aGk='), open).attachments).toEqual([{ name: 'f', content: 'hi' }]);
    for (const content of ['aGk', 'a-_=', 'aG k=']) expect(() => decodePromptRequest(codec, withContent(content), open), content).toThrow(BadPromptRequestError);
  });

  it('passes attachments on as UTF-8 text files, refusing bytes that are not text and files past the prompt limits', () => {
    const open = { maxPayloadBytes: 2 * 1024 * 1024, attachmentsOk: true };
    const envelope = (attachments: Array<{ filename: string; content: string }>) => bytes(JSON.stringify({ prompt: 'read these', attachments }));
    const base64 = (text: string | Uint8Array) => Buffer.from(text).toString('base64');
    expect(decodePromptRequest(codec, envelope([{ filename: 'notes.md', content: base64('# Über\nnaïve ✓') }, { filename: 'empty.txt', content: '' }]), open).attachments).toEqual([
      { name: 'notes.md', content: '# Über\nnaïve ✓' },
      { name: 'empty.txt', content: '' },
    ]);
    expect(() => decodePromptRequest(codec, envelope([{ filename: 'logo.png', content: base64(new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0xff, 0xfe])) }]), open)).toThrow(/logo.png.*not UTF-8 text/);
    expect(() => decodePromptRequest(codec, envelope(Array.from({ length: 17 }, (_, index) => ({ filename: `f${index}`, content: '' }))), open)).toThrow(/17 attachments.*at most 16/);
    expect(() => decodePromptRequest(codec, envelope([{ filename: 'big.txt', content: base64('x'.repeat(256 * 1024 + 1)) }]), open)).toThrow(/big.txt.*over 262144/);
    expect(() => decodePromptRequest(codec, envelope([{ filename: 'n'.repeat(257), content: '' }]), open)).toThrow(/longer than 256/);
  });
});

describe('the response stream (§6)', () => {
  it('sends the ack once, repeats it as a keep-alive until the end, and publishes nothing after the terminator', () => {
    const { sent, publish } = recorder();
    const timers = manualTimers();
    const stream = createResponseStream(publish, { keepaliveMs: 30_000, timers });
    stream.ack();
    stream.ack();
    stream.text('Hel');
    stream.text('');
    timers.fire();
    stream.text('lo');
    stream.end();
    expect(timers.running).toBe(0);
    stream.text('late');
    stream.fail({ status: 500, error: 'late', message: 'late' });
    stream.end();
    const ack = '{"type":"status","data":"ack"}';
    expect(sent.map((message) => message.text)).toEqual([ack, '{"type":"response","data":"Hel"}', ack, '{"type":"response","data":"lo"}', '']);
    expect(sent.at(-1)!.headers).toBe(0);
  });

  it('sends an error with both headers, on one line, before the terminator', () => {
    const { sent, publish } = recorder();
    const stream = createResponseStream(publish, { keepaliveMs: 0 });
    stream.fail({ status: 429, error: 'budget_exceeded', message: 'out of\nbudget' });
    stream.end();
    expect(sent).toEqual([
      { text: '{"error":"budget_exceeded","message":"out of\\nbudget"}', code: '429', headers: 2 },
      { text: '', headers: 0 },
    ]);
  });
});

describe('a prompt handled end to end, with a turn runner in place of the bus', () => {
  const logger = createLogger({ name: 'agents-test', level: 'silent' });
  const run = async (body: string, runTurn: Parameters<typeof handlePrompt>[2]['runTurn']) => {
    const { sent, publish } = recorder();
    const ask = (stream: ResponseStream, question: string) => Promise.resolve(stream.query('q-1', '_INBOX_agents.query.x', question) ? 'yes' : undefined);
    const failure = await handlePrompt(bytes(body), createResponseStream(publish, { keepaliveMs: 0 }), { codec, limits, runTurn, ask, logger, signal: new AbortController().signal });
    return { sent, failure };
  };

  it('acks before the turn starts, streams its text, and ends', async () => {
    const order: string[] = [];
    const { sent } = await run('hi', async (request, output, signal) => {
      order.push(`turn ${request.prompt}`);
      output.text('A');
      order.push(`reply ${await output.ask('Go on?', signal)}`);
      output.text('B');
      return undefined;
    });
    expect(sent.map((message) => message.text)).toEqual([
      '{"type":"status","data":"ack"}',
      '{"type":"response","data":"A"}',
      '{"type":"query","data":{"id":"q-1","reply_subject":"_INBOX_agents.query.x","prompt":"Go on?"}}',
      '{"type":"response","data":"B"}',
      '',
    ]);
    expect(order).toEqual(['turn hi', 'reply yes']);
  });

  it('maps a refused prompt to its §9.2 code, and a bad request to 400 without an ack', async () => {
    const refused = await run('hi', () => Promise.reject(new AgentbusError('session_deleted', 'gone')));
    expect(refused.sent.map((message) => message.code ?? message.text)).toEqual(['{"type":"status","data":"ack"}', '404', '']);
    const bad = await run('', () => Promise.reject(new Error('never run')));
    expect(bad.sent.map((message) => message.code ?? message.text)).toEqual(['400', '']);
  });
});

describe('approvals asked of the caller (§7)', () => {
  it('asks with the tool and its arguments, long arguments cut', () => {
    expect(approvalQuestion({ toolCallId: 'c1', name: 'run_command', args: { command: ['ls', '-l'] } })).toBe(
      'Approve the call of tool run_command with arguments {"command":["ls","-l"]}? Answer yes or no (any other answer denies it and is passed on as the reason).',
    );
    const long = approvalQuestion({ toolCallId: 'c1', name: 'write_file', args: { content: 'x'.repeat(5_000) }, argsRedacted: true });
    expect(long).toMatch(/… \(5014 characters in all\) \(secrets in them are hidden here\)\?/);
    expect(long.length).toBeLessThan(2_300);
  });

  it('approves on yes-words only; no-words, other text and silence deny, with the reason', () => {
    for (const reply of ['yes', ' Yes. ', 'y', 'APPROVE', 'ok!', 'allow']) expect(approvalDecision('c1', reply, 'late').approved, reply).toBe(true);
    expect(approvalDecision('c1', 'no', 'late')).toEqual({ toolCallId: 'c1', approved: false, reason: 'denied by the caller of the agent protocol' });
    expect(approvalDecision('c1', 'not that folder, use /tmp', 'late')).toEqual({ toolCallId: 'c1', approved: false, reason: 'the caller answered: not that folder, use /tmp' });
    expect(approvalDecision('c1', 'yes please', 'late').approved).toBe(false);
    expect(approvalDecision('c1', undefined, 'no answer in 300 s')).toEqual({ toolCallId: 'c1', approved: false, reason: 'no answer in 300 s' });
  });

  it('sends a query only on an open, acknowledged stream', () => {
    const { sent, publish } = recorder();
    const stream = createResponseStream(publish, { keepaliveMs: 0 });
    expect(stream.query('q', 's', 'before the ack?')).toBe(false);
    stream.ack();
    expect(stream.query('q', 's', 'now?')).toBe(true);
    stream.end();
    expect(stream.query('q', 's', 'after the end?')).toBe(false);
    expect(sent.map((message) => message.text)).toEqual(['{"type":"status","data":"ack"}', '{"type":"query","data":{"id":"q","reply_subject":"s","prompt":"now?"}}', '']);
  });
});

describe('outcomes as §9.2 codes', () => {
  it('maps turn ends and thrown errors onto the table only', () => {
    expect(turnEndFailure('yielded')).toBeUndefined();
    expect(turnEndFailure('cancelled')?.status).toBe(409);
    expect(turnEndFailure('budget_exceeded')?.status).toBe(429);
    expect(turnEndFailure('failed')?.status).toBe(500);
    expect(turnEndFailure('timeout')?.status).toBe(500);
    expect(thrownFailure(new AgentbusError('denied', 'no')).status).toBe(403);
    expect(thrownFailure(new AgentbusError('no_responders', 'none')).status).toBe(500);
    expect(thrownFailure(new Error('boom'))).toEqual({ status: 500, error: 'internal', message: 'boom' });
  });
});

describe('the agents config and its helpers', () => {
  it('fills defaults, and refuses bad tokens, unknown fields and an identity listed twice', () => {
    const config = parseAgentsConfig({ agents: [{ owner: 'acme', name: 'desk', tenant: 'acme' }] });
    expect(config).toMatchObject({ heartbeatIntervalS: 30, keepaliveIntervalS: 30, agents: [{ agent: 'agentbus', owner: 'acme', name: 'desk', tenant: 'acme' }] });
    expect(() => parseAgentsConfig({ agents: [{ owner: '$acme', name: 'desk', tenant: 'acme' }] })).toThrow(/owner/);
    expect(() => parseAgentsConfig({ agents: [{ owner: 'acme', name: 'desk', tenant: 'acme', sesion: 'x' }] })).toThrow(/sesion/);
    expect(() => parseAgentsConfig({ agents: [{ owner: 'a', name: 'd', tenant: 't' }, { owner: 'a', name: 'd', tenant: 'u' }] })).toThrow(/twice/);
    expect(() => parseAgentsConfig({ heartbeatIntervalS: 0.5, agents: [{ owner: 'a', name: 'd', tenant: 't' }] })).toThrow(/heartbeatIntervalS/);
  });

  it('reads and writes max_payload sizes, and answers only caller inboxes', () => {
    expect([formatPayloadSize(1024 * 1024), formatPayloadSize(1536), formatPayloadSize(1000)]).toEqual(['1MB', '1536B', '1000B']);
    expect([parsePayloadSize('1MB'), parsePayloadSize('2kb'), parsePayloadSize('1.5MB')]).toEqual([1024 * 1024, 2048, undefined]);
    expect(isCallerReply('_INBOX.agents.x1')).toBe(true);
    expect(isCallerReply('_INBOX_runtime.x')).toBe(false);
    expect(isCallerReply('_INBOX_app.x', ['_INBOX_app'])).toBe(true);
    expect(isCallerReply('agentbus.acme.sessions.s.prompt')).toBe(false);
    expect(isCallerReply('_INBOX.*')).toBe(false);
  });
});
