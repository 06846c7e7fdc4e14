import { describe, expect, it } from 'vitest';
import { createCurrentTimeTool } from '../../services/tools/current-time-tool.ts';
import type { CurrentTime } from '../../services/tools/current-time-tool.ts';
import { outputOf, runTool } from '../helpers/run-tool.ts';

// 2026-03-01 13:05:09.120 UTC, and a summer instant for daylight saving time.
const WINTER = Date.UTC(2026, 2, 1, 13, 5, 9, 120);
const SUMMER = Date.UTC(2026, 6, 15, 12, 0, 0, 5);

describe('current_time', () => {
  it('is read-only and idempotent', () => {
    const tool = createCurrentTimeTool();
    expect([tool.tier, tool.idempotent]).toEqual(['read_only', true]);
  });

  it('gives the time of its clock in UTC, as ISO with offset and as epoch milliseconds', async () => {
    const time = outputOf<CurrentTime>(await runTool(createCurrentTimeTool(() => WINTER), { timeZone: 'UTC' }));
    expect(time).toEqual({ iso: '2026-03-01T13:05:09.120+00:00', unixMs: WINTER, timeZone: 'UTC' });
    expect(Date.parse(time.iso)).toBe(WINTER);
  });

  it.each([
    ['Asia/Tokyo', WINTER, '2026-03-01T22:05:09.120+09:00'],
    ['America/St_Johns', WINTER, '2026-03-01T09:35:09.120-03:30'],
    ['America/New_York', WINTER, '2026-03-01T08:05:09.120-05:00'],
    ['America/New_York', SUMMER, '2026-07-15T08:00:00.005-04:00'],
    ['Asia/Kolkata', WINTER, '2026-03-01T18:35:09.120+05:30'],
  ])('shows the local time of %s with its offset at that instant', async (timeZone, instant, iso) => {
    const time = outputOf<CurrentTime>(await runTool(createCurrentTimeTool(() => instant), { timeZone }));
    expect(time).toEqual({ iso, unixMs: instant, timeZone });
    expect(Date.parse(time.iso)).toBe(instant);
  });

  it("uses the worker's zone when none is given, and names it", async () => {
    const time = outputOf<CurrentTime>(await runTool(createCurrentTimeTool(() => WINTER), {}));
    expect(time.timeZone).toBe(new Intl.DateTimeFormat().resolvedOptions().timeZone);
    expect(Date.parse(time.iso)).toBe(WINTER);
  });

  it('refuses an unknown zone with invalid_arguments', async () => {
    const reply = await runTool(createCurrentTimeTool(), { timeZone: 'Mars/Olympus_Mons' });
    expect(reply).toMatchObject({ ok: false, error: { code: 'invalid_arguments', message: expect.stringContaining('Mars/Olympus_Mons') } });
    expect(await runTool(createCurrentTimeTool(), { timeZone: 3 })).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
  });
});
