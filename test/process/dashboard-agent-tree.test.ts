import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { startDashboardService } from '../../services/dashboard/index.ts';
import type { DashboardService } from '../../services/dashboard/index.ts';
import { parseProfiles } from '../../services/runtime/index.ts';
import { launchChromium } from '../helpers/browser.ts';
import { collectEvents, requestJson, silentLogger, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

// The session page shows the agent tree: a session that called an agent links to the child session, and the child
// links back to the session (and call) that started it. A stack in this process, the dashboard, headless Chromium.

let stack: TestStack;
let dashboard: DashboardService;
let browser: Browser;

beforeAll(async () => {
  stack = await startStack({
    script: {
      responses: [{ text: 'default' }],
      models: {
        boss: [{ toolCalls: [{ name: 'agent__researcher', args: { task: 'Look it up.' } }] }, { text: 'Relayed.' }],
        researcher: [{ text: 'Found it after a while of looking around.', chunkSize: 8, delayMs: 400 }],
      },
    },
    profiles: parseProfiles({ profiles: [{ tenant: 'acme', name: 'researcher', description: 'Finds facts.', model: 'scripted:researcher', tools: [] }] }),
  });
  dashboard = await startDashboardService({ nc: stack.client, logger: silentLogger(), host: '127.0.0.1', port: 0, flushMs: 50 });
  browser = await launchChromium();
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await dashboard?.stop();
  await stack?.stop();
});

describe('the agent tree on the session page', () => {
  it('links a calling session to its child, live, and the child back to its caller', async () => {
    const page = await browser.newPage();
    await page.goto(`${dashboard.url}#/session/acme/boss-tree`);
    await page.locator('#conn[data-state="live"]').waitFor({ timeout: 10_000 });
    await expect(page.locator('#agent-tree').isHidden()).resolves.toBe(true);
    const events = collectEvents(stack.client, 'acme', 'boss-tree');
    expect(await requestJson(stack.client, 'agentbus.acme.sessions.boss-tree.prompt', { text: 'Ask the researcher.', model: 'scripted:boss' })).toMatchObject({ accepted: true });
    // While the child runs, the call is listed running and already linked to the child its tool.use names.
    await events.until((seen) => seen.some((event) => event.type === 'tool.use'), 20_000);
    const use = events.events.find((event) => event.type === 'tool.use');
    const running = use?.type === 'tool.use' ? use.data.childSessionId : undefined;
    expect(running).toMatch(/^sub-/);
    await page.locator(`#agent-tree .agent-children li[data-outcome="running"] a[data-session="${running}"]`).waitFor({ timeout: 10_000 });
    await events.until((seen) => seen.some((event) => event.type === 'turn.ended'), 20_000);
    events.stop();
    const result = events.events.find((event) => event.type === 'tool.result');
    const child = result?.type === 'tool.result' ? result.data.child?.sessionId : undefined;
    expect(child).toBe(running);
    const childLink = page.locator(`#agent-tree .agent-children li[data-outcome="answered"] a[data-session="${child}"]`);
    await childLink.waitFor({ timeout: 10_000 });
    await expect(childLink.getAttribute('href')).resolves.toBe(`#/session/acme/${child}`);
    await childLink.click();
    const parentLink = page.locator('#agent-tree .agent-parent a[data-session="boss-tree"]');
    await parentLink.waitFor({ timeout: 10_000 });
    await expect(page.locator('#agent-tree .agent-parent').textContent()).resolves.toContain(`call ${result?.type === 'tool.result' ? result.data.toolCallId : ''}`);
    await parentLink.click();
    await page.locator(`#agent-tree a[data-session="${child}"]`).waitFor({ timeout: 10_000 });
    await page.close();
  }, 60_000);
});
