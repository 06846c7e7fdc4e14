import { fileURLToPath } from 'node:url';

/**
 * The command line that runs a service: its compiled JavaScript when this module is itself compiled (the CLI from
 * dist/, where bin/build.js puts every service next to it), else its TypeScript through tsx (development, tests).
 */
export function serviceCommand(service: string, moduleUrl: string = import.meta.url): string[] {
  if (moduleUrl.endsWith('.js')) return [fileURLToPath(new URL(`../services/${service}/main.js`, moduleUrl))];
  return ['--import', import.meta.resolve('tsx'), fileURLToPath(new URL(`../services/${service}/main.ts`, moduleUrl))];
}
