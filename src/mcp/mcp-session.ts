import { Readable } from 'node:stream';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { CompatibilityCallToolResultSchema, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import type { CompatibilityCallToolResult, Implementation, Tool } from '@modelcontextprotocol/sdk/types.js';
import { abortPromise } from '../bus/request.ts';
import { mcpLaunch } from './mcp-launch.ts';
import type { McpSource } from './mcp-source.ts';
import { forEachLine } from './text-lines.ts';

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
  /**
   * Every tool the server lists now (all pages). Rejects when the list does not end: a cursor given twice, or more
   * than {@link MAX_TOOL_PAGES} pages.
   */
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
  /**
   * Errors the SDK reports besides failed requests: `transport` ones (an HTTP request that failed, an event stream
   * lost, output that does not parse) and `protocol` ones (an answer to a request it no longer waits for, …).
   */
  readonly onError?: (error: Error, origin: McpErrorOrigin) => void;
  /** Default 100 ms. */
  readonly toolsChangedDebounceMs?: number;
  /**
   * Where a stdio server's stderr goes: `inherit` (the default: the stderr of `agentbus mcp`, as it is), `ignore`, or
   * each line of it to a function (`agentbus mcp` scrubs it of secrets there).
   */
  readonly stderr?: McpServerStderr;
  /** The transport to use instead of the one `source` names (tests: one end of an in-memory pair). */
  readonly transport?: Transport;
}

/** Where a stdio server's stderr goes (see {@link OpenMcpSessionOptions.stderr}). */
export type McpServerStderr = 'inherit' | 'ignore' | ((line: string) => void);

/** The most pages of a tool list read before the list is taken for one that never ends. */
export const MAX_TOOL_PAGES = 100;

/** Where an error the SDK reported outside a request came from (see {@link OpenMcpSessionOptions.onError}). */
export type McpErrorOrigin = 'transport' | 'protocol';

/**
 * Runs one SDK request with a signal of its own that follows `signal` only while the request runs. The SDK adds an
 * abort listener to the signal it is given and never removes it: on a long-lived signal those would pile up, each
 * keeping its client alive, and its abort would send `notifications/cancelled` for requests answered long ago.
 */
async function withOwnSignal<T>(signal: AbortSignal | undefined, run: (signal: AbortSignal | undefined) => Promise<T>): Promise<T> {
  if (!signal) return run(undefined);
  signal.throwIfAborted();
  const own = new AbortController();
  const follow = () => own.abort(signal.reason);
  signal.addEventListener('abort', follow, { once: true });
  try {
    return await run(own.signal);
  } finally {
    signal.removeEventListener('abort', follow);
  }
}

// The SDK's client and transports are imported when a session opens, not with this module: the CLI is one bundle,
// and every other command would pay their load (about 0.25 s).
async function transportOf(source: McpSource, stderr: McpServerStderr): Promise<Transport> {
  if (source.kind === 'stdio') {
    const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
    const launch = mcpLaunch(source);
    const transport = new StdioClientTransport({
      command: launch.command,
      args: launch.args,
      env: launch.env,
      stderr: typeof stderr === 'function' ? 'pipe' : stderr,
      ...(launch.cwd ? { cwd: launch.cwd } : {}),
    });
    // With `pipe` the transport hands out its stderr stream before the process starts, so no early line is lost.
    if (typeof stderr === 'function' && transport.stderr instanceof Readable) forEachLine(transport.stderr, stderr);
    return transport;
  }
  const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
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
  const transport = options.transport ?? (await transportOf(source, options.stderr ?? 'inherit'));
  const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
  const client = new Client(options.client, { capabilities: {} });
  let closeReason: Error | undefined;
  let markClosed!: (error: Error | undefined) => void;
  const closed = new Promise<Error | undefined>((resolve) => (markClosed = resolve));
  client.onclose = () => markClosed(closeReason);
  // The client keeps this handler and calls it before its own `onerror`, which hears protocol errors as well.
  const fromTransport = new WeakSet<Error>();
  transport.onerror = (error) => {
    fromTransport.add(error);
    options.onError?.(error, 'transport');
  };
  client.onerror = (error) => {
    if (!fromTransport.has(error)) options.onError?.(error, 'protocol');
  };
  let debounce: ReturnType<typeof setTimeout> | undefined;
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => options.onToolsChanged?.(), options.toolsChangedDebounceMs ?? 100);
  });
  void closed.then(() => clearTimeout(debounce));
  // An abort closes the connection rather than cancel the handshake, which the MCP spec says must not be cancelled.
  const { promise: aborted, cleanup } = abortPromise(options.signal);
  try {
    await Promise.race([client.connect(transport), aborted]);
  } catch (error) {
    await client.close().catch(() => undefined);
    throw error;
  } finally {
    cleanup();
  }

  return {
    server: client.getServerVersion(),
    // The stdio transport's child pid (the class is imported lazily, so it is told by its shape).
    pid: 'pid' in transport && typeof transport.pid === 'number' ? transport.pid : undefined,
    closed,
    async listTools({ signal }) {
      const tools: Tool[] = [];
      const cursors = new Set<string>();
      let cursor: string | undefined;
      do {
        if (cursors.size >= MAX_TOOL_PAGES) throw new Error(`the MCP server's tool list did not end after ${MAX_TOOL_PAGES} pages`);
        const params = cursor === undefined ? {} : { cursor };
        const page = await withOwnSignal(signal, (own) => client.listTools(params, own ? { signal: own } : {}));
        tools.push(...page.tools);
        cursor = page.nextCursor;
        if (cursor !== undefined && cursors.has(cursor)) throw new Error(`the MCP server's tool list does not end: it gave the cursor ${JSON.stringify(cursor)} again`);
        if (cursor !== undefined) cursors.add(cursor);
      } while (cursor !== undefined);
      return tools;
    },
    callTool(name, args, { signal, timeoutMs, onProgress }) {
      return withOwnSignal(signal, (own) =>
        client.callTool({ name, arguments: args }, CompatibilityCallToolResultSchema, {
          ...(own ? { signal: own } : {}),
          timeout: timeoutMs,
          ...(onProgress ? { onprogress: onProgress } : {}),
        }),
      );
    },
    async ping({ signal, timeoutMs }) {
      await withOwnSignal(signal, (own) => client.ping({ timeout: timeoutMs, ...(own ? { signal: own } : {}) }));
    },
    async close(reason) {
      closeReason ??= reason;
      clearTimeout(debounce);
      // An HTTP server keeps a session until told it is over; one that does not answer soon is not waited for.
      const http = transport as Transport & { terminateSession?: () => Promise<void> };
      if (typeof http.terminateSession === 'function' && http.sessionId !== undefined) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([http.terminateSession().catch(() => undefined), new Promise((resolve) => (timer = setTimeout(resolve, 2000)))]);
        clearTimeout(timer);
      }
      await client.close();
    },
  };
}
