import type {
  AfterHookReply,
  AfterHookRequest,
  BeforeHookReply,
  BeforeHookRequest,
  GenerateChunk,
  GenerateRequest,
  HookReply,
  ToolCallReply,
  ToolCallRequest,
} from '../../src/protocol/index.ts';
import type { ToolCallOptions, ToolClientReply } from '../../src/bus/tool-client.ts';
import type { ToolDescriptor } from '../../src/tool-sdk/index.ts';

/**
 * A tool some live worker serves, as the runtime sees it: what the worker announced, and whether all its
 * workers send heartbeats and keep a result ledger for it (absent: they do not).
 */
export type ToolInfo = ToolDescriptor & { readonly heartbeatMs?: number; readonly ledger?: boolean };

/** How the runtime reaches the provider services. */
export interface ProviderPort {
  /** `deadline` (epoch ms): the turn's; a wait for room under a rate limit that would pass it is not begun. */
  generate(request: GenerateRequest, options: { signal: AbortSignal; idleTimeoutMs: number; timeoutMs: number; deadline?: number }): AsyncIterable<GenerateChunk>;
}

/**
 * How the runtime reaches tool workers. `call` resolves with a failure reply rather than throwing, except on
 * abort; a worker that fell silent is a failure with code `worker_lost`.
 */
export interface ToolPort {
  listTools(options: { signal?: AbortSignal }): Promise<readonly ToolInfo[]>;
  /** The tool as a worker last announced it, served now or not; undefined when none ever did (absent: never known). */
  announced?(name: string): ToolInfo | undefined;
  call(request: ToolCallRequest, options: ToolCallOptions & { readonly signal: AbortSignal; readonly timeoutMs: number }): Promise<ToolClientReply>;
}

/**
 * How the runtime reaches tool hooks: one request to one hook (`src/bus/hook-client.ts`). Resolves with the hook's
 * decision or its failure as data (no answer, a late or malformed one, the hook's own error); rejects only on abort.
 */
export interface ToolHookPort {
  before(hook: string, request: BeforeHookRequest, options: { signal: AbortSignal; timeoutMs: number }): Promise<HookReply<BeforeHookReply>>;
  after(hook: string, request: AfterHookRequest, options: { signal: AbortSignal; timeoutMs: number }): Promise<HookReply<AfterHookReply>>;
}
