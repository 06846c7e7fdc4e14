import type { AgentbusClient, SessionTarget } from '../../src/client/index.ts';
import { AgentbusError, ErrorCode } from '../../src/errors.ts';
import type { AgentEvent, Prompt } from '../../src/protocol/index.ts';

/** What {@link followTurn} yields: the accepted turn's id first, then each event of that turn, `turn.ended` last. */
export type FollowedEvent = { readonly type: 'accepted'; readonly turnId: string } | { readonly type: 'event'; readonly event: AgentEvent };

/** Options of {@link followTurn}. */
export interface FollowOptions {
  /** Stops following (the iteration throws its reason); the turn goes on in the runtime. */
  readonly signal: AbortSignal;
  /** While no runtime answers (one starting), the prompt is sent again for this long. */
  readonly readyTimeoutMs: number;
  readonly sleep?: (ms: number) => Promise<void>;
}

/** Sends a prompt, sent again while no runtime answers (one may be starting) until `readyTimeoutMs` has passed. */
export async function promptWhenReady(client: AgentbusClient, target: SessionTarget, prompt: Prompt, options: FollowOptions): Promise<{ turnId: string }> {
  const deadline = Date.now() + options.readyTimeoutMs;
  const sleep = options.sleep ?? ((ms: number) => new Promise((resolve) => setTimeout(resolve, ms)));
  for (;;) {
    try {
      return await client.prompt(target, prompt, { signal: options.signal });
    } catch (error) {
      const starting = error instanceof AgentbusError && error.code === ErrorCode.noResponders && Date.now() < deadline;
      if (!starting) throw error;
      await sleep(250);
    }
  }
}

/**
 * Prompts a session and follows the turn it starts through the client SDK, as any client does: the session's events
 * are watched before the prompt goes out (nothing of the turn is missed), then handed on while they belong to that
 * turn, up to its `turn.ended`. Unlike `client.ask`, giving up (the signal, or the consumer leaving the loop) only
 * stops following: an A2A task outlives the request that started it, and the server's restart.
 */
export async function* followTurn(client: AgentbusClient, target: SessionTarget, prompt: Prompt, options: FollowOptions): AsyncGenerator<FollowedEvent, void, undefined> {
  const watch = await client.watch(target, { signal: options.signal });
  try {
    const { turnId } = await promptWhenReady(client, target, prompt, options);
    yield { type: 'accepted', turnId };
    for await (const { event } of watch) {
      if (event.turnId !== turnId) continue;
      yield { type: 'event', event };
      if (event.type === 'turn.ended') return;
    }
    throw new AgentbusError(ErrorCode.internal, 'the event stream ended before the turn did');
  } finally {
    await watch.close();
  }
}
