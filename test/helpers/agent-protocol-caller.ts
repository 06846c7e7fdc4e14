import { createInbox } from '@nats-io/nats-core';
import type { Msg, NatsConnection } from '@nats-io/nats-core';

/** One message of a response stream as a caller sees it: its body, and its headers by name. */
export interface StreamMessage {
  readonly data: Uint8Array;
  readonly text: string;
  readonly headers: Readonly<Record<string, string>>;
}

function seen(message: Msg): StreamMessage {
  const headers: Record<string, string> = {};
  for (const key of message.headers?.keys() ?? []) headers[key] = message.headers!.get(key);
  return { data: message.data, text: new TextDecoder().decode(message.data), headers };
}

/** Whether a message is the §6.5 terminator: zero bytes and no headers at all. */
export function isTerminator(message: StreamMessage): boolean {
  return message.data.length === 0 && Object.keys(message.headers).length === 0;
}

/**
 * Sends a request as a protocol caller does (a reply inbox under `_INBOX.agents`) and reads the response stream up
 * to its terminator, then `settleMs` more, so that a message published after the terminator is caught too. Rejects
 * when no terminator comes within `timeoutMs`. Written from the spec, not from the host's code.
 */
export async function promptStream(nc: NatsConnection, subject: string, body: Uint8Array | string, options: { timeoutMs?: number; settleMs?: number } = {}): Promise<StreamMessage[]> {
  const inbox = createInbox('_INBOX.agents');
  const messages: StreamMessage[] = [];
  const subscription = nc.subscribe(inbox);
  const timeoutMs = options.timeoutMs ?? 20_000;
  const collected = (async () => {
    for await (const message of subscription) messages.push(seen(message));
  })();
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    nc.publish(subject, typeof body === 'string' ? new TextEncoder().encode(body) : body, { reply: inbox });
    await new Promise<void>((resolve, reject) => {
      const poll = setInterval(() => {
        if (messages.some(isTerminator)) {
          clearInterval(poll);
          resolve();
        }
      }, 10);
      timer = setTimeout(() => {
        clearInterval(poll);
        reject(new Error(`no terminator on ${subject} within ${timeoutMs} ms; got ${JSON.stringify(messages.map((m) => m.text))}`));
      }, timeoutMs);
    });
    await new Promise((resolve) => setTimeout(resolve, options.settleMs ?? 300));
    return messages;
  } finally {
    clearTimeout(timer);
    subscription.unsubscribe();
    await collected;
  }
}

/** The JSON of a non-terminating chunk. */
export function chunkOf(message: StreamMessage): { type: string; data: unknown } {
  return JSON.parse(message.text) as { type: string; data: unknown };
}
