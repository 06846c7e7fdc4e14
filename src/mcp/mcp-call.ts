import { ErrorCode as McpErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { AgentbusError, ErrorCode, McpUnavailableError, TimeoutError, ToolError } from '../errors.ts';
import type { ToolProgress } from '../tool-sdk/index.ts';
import { mcpResultOutput } from './mcp-result.ts';
import type { McpProgress, McpSession } from './mcp-session.ts';
import type { McpToolCall } from './mcp-tools.ts';

/**
 * How much later than the tool's own timeout the SDK gives up on a request: the worker's timeout comes first and
 * answers `timeout` (its abort reaches the server as a cancellation); the SDK's is only a backstop.
 */
const SDK_TIMEOUT_SLACK_MS = 5_000;

/** The longest a timer waits (2^31 - 1 ms); a longer one fires at once. */
const MAX_TIMER_MS = 2_147_483_647;

/** The longest timeout an MCP tool can have: the SDK's backstop, {@link SDK_TIMEOUT_SLACK_MS} later, must fit a timer. */
export const MAX_MCP_TIMEOUT_MS = MAX_TIMER_MS - SDK_TIMEOUT_SLACK_MS;

/** How long a server that failed a call at the transport is given to answer a ping before it counts as gone. */
const PING_TIMEOUT_MS = 5_000;

/** Options of {@link createMcpCall}. */
export interface McpCallOptions {
  /** The server, for messages. */
  readonly label: string;
  /** The live session, or undefined while the server is down. */
  readonly session: () => McpSession | undefined;
  /** Why the server is down, for the message of a call that finds it so. */
  readonly downReason: () => string;
  /** Called when a session failed a call at the transport and then a ping: it is gone, and should be restarted. */
  readonly onBroken: (session: McpSession, error: unknown) => void;
}

/** An MCP progress notification as a tool's progress report. */
export function progressUpdate(name: string, progress: McpProgress): ToolProgress {
  const of = progress.total === undefined ? '' : ` of ${progress.total}`;
  return {
    message: progress.message ?? `${name}: ${progress.progress}${of}`,
    progress: progress.progress,
    ...(progress.total === undefined ? {} : { total: progress.total }),
  };
}

/**
 * The `call` of MCP tool definitions: runs a call on the live session with the call's signal (so a cancel or the
 * timeout reaches the server as `notifications/cancelled`), hands the server's progress notifications to
 * `context.progress`, and turns the answer into an output or a typed error:
 *
 * - the server down, or its connection closing during the call: `McpUnavailableError` (`unavailable`, retryable);
 * - a JSON-RPC error answer: `tool_failed` with the server's message (`timeout` for the SDK's own request timeout);
 * - a transport failure (an HTTP request that fails, an answer that does not parse): the server is pinged, with a
 *   timeout of its own (a cancel of the call does not cut the ping short); if it does not answer it is reported
 *   broken (`onBroken`) and the call fails `unavailable`, else `tool_failed`.
 */
export function createMcpCall(options: McpCallOptions): McpToolCall {
  const unavailable = (message: string, cause?: unknown) =>
    new McpUnavailableError(options.label, message, cause === undefined ? {} : { cause });

  return async (name, args, context, timeoutMs) => {
    const session = options.session();
    if (!session) throw unavailable(`the MCP server of ${name} is down (${options.downReason()}); agentbus mcp is restarting it, try again shortly`);
    const sdkTimeoutMs = Math.min(timeoutMs + SDK_TIMEOUT_SLACK_MS, MAX_TIMER_MS);
    try {
      const result = await session.callTool(name, args, {
        signal: context.signal,
        timeoutMs: sdkTimeoutMs,
        onProgress: (progress) => context.progress(progressUpdate(name, progress)),
      });
      return mcpResultOutput(result, name);
    } catch (error) {
      // The worker answers an aborted call from the signal's reason; what the SDK rejected with does not matter.
      if (context.signal.aborted || error instanceof AgentbusError) throw error;
      if (error instanceof McpError) {
        if (error.code === McpErrorCode.ConnectionClosed) throw unavailable(`the MCP server of ${name} went away during the call; it may or may not have taken effect`, error);
        if (error.code === McpErrorCode.RequestTimeout) throw new TimeoutError(`${name} got no answer from its MCP server`, sdkTimeoutMs);
        throw new ToolError(ErrorCode.toolFailed, error.message, { cause: error });
      }
      const message = error instanceof Error ? error.message : String(error);
      // Not with the call's signal: a cancel or the timeout of this call during the ping says nothing about the
      // server, and taking it for dead would restart it under every other call running on it.
      const alive = await session.ping({ timeoutMs: PING_TIMEOUT_MS }).then(
        () => true,
        () => false,
      );
      if (!alive) {
        options.onBroken(session, error);
        throw unavailable(`the MCP server of ${name} stopped answering (${message}); agentbus mcp is restarting it`, error);
      }
      throw new ToolError(ErrorCode.toolFailed, `the MCP call failed: ${message}`, { cause: error });
    }
  };
}
