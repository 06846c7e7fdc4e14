export { DEFAULT_NATS_URL, EXIT_GRACE_MS, STOP_TIMEOUT_MS, runService } from './run-service.ts';
export type { RunServiceOptions, ServiceContext, ServiceProcessName, StartedService } from './run-service.ts';
export { BUS_STARTING_ENV, busStartingWaitMs, connectWhenUp } from './connect-when-up.ts';
