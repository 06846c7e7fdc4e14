import { headers } from '@nats-io/nats-core';
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import { createCodec } from '../../src/protocol/index.ts';
import type { PromptReply } from '../../src/protocol/index.ts';
import { PROMPT } from './workload.ts';

/** What a client saw of one session's turn. */
export interface TurnSeen {
  /** Log events of the session seen until `turn.ended` (session.created included). */
  readonly logEvents: number;
  readonly reason: string;
  /** ms from sending the prompt to the first `assistant.delta`, when waited for. */
  readonly firstDeltaMs?: number;
}

interface Waiter {
  logEvents: number;
  started: number;
  firstDeltaMs?: number;
  resolve: (seen: TurnSeen) => void;
  reject: (error: Error) => void;
  timer: ReturnType<typeof setTimeout>;
}

/**
 * A client of agentbus as an outside user has one: sends a prompt request to
 * `agentbus.<t>.sessions.<sid>.prompt` and waits for `turn.ended` on the session's log subject. One
 * wildcard subscription for every session, dispatched by session id.
 */
export interface AgentbusClient {
  /** Prompts a session and resolves when its turn has ended. */
  runTurn(sessionId: string, options?: { timeoutMs?: number; text?: string }): Promise<TurnSeen>;
  close(): void;
}

const codec = createCodec();

/** Creates the client; `watchDeltas` also subscribes to `live.assistant.delta` to time the first delta. */
export async function createAgentbusClient(nc: NatsConnection, options: { tenant?: string; watchDeltas?: boolean } = {}): Promise<AgentbusClient> {
  const tenant = options.tenant ?? 'bench';
  const waiters = new Map<string, Waiter>();
  const sessionOf = (subject: string) => subject.split('.')[3] ?? '';
  const subscriptions: Subscription[] = [
    nc.subscribe(`agentbus.${tenant}.sessions.*.log`, {
      callback: (error, message) => {
        if (error) return;
        const waiter = waiters.get(sessionOf(message.subject));
        if (!waiter) return;
        waiter.logEvents += 1;
        const event = codec.decode(message.data, message.headers?.get('Content-Type')) as { type: string; data: { reason?: string } };
        if (event.type !== 'turn.ended') return;
        waiters.delete(sessionOf(message.subject));
        clearTimeout(waiter.timer);
        waiter.resolve({
          logEvents: waiter.logEvents,
          reason: event.data.reason ?? '',
          ...(waiter.firstDeltaMs === undefined ? {} : { firstDeltaMs: waiter.firstDeltaMs }),
        });
      },
    }),
  ];
  if (options.watchDeltas) {
    subscriptions.push(
      nc.subscribe(`agentbus.${tenant}.sessions.*.live.assistant.delta`, {
        callback: (error, message) => {
          if (error) return;
          const waiter = waiters.get(sessionOf(message.subject));
          if (waiter && waiter.firstDeltaMs === undefined) waiter.firstDeltaMs = performance.now() - waiter.started;
        },
      }),
    );
  }
  await nc.flush();
  const promptHeaders = headers();
  promptHeaders.set('Content-Type', 'application/msgpack');

  return {
    async runTurn(sessionId, runOptions = {}) {
      const timeoutMs = runOptions.timeoutMs ?? 60_000;
      const ended = new Promise<TurnSeen>((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.delete(sessionId);
          reject(new Error(`session ${sessionId}: no turn.ended within ${timeoutMs} ms`));
        }, timeoutMs);
        waiters.set(sessionId, { logEvents: 0, started: performance.now(), resolve, reject, timer });
      });
      ended.catch(() => undefined);
      const reply = await nc.request(`agentbus.${tenant}.sessions.${sessionId}.prompt`, codec.encode({ text: runOptions.text ?? PROMPT }), {
        timeout: timeoutMs,
        headers: promptHeaders,
      });
      const answer = codec.decode(reply.data, reply.headers?.get('Content-Type')) as PromptReply;
      if (!answer.accepted) {
        const waiter = waiters.get(sessionId);
        if (waiter) clearTimeout(waiter.timer);
        waiters.delete(sessionId);
        throw new Error(`prompt refused: ${JSON.stringify(answer.error)}`);
      }
      const seen = await ended;
      if (seen.reason !== 'yielded') throw new Error(`session ${sessionId} ended ${seen.reason}`);
      return seen;
    },
    close() {
      for (const subscription of subscriptions) subscription.unsubscribe();
    },
  };
}
