import { describe, expect, it } from 'vitest';
import { readDashboardConfig } from '../../services/dashboard/config.ts';
import { parseTraceUrl, traceLinks } from '../../services/dashboard/trace-links.ts';
import { createEnvelopeFactory } from '../../src/protocol/index.ts';
import type { EventDataMap, LogEvent } from '../../src/protocol/index.ts';

let id = 0;
const envelopes = createEnvelopeFactory({ newId: () => `e${(id += 1)}`, now: () => 1_000 });
const logged = <T extends LogEvent['type']>(type: T, data: EventDataMap[T], turnId: string): LogEvent =>
  ({ ...envelopes.create(type, { tenant: 'acme', sessionId: 's1', turnId }, data), seq: 1 }) as LogEvent;
const CALLER = '00-a1b2c3d4e5f60718293a4b5c6d7e8f90-0123456789abcdef-01';

describe('the dashboard links a session to its traces', () => {
  it('lists the trace each turn.started logged, linked through AGENTBUS_TRACE_URL', () => {
    const log = [
      logged('user.message', { text: 'hi' }, 't1'),
      logged('turn.started', { model: 'scripted:default', maxSteps: 8, deadline: 0, finalAnswer: true, trace: { traceparent: CALLER } }, 't1'),
      logged('turn.started', { model: 'scripted:default', maxSteps: 8, deadline: 0, finalAnswer: true }, 't2'),
    ];
    expect(traceLinks(log)).toEqual([{ turnId: 't1', traceId: 'a1b2c3d4e5f60718293a4b5c6d7e8f90' }]);
    expect(traceLinks(log, 'http://jaeger:16686/trace/{traceId}')).toEqual([
      { turnId: 't1', traceId: 'a1b2c3d4e5f60718293a4b5c6d7e8f90', url: 'http://jaeger:16686/trace/a1b2c3d4e5f60718293a4b5c6d7e8f90' },
    ]);
    expect(readDashboardConfig({ AGENTBUS_TRACE_URL: ' https://grafana/explore?trace={traceId} ' }).traceUrl).toBe('https://grafana/explore?trace={traceId}');
    expect(readDashboardConfig({}).traceUrl).toBeUndefined();
    expect(() => parseTraceUrl('http://jaeger:16686/trace/')).toThrow(/\{traceId\}/);
    expect(() => parseTraceUrl('javascript:alert({traceId})')).toThrow(/http\(s\)/);
  });
});
