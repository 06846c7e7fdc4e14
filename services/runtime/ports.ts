import type { GenerateChunk, GenerateRequest, ToolCallReply, ToolCallRequest } from '../../src/protocol/index.ts';
import type { ToolDescriptor } from '../../src/tool-sdk/index.ts';

/** A tool some live worker serves, as the runtime sees it: what the worker announced. */
export type ToolInfo = ToolDescriptor;

/** How the runtime reaches the provider services. */
export interface ProviderPort {
  generate(request: GenerateRequest, options: { signal: AbortSignal; idleTimeoutMs: number; timeoutMs: number }): AsyncIterable<GenerateChunk>;
}

/** How the runtime reaches tool workers. `call` resolves with a failure reply rather than throwing, except on abort. */
export interface ToolPort {
  listTools(options: { signal?: AbortSignal }): Promise<readonly ToolInfo[]>;
  call(request: ToolCallRequest, options: { signal: AbortSignal; timeoutMs: number }): Promise<ToolCallReply>;
}
