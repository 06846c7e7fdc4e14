/**
 * `agentbus mcp`'s usage line, apart from its options parser: the help and every other command load no MCP code
 * (the MCP SDK takes about 0.25 s to import).
 */
export const MCP_USAGE =
  'agentbus mcp [--nats URL] [--name N] [--prefix P] [--tier T | --tier TOOL=T]… [--timeout MS | --timeout TOOL=MS]… [--concurrency N] ([--env NAME]… [--sandbox [--sandbox-network] [--sandbox-read DIR]…] -- <command> [args…] | --url URL [--header "Name: value"]…)';
