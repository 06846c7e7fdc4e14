import { isAbsolute } from 'node:path';
import { parseArgs } from 'node:util';
import { MAX_MCP_TIMEOUT_MS } from '../src/mcp/index.ts';
import { SafetyTier } from '../src/protocol/index.ts';
import { UsageError } from './context.ts';
import { MCP_USAGE } from './mcp-usage.ts';

export { MCP_USAGE };
import { concurrencyFlag, serviceNameFlag } from './serving-command.ts';

/** The usage line of `agentbus mcp`. */
/** How long one call of an MCP tool may run unless `--timeout` says otherwise (the MCP SDK's own default). */
export const DEFAULT_MCP_TIMEOUT_MS = 60_000;

const TIERS: ReadonlySet<string> = new Set(Object.values(SafetyTier));

/** A value for every tool, and values for some tools by name (`--tier privileged --tier search=read_only`). */
export interface PerTool<T> {
  readonly all: T | undefined;
  readonly byTool: ReadonlyMap<string, T>;
}

/** The flags of `mcp`. */
export interface McpOptions {
  readonly nats: string | undefined;
  /** The `$SRV` service name; undefined: the MCP server's own name. */
  readonly name: string | undefined;
  readonly concurrency: number | undefined;
  /** Put before each tool's name on the bus (`fs_`: `read_file` served as `fs_read_file`). */
  readonly prefix: string | undefined;
  /** The server: a command after `--`, or `--url` (its environment is filled in when it starts). */
  readonly server: { kind: 'stdio'; command: string; args: string[] } | { kind: 'http'; url: URL; headers: Record<string, string> };
  readonly tiers: PerTool<SafetyTier>;
  readonly timeouts: PerTool<number>;
  /** `--env NAME`: variables of this environment a stdio server gets besides `PATH`, `HOME` and `LANG`. */
  readonly env: readonly string[];
  /** `--sandbox`: run a stdio server under bubblewrap; `network` (`--sandbox-network`), `readOnlyPaths` (`--sandbox-read`). */
  readonly sandbox: { readonly network: boolean; readonly readOnlyPaths: readonly string[] } | undefined;
}

/** Variables `--env` may not pass: the bus's settings and credentials are `agentbus mcp`'s own. */
const BUS_VARIABLE = /^(NATS_|AGENTBUS_)/;

function readEnvNames(values: readonly string[] | undefined): string[] {
  const names: string[] = [];
  for (const name of values ?? []) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new UsageError(`--env takes a variable name ([A-Za-z_][A-Za-z0-9_]*), got ${JSON.stringify(name)}`);
    if (BUS_VARIABLE.test(name)) throw new UsageError(`--env ${name}: the bus's variables (NATS_*, AGENTBUS_*) are agentbus mcp's own, not the server's`);
    if (!names.includes(name)) names.push(name);
  }
  return names;
}

function readSandboxPaths(values: readonly string[] | undefined): string[] {
  for (const path of values ?? []) if (!isAbsolute(path)) throw new UsageError(`--sandbox-read takes an absolute path, got ${JSON.stringify(path)}`);
  return [...(values ?? [])];
}

/** `[TOOL=]VALUE` flags, each value read by `read`; a later flag for the same tool (or for all) wins. */
function perTool<T>(values: readonly string[] | undefined, flag: string, read: (value: string) => T): PerTool<T> {
  let all: T | undefined;
  const byTool = new Map<string, T>();
  for (const value of values ?? []) {
    const equals = value.indexOf('=');
    if (equals < 0) {
      all = read(value);
      continue;
    }
    const tool = value.slice(0, equals);
    if (!tool) throw new UsageError(`${flag} ${JSON.stringify(value)}: name the tool before =`);
    byTool.set(tool, read(value.slice(equals + 1)));
  }
  return { all, byTool };
}

function readTier(value: string): SafetyTier {
  if (!TIERS.has(value)) throw new UsageError(`--tier must be one of ${[...TIERS].join(', ')} (or TOOL=TIER), got ${JSON.stringify(value)}`);
  return value as SafetyTier;
}

function readTimeout(value: string): number {
  const ms = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(ms) || ms < 1) {
    throw new UsageError(`--timeout must be a positive whole number of milliseconds (or TOOL=MS), got ${JSON.stringify(value)}`);
  }
  // A longer one would overflow the timers of the call, which would then fail at once.
  if (ms > MAX_MCP_TIMEOUT_MS) throw new UsageError(`--timeout must be at most ${MAX_MCP_TIMEOUT_MS} ms (about 24 days), got ${value}`);
  return ms;
}

function readPrefix(value: string | undefined): string | undefined {
  if (value !== undefined && !/^[A-Za-z0-9_-]{1,63}$/.test(value)) throw new UsageError(`--prefix must match [A-Za-z0-9_-]{1,63}, got ${JSON.stringify(value)}`);
  return value;
}

function readHeaders(values: readonly string[] | undefined): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const value of values ?? []) {
    const colon = value.indexOf(':');
    const name = colon < 0 ? '' : value.slice(0, colon).trim();
    // Not the value itself in the message: it is most likely a credential.
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) throw new UsageError(`--header must be "Name: value" (a header name, a colon, a value); ${colon < 0 ? 'one has no colon' : 'one has no valid name before its colon'}`);
    headers[name] = value.slice(colon + 1).trim();
  }
  return headers;
}

function readUrl(value: string): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(`--url must be an http(s) URL, got ${JSON.stringify(value)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError(`--url must be an http(s) URL, got ${JSON.stringify(value)}`);
  return url;
}

/** Parses and checks the flags of `mcp`: flags first, then `--` and the server's command, or `--url`. */
export function parseMcp(argv: string[]): McpOptions {
  const split = argv.indexOf('--');
  const flags = split < 0 ? argv : argv.slice(0, split);
  const command = split < 0 ? [] : argv.slice(split + 1);
  const { values, positionals } = parseArgs({
    args: flags,
    options: {
      nats: { type: 'string' },
      name: { type: 'string' },
      prefix: { type: 'string' },
      concurrency: { type: 'string' },
      url: { type: 'string' },
      header: { type: 'string', multiple: true },
      tier: { type: 'string', multiple: true },
      timeout: { type: 'string', multiple: true },
      env: { type: 'string', multiple: true },
      sandbox: { type: 'boolean' },
      'sandbox-network': { type: 'boolean' },
      'sandbox-read': { type: 'string', multiple: true },
    },
    strict: true,
    allowPositionals: true,
  });
  if (positionals.length > 0) throw new UsageError(`put the MCP server's command after --: ${MCP_USAGE}`);
  if (split >= 0 && command.length === 0) throw new UsageError('no command after --: name the MCP server to start');
  if (values.url !== undefined && split >= 0) throw new UsageError('give the MCP server as a command after -- or as --url, not both');
  if (values.url === undefined && split < 0) throw new UsageError(`mcp needs an MCP server: ${MCP_USAGE}`);
  if (values.header !== undefined && values.url === undefined) throw new UsageError('--header goes with --url (a command gets its settings from its arguments and environment)');
  for (const flag of ['env', 'sandbox'] as const) {
    if (values[flag] !== undefined && values.url !== undefined) throw new UsageError(`--${flag} goes with a command after -- (an HTTP server runs elsewhere)`);
  }
  for (const flag of ['sandbox-network', 'sandbox-read'] as const) {
    if (values[flag] !== undefined && !values.sandbox) throw new UsageError(`--${flag} goes with --sandbox`);
  }
  const server: McpOptions['server'] =
    values.url === undefined
      ? { kind: 'stdio', command: command[0]!, args: command.slice(1) }
      : { kind: 'http', url: readUrl(values.url), headers: readHeaders(values.header) };
  return {
    nats: values.nats,
    name: serviceNameFlag(values.name),
    concurrency: concurrencyFlag(values.concurrency),
    prefix: readPrefix(values.prefix),
    server,
    tiers: perTool(values.tier, '--tier', readTier),
    timeouts: perTool(values.timeout, '--timeout', readTimeout),
    env: readEnvNames(values.env),
    sandbox: values.sandbox ? { network: values['sandbox-network'] ?? false, readOnlyPaths: readSandboxPaths(values['sandbox-read']) } : undefined,
  };
}

/** The default `$SRV` name of a server: the name it gave in the MCP handshake, made a token (`mcp` when it gave none). */
export function mcpServiceName(serverName: string | undefined): string {
  const name = (serverName ?? '').replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 64);
  return /[A-Za-z0-9]/.test(name) ? name : 'mcp';
}
