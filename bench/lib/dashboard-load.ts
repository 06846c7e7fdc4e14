import type { NatsConnection } from '@nats-io/nats-core';
import { cpuTimeMs } from './cpu.ts';
import { closedLoop } from './load.ts';

/** The dashboard's own cost while sessions stream, and what its browser stream carried. */
export interface DashboardFigure {
  readonly concurrency: number;
  readonly sessions: number;
  readonly seconds: number;
  /** CPU the dashboard process used over the stretch, in ms; undefined off Linux. */
  readonly cpuMs: number | undefined;
  /** That CPU as a share of one core. */
  readonly cpuPercentOfCore: number | undefined;
  readonly cpuMsPerSession: number | undefined;
  /** Server-sent event messages one browser following one session received, per second. */
  readonly messagesPerSecond: number;
  /** Deltas the followed sessions streamed, and the `session` messages that carried them. */
  readonly followedDeltas: number;
  readonly followedMessages: number;
}

/**
 * Runs `session` at `concurrency` for `durationMs` while a browser-like client follows the dashboard's event
 * stream (`/api/events?session=…` for one of the sessions); measures the dashboard process's CPU.
 */
export async function measureDashboard(options: {
  nc: NatsConnection;
  url: string;
  pid: number | undefined;
  tenant: string;
  sessionId: (index: number) => string;
  session: (index: number) => Promise<unknown>;
  concurrency: number;
  durationMs: number;
}): Promise<DashboardFigure> {
  const followed = options.sessionId(0);
  let followedDeltas = 0;
  const deltas = options.nc.subscribe(`agentbus.${options.tenant}.sessions.${followed}.live.assistant.delta`, { callback: () => void (followedDeltas += 1) });
  await options.nc.flush();
  const controller = new AbortController();
  const response = await fetch(`${options.url}api/events?session=${options.tenant}/${followed}`, { signal: controller.signal });
  if (!response.ok || !response.body) throw new Error(`the dashboard's event stream answered ${response.status}`);
  let messages = 0;
  let followedMessages = 0;
  let buffer = '';
  const reading = (async () => {
    const decoder = new TextDecoder();
    const reader = response.body!.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (!frame.startsWith('event: ')) continue;
        messages += 1;
        if (frame.startsWith('event: session') && frame.includes('"assistant.delta"')) followedMessages += 1;
      }
    }
  })().catch(() => undefined);
  const before = cpuTimeMs(options.pid);
  const startMessages = messages;
  const began = performance.now();
  const load = await closedLoop(async (index) => void (await options.session(index)), { concurrency: options.concurrency, durationMs: options.durationMs });
  const seconds = (performance.now() - began) / 1000;
  const after = cpuTimeMs(options.pid);
  // The last flush of the followed session's events, then the stream closes.
  await new Promise((resolve) => setTimeout(resolve, 500));
  controller.abort();
  await reading;
  deltas.unsubscribe();
  const cpuMs = before === undefined || after === undefined ? undefined : after - before;
  return {
    concurrency: options.concurrency,
    sessions: load.sessions,
    seconds,
    cpuMs,
    cpuPercentOfCore: cpuMs === undefined ? undefined : (cpuMs / (seconds * 1000)) * 100,
    cpuMsPerSession: cpuMs === undefined ? undefined : cpuMs / Math.max(1, load.sessions),
    messagesPerSecond: (messages - startMessages) / seconds,
    followedDeltas,
    followedMessages,
  };
}
