import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { startDashboardService } from '../../services/dashboard/index.ts';
import type { DashboardService } from '../../services/dashboard/index.ts';
import { collectEvents, requestJson, silentLogger, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

// The dashboard's HTTP surface against a real stack: what it answers, what it refuses and how.

let stack: TestStack;
let nc: NatsConnection;
let open: DashboardService;
let locked: DashboardService;
const TOKEN = 'let-me-in-please';

/** A raw GET (or another method) with headers of our choosing; resolves with status, headers and body. */
function get(url: string, options: { method?: string; headers?: Record<string, string> } = {}): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const call = request(url, { method: options.method ?? 'GET', headers: options.headers ?? {} }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body }));
    });
    call.on('error', reject);
    call.setTimeout(10_000, () => call.destroy(new Error(`GET ${url} timed out`)));
    call.end();
  });
}

beforeAll(async () => {
  stack = await startStack({ script: { responses: [{ text: 'Hello from the script.' }] } });
  nc = await connect({ servers: stack.server.url });
  open = await startDashboardService({ nc, logger: silentLogger(), host: '127.0.0.1', port: 0, flushMs: 50 });
  locked = await startDashboardService({ nc, logger: silentLogger(), host: '127.0.0.1', port: 0, token: TOKEN });
}, 30_000);

afterAll(async () => {
  await open?.stop();
  await locked?.stop();
  await nc?.close();
  await stack?.stop();
});

describe('the dashboard over HTTP', () => {
  it('serves the page, its scripts and both machine drawings, with no build step', async () => {
    const page = await get(open.url);
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toContain('text/html');
    expect(page.body).toContain('<script type="module" src="/static/app.js">');
    for (const file of ['app.js', 'fleet-view.js', 'session-view.js', 'workers-view.js', 'statechart.js', 'timeline.js', 'event-detail.js', 'format.js', 'style.css']) {
      expect((await get(`${open.url}static/${file}`)).status, file).toBe(200);
    }
    const svg = await get(`${open.url}api/machines/turn.svg`);
    expect(svg.headers['content-type']).toBe('image/svg+xml');
    expect(svg.body).toContain('data-state="ToolExecution"');
    expect(JSON.parse((await get(`${open.url}api/machines/session.json`)).body)).toHaveProperty('graph.initial', 'idle');
  });

  it('answers bad requests with clear 4xx JSON errors', async () => {
    const cases: Array<[string, { method?: string; headers?: Record<string, string> }, number, string]> = [
      ['nope', {}, 404, 'not_found'],
      ['static/../../package.json', {}, 404, 'not_found'],
      ['static/secret.txt', {}, 404, 'not_found'],
      ['api/machines/tool.svg', {}, 404, 'not_found'],
      ['api/sessions/default/has%20space', {}, 400, 'invalid_input'],
      [`api/sessions/${'x'.repeat(65)}/s1`, {}, 400, 'invalid_input'],
      ['api/sessions/default/s1/log.xml', {}, 404, 'not_found'],
      ['api/sessions/default/never-seen', {}, 404, 'not_found'],
      ['api/events?session=not-a-pair', {}, 400, 'invalid_input'],
      ['api/sessions/%E0%A4%A', {}, 400, 'invalid_input'],
      ['', { method: 'POST' }, 405, 'method_not_allowed'],
      ['api/fleet', { method: 'DELETE' }, 405, 'method_not_allowed'],
      ['api/fleet', { headers: { Host: 'evil.example:4280' } }, 403, 'denied'],
    ];
    for (const [path, options, status, code] of cases) {
      const response = await get(`${open.url}${path}`, options);
      expect([path, response.status], response.body).toEqual([path, status]);
      expect(JSON.parse(response.body), path).toMatchObject({ error: { code, message: expect.any(String) } });
    }
  });

  it('without a token, answers only requests addressed to a loopback host, wherever it is bound; with one, any host', async () => {
    const wide = await startDashboardService({ nc, logger: silentLogger(), host: '0.0.0.0', port: 0 });
    const wideLocked = await startDashboardService({ nc, logger: silentLogger(), host: '0.0.0.0', port: 0, token: TOKEN });
    try {
      const port = (url: string) => new URL(url).port;
      expect((await get(`http://127.0.0.1:${port(wide.url)}/api/fleet`)).status).toBe(200);
      expect((await get(`http://127.0.0.1:${port(wide.url)}/api/fleet`, { headers: { Host: 'evil.example:4280' } })).status).toBe(403);
      expect((await get(`http://127.0.0.1:${port(wideLocked.url)}/api/fleet`, { headers: { Host: 'dashboard.example:4280', Authorization: `Bearer ${TOKEN}` } })).status).toBe(200);
    } finally {
      await wide.stop();
      await wideLocked.stop();
    }
  });

  it('asks for the token when one is set: 401 without it or with a wrong one; the page sets a cookie for the rest', async () => {
    expect((await get(locked.url)).status).toBe(401);
    expect((await get(`${locked.url}api/fleet?token=wrong-token-123`)).status).toBe(401);
    expect((await get(`${locked.url}api/fleet`, { headers: { Authorization: 'Bearer nope' } })).status).toBe(401);
    expect(JSON.parse((await get(`${locked.url}api/fleet`)).body)).toMatchObject({ error: { code: 'unauthorized' } });
    const page = await get(`${locked.url}?token=${TOKEN}`);
    expect(page.status).toBe(200);
    const cookie = String(page.headers['set-cookie']).split(';')[0]!;
    expect(cookie).toContain('agentbus_dashboard_token=');
    expect(String(page.headers['set-cookie'])).toMatch(/HttpOnly/);
    expect((await get(`${locked.url}api/fleet`, { headers: { Cookie: cookie } })).status).toBe(200);
    expect((await get(`${locked.url}api/fleet`, { headers: { Authorization: `Bearer ${TOKEN}` } })).status).toBe(200);
  });

  it('reads a session back (log, live, path) and downloads its log as NDJSON and JSON', async () => {
    const sessionId = `http-${Date.now()}`;
    const events = collectEvents(stack.client, 'default', sessionId);
    await requestJson(stack.client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'hi' });
    await events.until((all) => all.some((event) => event.type === 'turn.ended'));
    events.stop();
    const view = JSON.parse((await get(`${open.url}api/sessions/default/${sessionId}`)).body) as { log: Array<{ type: string; seq: number }>; path: Array<{ state: string }> };
    expect(view.log.map((event) => event.type)).toEqual(['session.created', 'user.message', 'turn.started', 'assistant.message', 'turn.ended']);
    expect(view.path.map((step) => step.state)).toEqual(['Preparing', 'Streaming', 'Yielding']);
    const ndjson = await get(`${open.url}api/sessions/default/${sessionId}/log.ndjson`);
    expect(ndjson.headers['content-type']).toContain('application/x-ndjson');
    expect(ndjson.headers['content-disposition']).toBe(`attachment; filename="default-${sessionId}.ndjson"`);
    expect(ndjson.body.trim().split('\n').map((line) => (JSON.parse(line) as { seq: number }).seq)).toEqual(view.log.map((event) => event.seq));
    const json = JSON.parse((await get(`${open.url}api/sessions/default/${sessionId}/log.json`)).body) as unknown[];
    expect(json).toEqual(view.log);
    const list = JSON.parse((await get(`${open.url}api/sessions`)).body) as { sessions: Array<{ sessionId: string; events: number }> };
    expect(list.sessions).toContainEqual({ tenant: 'default', sessionId, events: 5 });
  });

  it('drops a deleted session from the fleet and the session list, and no longer reads it back', async () => {
    const sessionId = `deleted-${Date.now()}`;
    const events = collectEvents(stack.client, 'default', sessionId);
    await requestJson(stack.client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'hi' });
    await events.until((all) => all.some((event) => event.type === 'turn.ended'));
    events.stop();
    type Fleet = { recent: Array<{ sessionId: string }>; active: Array<{ sessionId: string }> };
    const shown = async () => {
      const fleet = JSON.parse((await get(`${open.url}api/fleet`)).body) as Fleet;
      return [...fleet.active, ...fleet.recent].some((row) => row.sessionId === sessionId);
    };
    await expect.poll(shown, { timeout: 5_000 }).toBe(true);
    expect(await requestJson(stack.client, `agentbus.default.sessions.${sessionId}.delete`, {})).toMatchObject({ ok: true });
    await expect.poll(shown, { timeout: 5_000 }).toBe(false);
    expect((await get(`${open.url}api/sessions/default/${sessionId}`)).status).toBe(404);
    const list = JSON.parse((await get(`${open.url}api/sessions`)).body) as { sessions: Array<{ sessionId: string }> };
    expect(list.sessions.map((session) => session.sessionId)).not.toContain(sessionId);
  });

  it('pushes the fleet and the followed session to the browser as server-sent events', async () => {
    const sessionId = `sse-${Date.now()}`;
    const controller = new AbortController();
    const response = await fetch(`${open.url}api/events?session=default/${sessionId}`, { signal: controller.signal });
    expect(response.headers.get('content-type')).toContain('text/event-stream');
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    const seen = (test: (received: string) => boolean) =>
      (async () => {
        while (!test(text)) {
          const { value, done } = await reader.read();
          if (done) throw new Error(`the stream ended; got ${text}`);
          text += value;
        }
      })();
    await requestJson(stack.client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'hi' });
    await Promise.race([
      seen((received) => received.includes('"type":"turn.ended"') && received.includes(`"sessionId":"${sessionId}"`) && received.includes('event: fleet')),
      new Promise((_, reject) => setTimeout(() => reject(new Error(`no turn.ended on the stream; got ${text.slice(0, 2000)}`)), 15_000)),
    ]);
    controller.abort();
    // The deltas arrive inside `session` messages (merged when they come close together), and add up to the answer.
    const batches = [...text.matchAll(/^event: session\ndata: (.*)$/gm)].map((match) => JSON.parse(match[1]!) as Array<{ type: string; sessionId: string; data: { text?: string } }>);
    const streamed = batches.flat().filter((event) => event.type === 'assistant.delta' && event.sessionId === sessionId).map((event) => event.data.text).join('');
    expect(streamed).toBe('Hello from the script.');
  });
});
