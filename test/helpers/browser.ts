import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import type { Browser } from 'playwright-core';

/** Debian's chromium, which `.ci/run` installs when it is missing. */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** The flags every browser test launches Chromium with: headless, no network beyond what the page asks. */
export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Launches real headless Chromium; throws a clear error when it is not installed. */
export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install Debian's chromium (apt-get install chromium), as .ci/run does`);
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
}

/** The folder test screenshots go to (gitignored): `test-artifacts/<name>/`. */
export async function artifactsDir(name: string): Promise<string> {
  const dir = join(fileURLToPath(new URL('../..', import.meta.url)), 'test-artifacts', name);
  await mkdir(dir, { recursive: true });
  return dir;
}
