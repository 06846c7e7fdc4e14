/** `agentbus viz`'s usage line, apart from the command: the help and every other command load no machine (xstate). */
export const VIZ_USAGE = 'agentbus viz [--machine turn|session] [--format mermaid|svg|json]';
