/**
 * `agentbus worker`'s usage line, apart from the command: the help and every other command load none of the tool
 * worker's code (its logger, secret scanner and result ledger).
 */
export const WORKER_USAGE = 'agentbus worker <module> [--nats URL] [--name N] [--concurrency N]';
