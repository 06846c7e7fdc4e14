export { createAgentbusClient } from './client.ts';
export type { AgentbusClient, AskOptions, CallOptions, DeletedSession, ForkedSession, SessionTarget, TurnEnded } from './client.ts';
export { openWatch } from './event-stream.ts';
export type { EventWatch, WatchFrom, WatchOptions } from './event-stream.ts';
export type { SkippedMessage, StreamedEvent } from './streamed-event.ts';
export { openCoreWatch } from './core-watch.ts';
export type { HistoryPage } from './core-watch.ts';
export { EventReader, detectEventReader } from './event-reader.ts';
export type { StateCallOptions, StateClient } from '../bus/state-client.ts';
