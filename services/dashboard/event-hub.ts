import type { AgentEvent } from '../../src/protocol/index.ts';

/** Where a browser's server-sent events go: an HTTP response, as far as the hub needs it. */
export interface EventSink {
  write(chunk: string): boolean;
  /** Bytes written but not yet sent (a slow or stalled browser). */
  readonly writableLength?: number;
  /** Closes the stream; the browser's EventSource connects again and reads the session afresh. */
  end?(): void;
}

/** What each flush can carry; each part is sent only when it changed since the client's last flush. */
export interface HubSources {
  fleet(): { version: number; value: unknown };
  workers(): { version: number; value: unknown };
}

/** Counters of what the hub did, for tests and the bench. */
export interface HubStats {
  /** Events handed to `publish`. */
  readonly events: number;
  /** SSE messages written, over all clients. */
  readonly frames: number;
  readonly flushes: number;
}

/** Fans bus events out to browsers, coalesced. */
export interface EventHub {
  /**
   * Adds a browser. `session` (`<tenant>/<sessionId>`) is the session whose events it follows, if any.
   * Returns the function that removes it.
   */
  add(sink: EventSink, session?: string): () => void;
  /** True when some browser follows `<tenant>/<sessionId>`. */
  follows(session: string): boolean;
  /** Queues an event for the browsers that follow its session. */
  publish(event: AgentEvent): void;
  /** Sends what is queued now (the timer calls it every `flushMs`). */
  flush(): void;
  stats(): HubStats;
  readonly clients: number;
  stop(): void;
}

interface Client {
  readonly sink: EventSink;
  readonly session: string | undefined;
  queue: AgentEvent[];
  fleetVersion: number;
  workersVersion: number;
}

/**
 * Creates the hub. Nothing is written per event: events wait in each client's queue and go out every
 * `flushMs` (default 200 ms) as one `session` message; contiguous `assistant.delta`s of a turn are merged
 * into one, so a fast stream costs the browser a few renders a second, not one per delta. The fleet and
 * workers views go out whole, only when their version moved. A client whose queue passes `maxQueue`
 * (default 2000) gets a `reload` message instead of the overflow; one that does not read what it is sent
 * (over `maxBufferedBytes`, default 8 MiB, waiting) is disconnected, so a stalled tab cannot grow the server.
 *
 * @example
 * const hub = createEventHub({ fleet: () => ({ version: fleet.version, value: fleet.snapshot() }), workers: … });
 * const remove = hub.add(response, 'default/chat-1');
 */
export function createEventHub(
  sources: HubSources,
  options: { flushMs?: number; maxQueue?: number; heartbeatMs?: number; maxBufferedBytes?: number } = {},
): EventHub {
  const maxQueue = options.maxQueue ?? 2000;
  const maxBuffered = options.maxBufferedBytes ?? 8 * 1024 * 1024;
  const clients = new Set<Client>();
  const bySession = new Map<string, Set<Client>>();
  let events = 0;
  let frames = 0;
  let flushes = 0;

  const send = (client: Client, name: string, data: unknown) => {
    client.sink.write(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
    frames += 1;
  };

  function flush(): void {
    if (clients.size === 0) return;
    flushes += 1;
    let fleet: { version: number; value: unknown } | undefined;
    let workers: { version: number; value: unknown } | undefined;
    for (const client of [...clients]) {
      if ((client.sink.writableLength ?? 0) > maxBuffered) {
        drop(client);
        client.sink.end?.();
        continue;
      }
      fleet ??= sources.fleet();
      if (fleet.version !== client.fleetVersion) {
        client.fleetVersion = fleet.version;
        send(client, 'fleet', fleet.value);
      }
      workers ??= sources.workers();
      if (workers.version !== client.workersVersion) {
        client.workersVersion = workers.version;
        send(client, 'workers', workers.value);
      }
      if (client.queue.length > 0) {
        const queued = client.queue;
        client.queue = [];
        send(client, 'session', queued);
      }
    }
  }

  function drop(client: Client): void {
    clients.delete(client);
    if (client.session === undefined) return;
    const set = bySession.get(client.session);
    set?.delete(client);
    if (set?.size === 0) bySession.delete(client.session);
  }

  const timer = setInterval(flush, options.flushMs ?? 200);
  timer.unref?.();
  const heartbeat = setInterval(() => {
    for (const client of clients) client.sink.write(': keep-alive\n\n');
  }, options.heartbeatMs ?? 15_000);
  heartbeat.unref?.();

  return {
    add(sink, session) {
      const client: Client = { sink, session, queue: [], fleetVersion: -1, workersVersion: -1 };
      clients.add(client);
      if (session !== undefined) {
        const set = bySession.get(session) ?? new Set<Client>();
        set.add(client);
        bySession.set(session, set);
      }
      sink.write('retry: 2000\n\n');
      return () => drop(client);
    },
    follows: (session) => bySession.has(session),
    publish(event) {
      events += 1;
      const followers = bySession.get(`${event.tenant}/${event.sessionId}`);
      if (!followers) return;
      for (const client of followers) {
        const last = client.queue.at(-1);
        if (event.type === 'assistant.delta' && last?.type === 'assistant.delta' && last.turnId === event.turnId) {
          client.queue[client.queue.length - 1] = { ...last, data: { text: last.data.text + event.data.text } };
          continue;
        }
        if (client.queue.length >= maxQueue) {
          client.queue = [];
          send(client, 'reload', { reason: 'too many events at once' });
          continue;
        }
        client.queue.push(event);
      }
    },
    flush,
    stats: () => ({ events, frames, flushes }),
    get clients() {
      return clients.size;
    },
    stop() {
      clearInterval(timer);
      clearInterval(heartbeat);
      clients.clear();
      bySession.clear();
    },
  };
}
