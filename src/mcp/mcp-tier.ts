import { SafetyTier } from '../protocol/index.ts';

/** The hints of an MCP tool's `annotations` that decide how agentbus runs it. */
export interface McpToolHints {
  readonly readOnlyHint?: boolean | undefined;
  readonly destructiveHint?: boolean | undefined;
  readonly idempotentHint?: boolean | undefined;
}

/** How agentbus runs an MCP tool: its safety tier and whether a second run with one `effectId` is harmless. */
export interface McpToolClass {
  readonly tier: SafetyTier;
  readonly idempotent: boolean;
}

/**
 * The safety tier and idempotency of an MCP tool from its annotations, with the MCP spec's defaults for hints it
 * leaves out (`readOnlyHint` false, `destructiveHint` true, `idempotentHint` false):
 *
 * | hints | tier | idempotent |
 * | --- | --- | --- |
 * | `readOnlyHint: true` | `read_only` | true |
 * | not read-only, `destructiveHint` true or absent (so: no annotations at all) | `privileged` | `idempotentHint` |
 * | not read-only, `destructiveHint: false` | `side_effecting` | `idempotentHint` |
 *
 * `override` (the `--tier` of `agentbus mcp`) replaces the tier; idempotency stays as the hints say.
 *
 * @example
 * classifyMcpTool({ readOnlyHint: true }); // { tier: 'read_only', idempotent: true }
 * classifyMcpTool(undefined);              // { tier: 'privileged', idempotent: false }
 */
export function classifyMcpTool(hints: McpToolHints | undefined, override?: SafetyTier): McpToolClass {
  const readOnly = hints?.readOnlyHint ?? false;
  const destructive = hints?.destructiveHint ?? true;
  const idempotent = readOnly || (hints?.idempotentHint ?? false);
  const tier = readOnly ? SafetyTier.readOnly : destructive ? SafetyTier.privileged : SafetyTier.sideEffecting;
  return { tier: override ?? tier, idempotent };
}
