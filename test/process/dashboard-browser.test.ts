import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { startDashboardService } from '../../services/dashboard/index.ts';
import type { DashboardService } from '../../services/dashboard/index.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { artifactsDir, launchChromium } from '../helpers/browser.ts';
import { createGateTool } from '../helpers/gate-tool.ts';
import { collectEvents, requestJson, silentLogger, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

// The dashboard against a real stack (nats-server, runtime, scripted provider, tool worker) in real
// headless Chromium: the page must show each state of a turn as it happens.

const gate = createGateTool('gate');
const ANSWER = 'The gate is open now, so here is the whole answer, streamed a few characters at a time so that you can watch it arrive.';
let stack: TestStack;
let nc: NatsConnection;
let dashboard: DashboardService;
let browser: Browser;
let page: Page;
let shots: string;
/** Script errors and console errors of the page (but failed loads, which `failedLoads` tells by URL): there must be none. */
const pageErrors: string[] = [];
/** Requests of the page answered with 4xx/5xx, as `status path`. */
const failedLoads: string[] = [];

beforeAll(async () => {
  stack = await startStack({
    script: {
      responses: [
        { text: 'Let me wait for the gate to open before I answer you properly.', toolCalls: [{ name: 'gate', args: {} }], delayMs: 60, chunkSize: 2 },
        { text: ANSWER, delayMs: 40, chunkSize: 3 },
      ],
    },
    extraTools: [gate.tool],
  });
  nc = await connect({ servers: stack.server.url });
  dashboard = await startDashboardService({ nc, logger: silentLogger(), host: '127.0.0.1', port: 0, flushMs: 100, workersIntervalMs: 500 });
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
  page.on('pageerror', (error) => pageErrors.push(error.message));
  page.on('console', (message) => {
    if (message.type() === 'error' && !message.text().startsWith('Failed to load resource')) pageErrors.push(message.text());
  });
  page.on('response', (response) => {
    if (response.status() >= 400) failedLoads.push(`${response.status()} ${new URL(response.url()).pathname}`);
  });
  shots = await artifactsDir('dashboard');
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await dashboard?.stop();
  await nc?.close();
  await stack?.stop();
});

const activeState = (machine: string) => page.locator(`#${machine}-chart g.state[aria-current="step"]`);

describe('the dashboard in headless Chromium, against a real stack', () => {
  it('shows a turn live through Streaming, ToolExecution and Yielding, in the fleet, timeline and workers views', async () => {
    const sessionId = `browser-${Date.now()}`;
    await page.goto(`${dashboard.url}#/session/default/${sessionId}`);
    await page.locator('#conn[data-state="live"]').waitFor({ timeout: 10_000 });
    await page.locator('#turn-chart svg g.state[data-state="ToolExecution"]').waitFor();

    const events = collectEvents(stack.client, 'default', sessionId);
    const reply = await requestJson(stack.client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'Open the gate, then answer.' });
    expect(reply).toMatchObject({ accepted: true });

    // Streaming: the first answer streams for a few seconds (60 ms per two characters).
    await page.locator('#turn-chart g.state[data-state="Streaming"][aria-current="step"]').waitFor({ timeout: 10_000 });
    await expect(activeState('turn').count()).resolves.toBe(1);
    await page.screenshot({ path: join(shots, '1-streaming.png'), fullPage: true });

    // ToolExecution: the gate tool holds the turn there until the test opens it.
    await page.locator('#turn-chart g.state[data-state="ToolExecution"][aria-current="step"]').waitFor({ timeout: 10_000 });
    await expect(activeState('turn').getAttribute('data-state')).resolves.toBe('ToolExecution');
    await page.locator('#timeline .event[data-type="tool.use"]', { hasText: 'gate' }).waitFor();
    await page.locator('#timeline .event[data-type="tool.use"]').first().click();
    await expect(page.locator('#detail').textContent()).resolves.toContain('side_effecting');
    await page.screenshot({ path: join(shots, '2-tool-execution.png'), fullPage: true });

    // The fleet view lists the turn while it runs, in its current state.
    await page.locator('.tabs a[data-view="fleet"]').click();
    const fleetRow = page.locator(`#fleet-active tr[data-session="${sessionId}"]`);
    await fleetRow.waitFor({ timeout: 5000 });
    await expect(fleetRow.locator('.state-pill').textContent()).resolves.toBe('ToolExecution');
    await expect(fleetRow.textContent()).resolves.toContain('default');
    await page.screenshot({ path: join(shots, '3-fleet.png'), fullPage: true });

    // The workers view lists the tools worker and its tools, from $SRV.
    await page.locator('.tabs a[data-view="workers"]').click();
    await page.locator('#tools-table tr[data-tool="gate"]').waitFor({ timeout: 5000 });
    await page.locator('#tools-table tr[data-tool="read_file"]').waitFor();
    await page.locator('#nodes-table tbody tr').first().waitFor();
    // The scripted provider answers $SRV too; it has no circuit breaker.
    await expect(page.locator('#providers-table tr[data-provider="scripted"] .state-pill').textContent()).resolves.toBe('no breaker');
    await page.screenshot({ path: join(shots, '4-workers.png'), fullPage: true });

    // Back to the session; the gate opens and the turn yields.
    await page.locator('.tabs a[data-view="session"]').click();
    gate.open();
    await page.locator('#turn-chart g.state[data-state="Yielding"][aria-current="step"]').waitFor({ timeout: 15_000 });
    await events.until((all) => all.some((event) => event.type === 'turn.ended'));
    await expect.poll(() => page.locator('#output-text').textContent(), { timeout: 5000 }).toContain('watch it arrive');
    const timelineTypes = await page.locator('#timeline .event').evaluateAll((rows) => rows.map((row) => (row as HTMLElement).dataset.type));
    expect(timelineTypes).toEqual(expect.arrayContaining(['user.message', 'assistant.message', 'tool.use', 'tool.result', 'turn.ended']));
    await page.screenshot({ path: join(shots, '5-yielded.png'), fullPage: true });

    // The states the page showed are the ones the runtime published, in order.
    const published = events.events.filter((event) => event.type === 'state' && event.data.machine === 'turn').map((event) => (event as Extract<AgentEvent, { type: 'state' }>).data.value);
    expect(published).toEqual(['Preparing', 'Streaming', 'ToolExecution', 'Preparing', 'Streaming', 'Yielding']);
    const pathShown = await page.locator('#path-list li .chip').allTextContents();
    expect(pathShown).toEqual(published);

    // The NDJSON link downloads the session's log: every durable event, in order, one JSON object a line.
    const link = page.getByRole('link', { name: /NDJSON/ });
    const href = await link.getAttribute('href');
    expect(href).toMatch(/log\.ndjson$/);
    const download = await page.evaluate(async (url) => {
      const response = await fetch(url);
      return { status: response.status, type: response.headers.get('content-type'), text: await response.text() };
    }, href!);
    expect(download.status).toBe(200);
    expect(download.type).toContain('application/x-ndjson');
    const lines = download.text.trim().split('\n').map((line) => JSON.parse(line) as AgentEvent & { seq: number });
    const logged = events.events.filter((event) => ['session.created', 'user.message', 'turn.started', 'assistant.message', 'tool.use', 'tool.result', 'turn.ended'].includes(event.type));
    expect(lines.map((event) => event.id).sort()).toEqual(logged.map((event) => event.id).sort());
    expect(lines.map((event) => event.seq)).toEqual([...lines.map((event) => event.seq)].sort((a, b) => a - b));
    expect(lines.at(-1)).toMatchObject({ type: 'turn.ended', data: { reason: 'yielded' } });
    events.stop();
    expect(pageErrors).toEqual([]);
    // The one failed load: the session read before its first prompt, when the bus had nothing of it yet.
    expect(failedLoads).toEqual([`404 /api/sessions/default/${sessionId}`]);
    failedLoads.length = 0;
  }, 60_000);

  it('replays a finished session from its log: the scrubber steps the highlighted state back and forth', async () => {
    const sessionId = `replay-${Date.now()}`;
    const events = collectEvents(stack.client, 'default', sessionId);
    await requestJson(stack.client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'hello' });
    await events.until((all) => all.some((event) => event.type === 'turn.ended'), 20_000);
    events.stop();

    await page.goto(`${dashboard.url}#/session/default/${sessionId}`);
    await page.locator('#turn-chart g.state[data-state="Yielding"][aria-current="step"]').waitFor({ timeout: 10_000 });
    const steps = await page.locator('#path-list li').count();
    expect(steps).toBeGreaterThanOrEqual(3);
    await page.locator('#scrubber').fill('0');
    await expect(activeState('turn').getAttribute('data-state')).resolves.toBe('Preparing');
    await page.locator('#replay-next').click();
    await expect(activeState('turn').getAttribute('data-state')).resolves.toBe('Streaming');
    // The answer text is drawn on the next animation frame.
    await expect.poll(() => page.locator('#output-text').textContent(), { timeout: 5000 }).toContain('Let me wait for the gate');
    await page.screenshot({ path: join(shots, '6-replay.png'), fullPage: true });
    await page.locator('#replay-live').click();
    await expect(activeState('turn').getAttribute('data-state')).resolves.toBe('Yielding');

    // Both finished turns are in the fleet's recent list, with how they ended.
    await page.locator('.tabs a[data-view="fleet"]').click();
    await page.locator(`#fleet-recent tr[data-session="${sessionId}"]`).waitFor();
    await expect(page.locator(`#fleet-recent tr[data-session="${sessionId}"] .state-pill`).textContent()).resolves.toBe('yielded');
    await page.screenshot({ path: join(shots, '7-fleet-recent.png'), fullPage: true });
    expect(pageErrors).toEqual([]);
    expect(failedLoads).toEqual([]);
  }, 40_000);

  it('forks a session from a timeline event through the dashboard server, and opens the fork with its inherited history', async () => {
    const sessionId = `fork-src-${Date.now()}`;
    for (const text of ['first question', 'second question']) {
      const events = collectEvents(stack.client, 'default', sessionId);
      await requestJson(stack.client, `agentbus.default.sessions.${sessionId}.prompt`, { text });
      await events.until((all) => all.some((event) => event.type === 'turn.ended'), 20_000);
      events.stop();
    }
    await page.goto(`${dashboard.url}#/session/default/${sessionId}`);
    const second = page.locator('#timeline .event[data-type="user.message"]', { hasText: 'second question' });
    await second.waitFor({ timeout: 10_000 });
    // Regenerate the second answer: fork at its user message (the fork ends just before it).
    await second.locator('button.fork').click();
    await page.waitForFunction((source) => /^#\/session\/default\//.test(location.hash) && !location.hash.endsWith(`/${source}`), sessionId, { timeout: 10_000 });
    const forkId = decodeURIComponent(new URL(page.url()).hash.split('/').at(-1)!);
    await page.locator('#timeline .event[data-type="session.forked"]', { hasText: `forked from ${sessionId}` }).waitFor({ timeout: 10_000 });
    await page.locator('#timeline .event[data-type="user.message"]', { hasText: 'first question' }).waitFor();
    await expect(page.locator('#timeline .event[data-type="user.message"]', { hasText: 'second question' }).count()).resolves.toBe(0);
    await page.screenshot({ path: join(shots, '8-fork.png'), fullPage: true });
    await expect(page.locator('#session-meta').textContent()).resolves.not.toContain('null');
    // The fork takes a prompt like any session.
    const events = collectEvents(stack.client, 'default', forkId);
    expect(await requestJson(stack.client, `agentbus.default.sessions.${forkId}.prompt`, { text: 'second question, asked again' })).toMatchObject({ accepted: true });
    await events.until((all) => all.some((event) => event.type === 'turn.ended'), 20_000);
    events.stop();
    await page.locator('#timeline .event[data-type="user.message"]', { hasText: 'asked again' }).waitFor({ timeout: 10_000 });
    // The server refuses what is not a fork: another method, a body that is not JSON, a sequence the session lacks.
    const refusals = await page.evaluate(async (path) => {
      const post = (body: string, type: string) => fetch(path, { method: 'POST', headers: { 'Content-Type': type }, body }).then(async (response) => ({ status: response.status, body: await response.json() }));
      return {
        get: (await fetch(path)).status,
        form: (await post('atSeq=1', 'application/x-www-form-urlencoded')).status,
        missing: await post(JSON.stringify({ atSeq: 999_999_999 }), 'application/json'),
      };
    }, `/api/sessions/default/${sessionId}/fork`);
    expect(refusals).toMatchObject({ get: 405, form: 415, missing: { status: 400, body: { error: { code: 'invalid_input' } } } });
    expect(pageErrors).toEqual([]);
    expect(failedLoads.sort()).toEqual([`400 /api/sessions/default/${sessionId}/fork`, `405 /api/sessions/default/${sessionId}/fork`, `415 /api/sessions/default/${sessionId}/fork`]);
    failedLoads.length = 0;
  }, 60_000);

  it('stays responsive with 100 sessions streaming: fleet rows are patched in place and updates come coalesced', async () => {
    gate.open(); // (already open when the first test ran; this test must not depend on it)
    const fleetPage = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
    // Counts the server-sent messages the page receives, by event name.
    await fleetPage.addInitScript(() => {
      const counts: Record<string, number> = {};
      (window as unknown as { sseCounts: Record<string, number> }).sseCounts = counts;
      const original = EventSource.prototype.addEventListener;
      EventSource.prototype.addEventListener = function (this: EventSource, type: string, listener: EventListenerOrEventListenerObject, options?: boolean | AddEventListenerOptions) {
        original.call(this, type, () => (counts[type] = (counts[type] ?? 0) + 1), options);
        return original.call(this, type, listener, options);
      } as typeof EventSource.prototype.addEventListener;
    });
    await fleetPage.goto(`${dashboard.url}#/fleet`);
    await fleetPage.locator('#conn[data-state="live"]').waitFor({ timeout: 10_000 });
    // Every row element the table ever gets, and every time it moves or goes.
    await fleetPage.evaluate(() => {
      const stats = { added: 0, removed: 0 };
      (window as unknown as { rowStats: typeof stats }).rowStats = stats;
      new MutationObserver((records) => {
        for (const record of records) {
          stats.added += record.addedNodes.length;
          stats.removed += record.removedNodes.length;
        }
      }).observe(document.querySelector('#fleet-active tbody')!, { childList: true });
    });

    let deltas = 0;
    let ended = 0;
    const deltaWatch = stack.client.subscribe('agentbus.default.sessions.*.live.assistant.delta', { callback: () => void (deltas += 1) });
    const endWatch = stack.client.subscribe('agentbus.default.sessions.*.log', {
      callback: (_error, message) => {
        if (new TextDecoder().decode(message.data).includes('turn.ended')) ended += 1;
      },
    });
    const tag = `many-${Date.now()}`;
    const began = Date.now();
    await Promise.all(Array.from({ length: 100 }, (_, index) => requestJson(stack.client, `agentbus.default.sessions.${tag}-${index}.prompt`, { text: 'stream, please' }, 15_000)));
    // As soon as 50 rows are on screen, mark them in the same breath (the turns all started together, so
    // they also end close together: a separate look later could find the table already empty). The same
    // elements must still be there after the next few updates.
    let marked = 0;
    await expect
      .poll(
        async () =>
          (marked = await fleetPage.evaluate(() => {
            const rows = Array.from(document.querySelectorAll<HTMLElement>('#fleet-active tbody tr'));
            if (rows.length >= 50) for (const row of rows) (row as HTMLElement & { mark?: string }).mark = row.dataset.turn;
            return rows.length;
          })),
        { timeout: 20_000, interval: 50 },
      )
      .toBeGreaterThanOrEqual(50);
    await fleetPage.waitForTimeout(350);
    const kept = await fleetPage.evaluate(() =>
      Array.from(document.querySelectorAll<HTMLElement & { mark?: string }>('#fleet-active tbody tr')).filter((row) => row.mark === row.dataset.turn).length,
    );
    await fleetPage.screenshot({ path: join(shots, '8-fleet-100.png'), fullPage: false });
    await expect.poll(() => ended, { timeout: 90_000 }).toBeGreaterThanOrEqual(100);
    await expect.poll(() => fleetPage.locator('#fleet-active tbody tr').count(), { timeout: 10_000 }).toBe(0);
    const elapsed = Date.now() - began;
    deltaWatch.unsubscribe();
    endWatch.unsubscribe();
    const { sseCounts, rowStats } = await fleetPage.evaluate(() => ({
      sseCounts: (window as unknown as { sseCounts: Record<string, number> }).sseCounts,
      rowStats: (window as unknown as { rowStats: { added: number; removed: number } }).rowStats,
    }));
    await fleetPage.close();

    expect(deltas).toBeGreaterThan(1000);
    // One fleet message per flush (100 ms here) at most, whatever the number of events; no session events at all.
    expect(sseCounts['fleet']).toBeLessThanOrEqual(Math.ceil(elapsed / 100) + 5);
    expect(sseCounts['session'] ?? 0).toBe(0);
    // Rows are patched in place: rows still running survived later updates as the same elements ...
    expect(marked).toBeGreaterThanOrEqual(50);
    expect(kept).toBeGreaterThan(0);
    // ... and each turn's row was added once and removed once, never rebuilt.
    expect(rowStats.added).toBe(100);
    expect(rowStats.removed).toBe(100);
  }, 150_000);
});
