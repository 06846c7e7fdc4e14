#!/usr/bin/env node
// Compiles each service into one JavaScript file under dist/, and the CLI into one plus a file per late-loaded command
// (esbuild; most dependencies left as imports, see BUNDLED_PACKAGES), so that `npx agentbus` and the services it starts skip tsx's compile-on-load. `npm install` runs it
// (the `prepare` script); `npm run build` runs it again after an edit. With `--if-possible` a failed build only
// warns: the CLI then runs its TypeScript through tsx, slower to start but the same program.
import { cpSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { BUILD_INFO, ROOT, sourceFingerprint } from './compiled.js';

const require = createRequire(import.meta.url);

/** Files the compiled code reads next to itself (`new URL(..., import.meta.url)`), copied to the same place in dist/. */
const ASSETS = ['package.json', 'examples/demo-script.json', 'services/dashboard/static'];

/**
 * Packages compiled into the services' files rather than imported from node_modules: plain JavaScript that reads no
 * file of its own and that every service loads at start. One file instead of a few hundred modules to resolve, read
 * and link cut the runtime's module loading by about a third. Every other package stays an import: native addons
 * (usearch, msgpackr's optional extract), packages that load files of their own (pino's transports, gpt-tokenizer's
 * ranks, secretlint's rules), and those loaded late on purpose (the model SDKs, elkjs, the MCP SDK). The CLI keeps
 * zod an import: `agentbus worker` loads a user's module whose schemas are made with node_modules' zod.
 */
const BUNDLED_PACKAGES = ['zod', 'xstate', '@nats-io/'];

/** The tokenizer encodings whose ranks are written as JSON for the compiled code (src/tokens.ts). */
const RANKS = ['o200k_base', 'cl100k_base'];

/** An esbuild plugin that leaves every package an import except those `bundled` names (a name, or a scope ending in /). */
function externalPackagesExcept(bundled) {
  const isBundled = (path) => bundled.some((name) => (name.endsWith('/') ? path.startsWith(name) : path === name || path.startsWith(`${name}/`)));
  return {
    name: 'external-packages-except',
    setup(build) {
      build.onResolve({ filter: /^[^./]/ }, (args) => (isBundled(args.path) ? undefined : { path: args.path, external: true }));
    },
  };
}

/** Common esbuild options of the CLI's and the services' files. */
const COMMON = {
  bundle: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  sourcemap: 'linked',
  logLevel: 'warning',
  // Bundled CommonJS packages `require` Node's modules: an ES module has no `require` of its own.
  banner: { js: "import { createRequire as __agentbusCreateRequire } from 'node:module'; const require = __agentbusCreateRequire(import.meta.url);" },
};

async function build() {
  const started = performance.now();
  // Taken before compiling: a source edited while the build runs makes the result stale, not falsely fresh.
  const sources = sourceFingerprint(ROOT);
  const { build: esbuild } = await import('esbuild');
  const services = readdirSync(join(ROOT, 'services')).filter((name) => statSync(join(ROOT, 'services', name, 'main.ts'), { throwIfNoEntry: false })?.isFile());
  const out = join(ROOT, `dist.tmp-${process.pid}`);
  rmSync(out, { recursive: true, force: true });
  try {
    await Promise.all([
      esbuild({
        ...COMMON,
        absWorkingDir: ROOT,
        entryPoints: services.map((name) => `services/${name}/main.ts`),
        outdir: out,
        outbase: '.',
        plugins: [externalPackagesExcept(BUNDLED_PACKAGES)],
        // Each service's file is dist/services/<name>/main.js: the ranks are in dist/ranks/.
        define: { AGENTBUS_BUILT_RANKS: JSON.stringify('../../ranks/') },
      }),
      esbuild({
        ...COMMON,
        absWorkingDir: ROOT,
        entryPoints: ['cli/main.ts'],
        outdir: out,
        outbase: '.',
        plugins: [externalPackagesExcept(BUNDLED_PACKAGES.filter((name) => name !== 'zod'))],
        // A command loaded with `import()` (worker, viz, mcp) is a file of its own with its packages' imports: `ask`
        // and `help` load none of them. Beside main.js, so that paths relative to the code (../package.json) hold.
        splitting: true,
        chunkNames: 'cli/[name]-[hash]',
        define: { AGENTBUS_BUILT_RANKS: JSON.stringify('../ranks/') },
      }),
    ]);
    // The tokenizer's ranks as JSON, which the runtime parses faster than it compiles the package's module of them
    // (src/tokens.ts, loadRanks; AGENTBUS_BUILT_RANKS below says where they are).
    mkdirSync(join(out, 'ranks'), { recursive: true });
    for (const encoding of RANKS) {
      const { default: ranks } = require(`gpt-tokenizer/cjs/bpeRanks/${encoding}`);
      writeFileSync(join(out, 'ranks', `${encoding}.json`), JSON.stringify(ranks));
    }
    for (const asset of ASSETS) {
      mkdirSync(join(out, asset, '..'), { recursive: true });
      cpSync(join(ROOT, asset), join(out, asset), { recursive: true });
    }
    writeFileSync(join(out, BUILD_INFO), `${JSON.stringify({ builtAt: new Date().toISOString(), sources }, null, 2)}\n`);
    // Swapped in whole: a build that fails halfway leaves the previous dist/ or none, never a mix.
    rmSync(join(ROOT, 'dist'), { recursive: true, force: true });
    renameSync(out, join(ROOT, 'dist'));
  } catch (error) {
    rmSync(out, { recursive: true, force: true });
    throw error;
  }
  return { services, ms: Math.round(performance.now() - started) };
}

const ifPossible = process.argv.includes('--if-possible');
try {
  const { services, ms } = await build();
  process.stderr.write(`agentbus: compiled the CLI and ${services.length} services to dist/ in ${ms} ms\n`);
} catch (error) {
  const reason = error instanceof Error ? error.message.split('\n')[0] : String(error);
  if (!ifPossible) {
    process.stderr.write(`agentbus: build failed: ${reason}\n`);
    process.exitCode = 1;
  } else {
    // A stale dist/ would run old code: none at all makes the CLI run the sources through tsx.
    rmSync(join(ROOT, 'dist'), { recursive: true, force: true });
    process.stderr.write(`agentbus: could not compile to dist/ (${reason}); the CLI will run its TypeScript through tsx (slower start)\n`);
  }
}
