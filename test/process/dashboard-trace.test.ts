import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { startDashboardService } from '../../services/dashboard/index.ts';
import type { DashboardService } from '../../services/dashboard/index.ts';
import { createLogger } from '../../src/logging.ts';
import { traceIdOf } from '../../src/protocol/index.ts';
import { startTracing } from '../../src/telemetry/index.ts';
import type { Tracing } from '../../src/telemetry/index.ts';
import { launchChromium } from '../helpers/browser.ts';
import { startOtlpReceiver } from '../helpers/otlp-receiver.ts';
import type { OtlpReceiver } from '../helpers/otlp-receiver.ts';
import { collectEvents, requestJson, silentLogger, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

// With tracing on, the session page shows the trace id of the session's latest turn, linked through AGENTBUS_TRACE_URL:
// a stack in this process (its runtime traces as a runtime process would), the dashboard, headless Chromium.

let receiver: OtlpReceiver;
let tracing: Tracing;
let stack: TestStack;
let dashboard: DashboardService;
let browser: Browser;
const saved = { ...process.env };

beforeAll(async () => {
  receiver = await startOtlpReceiver();
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = receiver.url;
  process.env.OTEL_EXPORTER_OTLP_PROTOCOL = 'http/json';
  tracing = await startTracing({ serviceName: 'agentbus-runtime', logger: createLogger({ name: 'test', level: 'silent' }) });
  stack = await startStack({ script: { responses: [{ text: 'traced answer' }] } });
  dashboard = await startDashboardService({ nc: stack.client, logger: silentLogger(), host: '127.0.0.1', port: 0, flushMs: 50, traceUrl: 'http://jaeger.invalid:16686/trace/{traceId}' });
  browser = await launchChromium();
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await dashboard?.stop();
  await stack?.stop();
  await tracing?.shutdown();
  await receiver?.close();
  process.env = saved;
});

describe('the session page with tracing on', () => {
  it('shows the latest turn\'s trace id, as it starts, linked to the tracing UI', async () => {
    const page = await browser.newPage();
    await page.goto(`${dashboard.url}#/session/default/traced`);
    await page.locator('#conn[data-state="live"]').waitFor({ timeout: 10_000 });
    const events = collectEvents(stack.client, 'default', 'traced');
    expect(await requestJson(stack.client, 'agentbus.default.sessions.traced.prompt', { text: 'hello' })).toMatchObject({ accepted: true });
    await events.until((seen) => seen.some((event) => event.type === 'turn.ended'));
    events.stop();
    const started = events.events.find((event) => event.type === 'turn.started');
    const traceId = traceIdOf(started?.type === 'turn.started' ? started.data.trace?.traceparent : undefined);
    expect(traceId).toMatch(/^[\da-f]{32}$/);
    // Live: the turn.started event came over the page's event stream.
    const link = page.locator('#session-meta .trace a');
    await link.waitFor({ timeout: 10_000 });
    await expect(link.textContent()).resolves.toBe(traceId);
    await expect(link.getAttribute('href')).resolves.toBe(`http://jaeger.invalid:16686/trace/${traceId}`);
    // Read back from the log when the page opens the session anew.
    await page.reload();
    await page.locator(`#session-meta .trace a[href$="${traceId}"]`).waitFor({ timeout: 10_000 });
    await page.close();
  }, 60_000);
});
