#!/usr/bin/env node
// Runs the CLI compiled to dist/ at `npm install` (bin/build.js) when dist/ is that of the sources as they are now;
// otherwise (no build, or a source edited or pulled since) runs the TypeScript through tsx, as in development.
// AGENTBUS_FROM_SOURCE=1 always runs the sources.
import { compiledCli } from './compiled.js';

const argv = process.argv.slice(2);
const compiled = process.env.AGENTBUS_FROM_SOURCE === '1' ? undefined : compiledCli();
// `agentbus worker tools.ts` imports the user's module, which may be TypeScript: tsx loads it, compiled CLI or not.
if (compiled === undefined || argv[0] === 'worker') (await import('tsx/esm/api')).register();
const { main } = compiled === undefined ? await import('../cli/main.ts') : await import(compiled);
process.exitCode = await main(argv);
