export { createAgentbusClient } from './client.ts';
export type { AgentbusClient, AskOptions, SessionTarget, TurnEnded } from './client.ts';
export { openWatch } from './event-stream.ts';
export type { EventWatch, SkippedMessage, StreamedEvent, WatchFrom, WatchOptions } from './event-stream.ts';
