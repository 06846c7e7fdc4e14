import { readFileSync } from 'node:fs';

/** The version in agentbus' own package.json. */
export function packageVersion(): string {
  const text = readFileSync(new URL('../package.json', import.meta.url), 'utf8');
  return (JSON.parse(text) as { version: string }).version;
}
