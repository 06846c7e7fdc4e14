import { headers } from '@nats-io/nats-core';
import { afterAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logging.ts';
import { createEnvelopeFactory, traceIdOf } from '../../src/protocol/index.ts';
import type { EventDataMap, LogEvent } from '../../src/protocol/index.ts';
import {
  startTracing,
  traceContextOfHeaders,
  traceGenerate,
  traceMemoryCall,
  traceProviderCall,
  traceStep,
  traceToolCall,
  traceTurnEnd,
  traceTurnStart,
  tracingEnvOf,
} from '../../src/telemetry/index.ts';
import { startOtlpReceiver } from '../helpers/otlp-receiver.ts';

const envelopes = createEnvelopeFactory({ newId: (() => {
  let id = 0;
  return () => `e${(id += 1)}`;
})(), now: () => 1_000 });
const logged = <T extends LogEvent['type']>(type: T, data: EventDataMap[T], turnId = 't1'): LogEvent =>
  ({ ...envelopes.create(type, { tenant: 'acme', sessionId: 's1', turnId }, data), seq: 1 }) as LogEvent;
const CALLER = '00-a1b2c3d4e5f60718293a4b5c6d7e8f90-0123456789abcdef-01';

describe('when tracing is on', () => {
  it('is off by default, on with an OTLP endpoint or a named exporter, off again with none or OTEL_SDK_DISABLED', () => {
    expect(tracingEnvOf({}).exporters).toEqual([]);
    expect(tracingEnvOf({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })).toEqual({ exporters: ['otlp'], protocol: 'http/protobuf', unsupported: [] });
    expect(tracingEnvOf({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' })).toMatchObject({ exporters: ['otlp'], protocol: 'http/json' });
    expect(tracingEnvOf({ OTEL_TRACES_EXPORTER: 'console,otlp' }).exporters).toEqual(['console', 'otlp']);
    expect(tracingEnvOf({ OTEL_TRACES_EXPORTER: 'zipkin' })).toMatchObject({ exporters: [], unsupported: ['exporter zipkin'] });
    expect(tracingEnvOf({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toMatchObject({ exporters: ['otlp'], protocol: 'http/protobuf', unsupported: ['protocol grpc'] });
    expect(tracingEnvOf({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' }).exporters).toEqual([]);
    expect(tracingEnvOf({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' }).exporters).toEqual([]);
  });

  it('with tracing off every hook does nothing: nothing is logged, headers stay as they are', async () => {
    const withParent = headers();
    withParent.set('traceparent', CALLER);
    expect(traceContextOfHeaders(withParent)).toBeUndefined();
    expect(traceTurnStart({ tenant: 'acme', sessionId: 's1', turnId: 't1', model: 'scripted:default', logged: [logged('user.message', { text: 'hi', trace: { traceparent: CALLER } })] })).toEqual({});
    traceStep('t1', 1);
    traceTurnEnd('t1', { reason: 'yielded', steps: 1 });
    const request = { v: 1 as const, requestId: 'r1', model: 'scripted:default', messages: [], tools: [], turnId: 't1' };
    const providerCall = traceProviderCall(request);
    expect(providerCall.untraced).toBe(true);
    const plain = headers();
    expect(providerCall.inject(plain)).toBe(plain);
    expect(plain.has('traceparent')).toBe(false);
    const chunks: AsyncIterable<never> = { [Symbol.asyncIterator]: () => ({ next: async () => ({ done: true, value: undefined as never }) }) };
    expect(providerCall.watch(chunks)).toBe(chunks);
    const toolCall = traceToolCall({ v: 1, callId: 'c1', effectId: 'x', name: 'current_time', args: {}, tenant: 'acme', sessionId: 's1', turnId: 't1', deadline: 0 }, 1);
    expect(toolCall.untraced).toBe(true);
    const reply = Promise.resolve('reply');
    expect(toolCall.settle(reply)).toBe(reply);
    expect(traceMemoryCall('search_memory', { tenant: 'acme', turnId: 't1' }).untraced).toBe(true);
    const writer = { write: () => true, fail: () => true, ended: false, nextSeq: 0 };
    expect(traceGenerate(withParent, 'scripted', { model: 'default' }).watch(writer)).toBe(writer);
  });
});

describe('turn spans across failover', () => {
  let receiver: Awaited<ReturnType<typeof startOtlpReceiver>> | undefined;
  const saved = { ...process.env };
  afterAll(async () => {
    process.env = saved;
    await receiver?.close();
  });

  it('a new turn joins its prompt\'s trace and logs its own span; a resumed turn continues the trace its turn.started names', async () => {
    receiver = await startOtlpReceiver();
    // The OTLP exporter reads its settings from process.env, as in a service process.
    process.env.OTEL_EXPORTER_OTLP_ENDPOINT = receiver.url;
    process.env.OTEL_EXPORTER_OTLP_PROTOCOL = 'http/json';
    const tracing = await startTracing({ serviceName: 'agentbus-runtime', logger: createLogger({ name: 'test', level: 'silent' }) });
    try {
      expect(tracing.enabled).toBe(true);
      const fresh = traceTurnStart({ tenant: 'acme', sessionId: 's1', turnId: 'fresh', model: 'openai:gpt-5.4-mini', logged: [logged('user.message', { text: 'hi', trace: { traceparent: CALLER } }, 'fresh')] });
      expect(traceIdOf(fresh.trace?.traceparent)).toBe('a1b2c3d4e5f60718293a4b5c6d7e8f90');
      traceStep('fresh', 1);
      // A traced provider call says so: its client gives it headers of its own, which get the trace context.
      const providerCall = traceProviderCall({ v: 1, requestId: 'r2', model: 'openai:gpt-5.4-mini', messages: [], tools: [], turnId: 'fresh' });
      expect(providerCall.untraced).toBe(false);
      const own = headers();
      expect(providerCall.inject(own).has('traceparent')).toBe(true);
      traceTurnEnd('fresh', { reason: 'yielded', steps: 1, usage: { inputTokens: 12, outputTokens: 3 }, cost: 0.001 });

      // Another node logged this turn's start, then died: its span never reached the collector, its context is in the log.
      const loggedStart = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
      const resumed = traceTurnStart({
        tenant: 'acme',
        sessionId: 's1',
        turnId: 'resumed',
        model: 'scripted:default',
        logged: [
          logged('user.message', { text: 'hi' }, 'resumed'),
          logged('turn.started', { model: 'scripted:default', maxSteps: 8, deadline: 0, finalAnswer: true, trace: { traceparent: loggedStart } }, 'resumed'),
        ],
      });
      expect(resumed).toEqual({});
      traceTurnEnd('resumed', { reason: 'failed', steps: 2, error: { code: 'provider_error', message: 'boom', retryable: false } });
    } finally {
      await tracing.shutdown();
    }
    const turns = receiver.spans.filter((span) => span.name === 'invoke_agent');
    const fresh = turns.find((span) => span.attributes['agentbus.turn.id'] === 'fresh');
    expect(fresh).toMatchObject({ service: 'agentbus-runtime', traceId: 'a1b2c3d4e5f60718293a4b5c6d7e8f90', parentSpanId: '0123456789abcdef', statusCode: 0 });
    expect(fresh?.attributes).toMatchObject({ 'gen_ai.provider.name': 'openai', 'gen_ai.request.model': 'gpt-5.4-mini', 'gen_ai.usage.input_tokens': 12, 'gen_ai.conversation.id': 's1' });
    expect(receiver.spans.find((span) => span.name === 'step')).toMatchObject({ parentSpanId: fresh?.spanId, traceId: fresh?.traceId });
    const resumed = turns.find((span) => span.attributes['agentbus.turn.id'] === 'resumed');
    expect(resumed).toMatchObject({ traceId: '0af7651916cd43dd8448eb211c80319c', parentSpanId: 'b7ad6b7169203331', statusCode: 2 });
    expect(resumed?.attributes).toMatchObject({ 'agentbus.turn.resumed': true, 'error.type': 'provider_error' });
  });
});
