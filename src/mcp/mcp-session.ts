import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { CompatibilityCallToolResultSchema, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import type { CompatibilityCallToolResult, Implementation, Tool } from '@modelcontextprotocol/sdk/types.js';
import type { McpSource } from './mcp-source.ts';

/** One progress notification of a running MCP call. */
export interface McpProgress {
  readonly progress: number;
  readonly total?: number | undefined;
  readonly message?: string | undefined;
}

/** A live connection to one MCP server (one process of a stdio server, one session of an HTTP one). */
export interface McpSession {
  /** What the server said it is when it was initialised. */
  readonly server: Implementation | undefined;
  /** The process id of a stdio server. */
  readonly pid: number | undefined;
  /** Every tool the server lists now (all pages). */
  listTools(options: { signal?: AbortSignal }): Promise<Tool[]>;
  /**
   * Calls a tool. An abort of `signal` sends the server `notifications/cancelled` and rejects; progress the server
   * reports comes to `onProgress`. Rejects with the SDK's errors (`McpError` for JSON-RPC errors, others when the
   * transport fails).
   */
  callTool(
    name: string,
    args: Record<string, unknown>,
    options: { signal: AbortSignal; timeoutMs: number; onProgress?: (progress: McpProgress) => void },
  ): Promise<CompatibilityCallToolResult>;
  /** Asks the server whether it still answers; rejects when it does not within `timeoutMs`. */
  ping(options: { signal?: AbortSignal; timeoutMs: number }): Promise<void>;
  /**
   * Resolves once the session is over: the server exited or the transport closed (undefined), or {@link close} was
   * called (the reason given to it).
   */
  readonly closed: Promise<Error | undefined>;
  /**
   * Ends the session, `reason` saying why for {@link closed}: a stdio server's stdin is closed, then it is sent SIGTERM
   * and SIGKILL if it lingers; an HTTP session is ended with a DELETE.
   */
  close(reason?: Error): Promise<void>;
}

/** Options of {@link openMcpSession}. */
export interface OpenMcpSessionOptions {
  readonly signal?: AbortSignal;
  /** The client's name and version in the MCP handshake. */
  readonly client: Implementation;
  /** Called when the server says its tool list changed (debounced by {@link OpenMcpSessionOptions.toolsChangedDebounceMs}). */
  readonly onToolsChanged?: () => void;
  /** Transport and protocol errors the SDK reports besides failed requests. */
  readonly onError?: (error: Error) => void;
  /** Default 100 ms. */
  readonly toolsChangedDebounceMs?: number;
  /** Where a stdio server's stderr goes; default `inherit` (the stderr of `agentbus mcp`). */
  readonly stderr?: 'inherit' | 'ignore';
}

function transportOf(source: McpSource, stderr: 'inherit' | 'ignore'): Transport {
  if (source.kind === 'stdio') {
    return new StdioClientTransport({
      command: source.command,
      args: [...source.args],
      env: { ...source.env },
      stderr,
      ...(source.cwd ? { cwd: source.cwd } : {}),
    });
  }
  return new StreamableHTTPClientTransport(source.url, { requestInit: { headers: { ...source.headers } } });
}

/**
 * Starts (stdio) or reaches (HTTP) an MCP server with the official SDK client and completes the MCP handshake. Rejects
 * when the command cannot start, the server does not initialise, or `signal` aborts (the server is then closed).
 *
 * @example
 * const session = await openMcpSession({ kind: 'stdio', command: 'node', args: ['server.js'], env: {} }, { client: { name: 'agentbus', version } });
 * const tools = await session.listTools({});
 */
export async function openMcpSession(source: McpSource, options: OpenMcpSessionOptions): Promise<McpSession> {
  options.signal?.throwIfAborted();
  const transport = transportOf(source, options.stderr ?? 'inherit');
  const client = new Client(options.client, { capabilities: {} });
  let closeReason: Error | undefined;
  let markClosed!: (error: Error | undefined) => void;
  const closed = new Promise<Error | undefined>((resolve) => (markClosed = resolve));
  client.onclose = () => markClosed(closeReason);
  client.onerror = (error) => options.onError?.(error);
  let debounce: ReturnType<typeof setTimeout> | undefined;
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => options.onToolsChanged?.(), options.toolsChangedDebounceMs ?? 100);
  });
  void closed.then(() => clearTimeout(debounce));
  try {
    await client.connect(transport, options.signal ? { signal: options.signal } : {});
  } catch (error) {
    await client.close().catch(() => undefined);
    throw error;
  }

  return {
    server: client.getServerVersion(),
    pid: transport instanceof StdioClientTransport ? (transport.pid ?? undefined) : undefined,
    closed,
    async listTools({ signal }) {
      const tools: Tool[] = [];
      let cursor: string | undefined;
      do {
        const page = await client.listTools(cursor === undefined ? {} : { cursor }, signal ? { signal } : {});
        tools.push(...page.tools);
        cursor = page.nextCursor;
      } while (cursor !== undefined);
      return tools;
    },
    callTool(name, args, { signal, timeoutMs, onProgress }) {
      return client.callTool({ name, arguments: args }, CompatibilityCallToolResultSchema, {
        signal,
        timeout: timeoutMs,
        ...(onProgress ? { onprogress: onProgress } : {}),
      });
    },
    async ping({ signal, timeoutMs }) {
      await client.ping({ timeout: timeoutMs, ...(signal ? { signal } : {}) });
    },
    async close(reason) {
      closeReason ??= reason;
      clearTimeout(debounce);
      // An HTTP server keeps a session until told it is over; one that does not answer soon is not waited for.
      if (transport instanceof StreamableHTTPClientTransport && transport.sessionId !== undefined) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([transport.terminateSession().catch(() => undefined), new Promise((resolve) => (timer = setTimeout(resolve, 2000)))]);
        clearTimeout(timer);
      }
      await client.close();
    },
  };
}
