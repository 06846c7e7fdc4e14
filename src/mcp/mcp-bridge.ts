import type { Implementation, Tool } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from '../logging.ts';
import type { SafetyTier } from '../protocol/index.ts';
import { toToolMetadata } from '../tool-sdk/index.ts';
import type { AnyToolDefinition } from '../tool-sdk/index.ts';
import { createArgumentChecks } from './mcp-arguments.ts';
import { createMcpCall } from './mcp-call.ts';
import { describeMcpSource } from './mcp-source.ts';
import { createRetiringWorkers } from './retiring-workers.ts';
import type { McpSource } from './mcp-source.ts';
import { mcpToolDefinitions } from './mcp-tools.ts';
import type { SkippedMcpTool } from './mcp-tools.ts';
import type { McpErrorOrigin, McpSession } from './mcp-session.ts';
import type { ServedTools } from './served-tools.ts';

/** What a bridge reports as it goes, for the person running it. */
export type McpBridgeEvent =
  /** Tools are served: at start, and each time the server's list changed (the worker was registered anew). */
  | { readonly type: 'serving'; readonly tools: readonly AnyToolDefinition[]; readonly skipped: readonly SkippedMcpTool[]; readonly first: boolean }
  /** The session ended (or a restart failed); the next attempt is in `retryInMs`. */
  | { readonly type: 'down'; readonly error: Error | undefined; readonly attempt: number; readonly retryInMs: number }
  /** A new session is up after `attempt` tries. */
  | { readonly type: 'restarted'; readonly attempt: number; readonly pid: number | undefined };

/** How the bridge restarts a server: exponential backoff from `initialDelayMs` to `maxDelayMs`. */
export interface McpRestartPolicy {
  /** Default 250 ms. */
  readonly initialDelayMs?: number;
  /** Default 30 000 ms. */
  readonly maxDelayMs?: number;
  /** A session that lived this long starts the backoff over. Default 10 000 ms. */
  readonly stableAfterMs?: number;
}

/** Options of {@link createMcpBridge}. */
export interface McpBridgeOptions {
  readonly source: McpSource;
  /** Opens a session to the server (`openMcpSession` bound to the source); called again for each restart. */
  readonly open: (options: { signal: AbortSignal; onToolsChanged: () => void; onError: (error: Error, origin: McpErrorOrigin) => void }) => Promise<McpSession>;
  /** Starts serving tool definitions on the bus (a tool worker). */
  readonly serve: (tools: readonly AnyToolDefinition[]) => Promise<ServedTools>;
  /** The tier a tool is forced to, or undefined to take it from its annotations. */
  readonly tierOf?: (name: string) => SafetyTier | undefined;
  /** The timeout of one call of a tool, in milliseconds. */
  readonly timeoutOf: (name: string) => number;
  /** Put before each tool's name on the bus (`--prefix`); default none. */
  readonly prefix?: string;
  readonly logger: Logger;
  readonly onEvent?: (event: McpBridgeEvent) => void;
  readonly restart?: McpRestartPolicy;
  readonly now?: () => number;
}

/** An MCP server's tools served on the bus, kept alive across the server's deaths. */
export interface McpBridge {
  /**
   * Opens the first session, reads the tool list and starts serving; rejects (serving nothing) when the server cannot
   * be started or listed, so a command can exit with the reason. Later deaths are restarted, not reported as errors.
   */
  start(options?: { signal?: AbortSignal }): Promise<void>;
  /**
   * Stops serving and closes the server: the served worker leaves `$SRV` at once, and its running calls, and those
   * of workers a list change replaced, may finish for `graceMs` (default 5000 ms) before they are cancelled.
   */
  stop(options?: { graceMs?: number }): Promise<void>;
  /** What the server said it is, once started. */
  readonly server: Implementation | undefined;
  /** The tools served now. */
  readonly tools: readonly AnyToolDefinition[];
}

/** How long running calls may finish when the bridge stops, unless its `stop` says otherwise. */
const DEFAULT_STOP_GRACE_MS = 5_000;

/** A fingerprint of what a list of tools announces, to tell whether a new list changes anything. */
function announcement(tools: readonly AnyToolDefinition[]): string {
  return JSON.stringify(tools.map((tool) => [tool.name, toToolMetadata(tool)]).sort(([a], [b]) => String(a).localeCompare(String(b))));
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

/**
 * Creates the bridge of `agentbus mcp`: one MCP server's tools served on the bus as a tool worker. When the server dies
 * (a stdio process exits; an HTTP session stops answering) calls running on it fail with a retryable `unavailable`,
 * calls arriving meanwhile too, and the server is restarted with backoff; its tool list is read again then and
 * whenever it sends `notifications/tools/list_changed`, and a list that announces anything different is served by a
 * new worker, started before the old one stops (in the background: its running calls may take as long as their tools
 * allow, unless the bridge stops first).
 *
 * @example
 * const bridge = createMcpBridge({ source, open, serve, timeoutOf: () => 60_000, logger });
 * await bridge.start({ signal });
 * // later
 * await bridge.stop();
 */
export function createMcpBridge(options: McpBridgeOptions): McpBridge {
  const label = describeMcpSource(options.source);
  const logger = options.logger.child({ component: 'mcp-bridge', server: label });
  const now = options.now ?? Date.now;
  const initialDelayMs = options.restart?.initialDelayMs ?? 250;
  const maxDelayMs = options.restart?.maxDelayMs ?? 30_000;
  const stableAfterMs = options.restart?.stableAfterMs ?? 10_000;
  const stopping = new AbortController();

  let current: McpSession | undefined;
  let downReason = 'it is starting';
  let served: ServedTools | undefined;
  let servedTools: readonly AnyToolDefinition[] = [];
  let servedAnnouncement: string | undefined;
  // List updates run one at a time, in order.
  let updates: Promise<void> = Promise.resolve();
  let supervising: Promise<void> | undefined;
  let stopped: Promise<void> | undefined;
  const retiring = createRetiringWorkers(logger);
  const checking = new WeakSet<McpSession>();

  const call = createMcpCall({
    label,
    session: () => current,
    downReason: () => downReason,
    onBroken: (session, error) => {
      if (session !== current) return;
      logger.warn({ err: error }, 'the MCP server stopped answering; restarting it');
      void session.close(new Error(`it stopped answering: ${error instanceof Error ? error.message : String(error)}`)).catch((err: unknown) => logger.warn({ err }, 'closing a broken MCP session failed'));
    },
  });

  async function apply(tools: readonly Tool[], first: boolean): Promise<void> {
    const built = mcpToolDefinitions(tools, {
      call,
      tierOf: options.tierOf ?? (() => undefined),
      timeoutOf: options.timeoutOf,
      checks: createArgumentChecks(logger),
      ...(options.prefix === undefined ? {} : { prefix: options.prefix }),
    });
    const next = announcement(built.tools);
    if (next === servedAnnouncement) return;
    const worker = built.tools.length > 0 ? await options.serve(built.tools) : undefined;
    // A replaced worker's calls run on a live session: they may take as long as their tools allow.
    const graceOf = (definitions: readonly AnyToolDefinition[]) => Math.max(0, ...definitions.map((tool) => tool.timeoutMs));
    if (stopping.signal.aborted) {
      // The bridge stopped while this worker started: it is not served, and stops as a replaced one would.
      if (worker) retiring.retire(worker, graceOf(built.tools));
      return;
    }
    const previous = served;
    const graceMs = graceOf(servedTools);
    served = worker;
    servedTools = built.tools;
    servedAnnouncement = next;
    options.onEvent?.({ type: 'serving', tools: built.tools, skipped: built.skipped, first });
    // Not awaited: the queue (and so the next list, a restart, the bridge's stop) must not wait for its calls.
    if (previous) retiring.retire(previous, graceMs);
  }

  /** Runs `task` after every update before it, whatever became of those; resolves or rejects as `task` does. */
  function enqueue(task: () => Promise<void>): Promise<void> {
    const run = updates.then(task);
    updates = run.catch(() => undefined);
    return run;
  }

  /** Reads the list again after the server said it changed, if that session is still the live one. */
  function refresh(session: McpSession): void {
    void enqueue(async () => {
      if (session !== current || stopping.signal.aborted) return;
      await apply(await session.listTools({ signal: stopping.signal }), false);
    }).catch((err: unknown) => logger.warn({ err }, 'could not serve the changed tool list of the MCP server'));
  }

  /**
   * After a transport error of an HTTP session (its event stream lost, a request refused), whether the server still
   * answers; one that does not is closed, and so restarted. A stdio server's death is seen without asking: it exits.
   */
  function checkSoon(session: McpSession): void {
    if (options.source.kind !== 'http' || checking.has(session)) return;
    checking.add(session);
    setTimeout(() => {
      void session
        .ping({ signal: stopping.signal, timeoutMs: 5_000 })
        .catch((err: unknown) => {
          if (session !== current || stopping.signal.aborted) return;
          logger.warn({ err }, 'the MCP server stopped answering; restarting it');
          return session.close(new Error(`it stopped answering: ${err instanceof Error ? err.message : String(err)}`));
        })
        .catch((err: unknown) => logger.warn({ err }, 'closing a broken MCP session failed'))
        .finally(() => checking.delete(session));
    }, 500);
  }

  /** Opens a session whose list-changed notices and errors are its own. */
  async function open(signal: AbortSignal = stopping.signal): Promise<McpSession> {
    let session: McpSession | undefined;
    session = await options.open({
      signal,
      onToolsChanged: () => session && refresh(session),
      onError: (error, origin) => {
        logger.debug({ err: error, origin }, 'MCP client error');
        // A protocol error (a late answer to a cancelled request, …) says nothing about whether the server is there.
        if (session && origin === 'transport') checkSoon(session);
      },
    });
    return session;
  }

  /** Waits for each session to end and opens the next, with backoff, until stopped. */
  async function supervise(first: McpSession): Promise<void> {
    let session = first;
    let failures = 0;
    let opened = now();
    for (;;) {
      let error = await session.closed;
      if (stopping.signal.aborted) return;
      if (current === session) current = undefined;
      downReason = error ? error.message : 'it exited';
      if (now() - opened >= stableAfterMs) failures = 0;
      for (;;) {
        const retryInMs = Math.min(maxDelayMs, initialDelayMs * 2 ** failures);
        failures += 1;
        logger.warn({ err: error, attempt: failures, retryInMs }, 'the MCP server is down; restarting it');
        options.onEvent?.({ type: 'down', error, attempt: failures, retryInMs });
        await pause(retryInMs, stopping.signal);
        if (stopping.signal.aborted) return;
        let next: McpSession | undefined;
        let tools: Tool[];
        try {
          next = await open();
          tools = await next.listTools({ signal: stopping.signal });
        } catch (restartError) {
          await next?.close().catch(() => undefined);
          if (stopping.signal.aborted) return;
          error = restartError instanceof Error ? restartError : new Error(String(restartError));
          downReason = `restarting it failed: ${error.message}`;
          continue;
        }
        if (stopping.signal.aborted) {
          await next.close().catch(() => undefined);
          return;
        }
        current = next;
        session = next;
        opened = now();
        options.onEvent?.({ type: 'restarted', attempt: failures, pid: next.pid });
        // The server is back either way: a list that cannot be served now is logged, and the old one stays served.
        await enqueue(() => apply(tools, false)).catch((err: unknown) => logger.error({ err }, 'could not serve the tool list of the restarted MCP server'));
        break;
      }
    }
  }

  async function stopNow(graceMs: number): Promise<void> {
    stopping.abort();
    const worker = served;
    served = undefined;
    servedTools = [];
    // The served worker leaves $SRV first; replaced ones get no longer than it. An update that was starting a
    // worker when the stop came retires that worker meanwhile.
    const first = worker?.stop({ graceMs }).catch((err: unknown) => logger.warn({ err }, 'stopping the tool worker failed'));
    await retiring.settle(graceMs, Promise.all([first, updates]));
    const session = current;
    current = undefined;
    await session?.close().catch((err: unknown) => logger.warn({ err }, 'closing the MCP server failed'));
    await supervising;
  }

  return {
    get server() {
      return current?.server;
    },
    get tools() {
      return servedTools;
    },
    async start(startOptions = {}) {
      const session = await open(startOptions.signal ? AbortSignal.any([stopping.signal, startOptions.signal]) : stopping.signal);
      try {
        startOptions.signal?.throwIfAborted();
        const tools = await session.listTools(startOptions.signal ? { signal: startOptions.signal } : {});
        current = session;
        await enqueue(() => apply(tools, true));
      } catch (error) {
        current = undefined;
        await session.close().catch(() => undefined);
        throw error;
      }
      supervising = supervise(session).catch((err: unknown) => logger.error({ err }, 'the MCP supervisor failed'));
    },
    stop(stopOptions = {}) {
      stopped ??= stopNow(stopOptions.graceMs ?? DEFAULT_STOP_GRACE_MS);
      return stopped;
    },
  };
}
