export { DEFAULT_PREFIX, PREFIX_ENV, prefixFromEnv, TOKEN_PATTERN, SessionVerb, isToken, assertToken, createSubjects, streamNames } from './subjects.ts';
export type { Subjects } from './subjects.ts';
export {
  SafetyTier,
  TurnEndReason,
  RunState,
  LogEventType,
  LiveEventType,
  isLogEventType,
  createEnvelopeFactory,
} from './events.ts';
export type {
  EventDataMap,
  EventType,
  Envelope,
  AgentEvent,
  LogEvent,
  LiveEvent,
  EnvelopeFactory,
} from './events.ts';
export { INVALID_ARGUMENTS_KEY, ZERO_USAGE, addUsage, hasInvalidArguments } from './messages.ts';
export type { ToolCall, ToolSpec, Usage, ChatMessage } from './messages.ts';
export { ContentType, DEFAULT_MAX_PAYLOAD, contentTypeOf, createCodec } from './codec.ts';
export type { Codec, MessageWithHeaders } from './codec.ts';
export {
  MODEL_PATTERN,
  MAX_PROMPT_MODELS,
  MAX_DEADLINE_MS,
  MAX_PROMPT_ATTACHMENTS,
  MAX_ATTACHMENT_CHARS,
  MAX_PROMPT_CHARS,
  MAX_OUTPUT_SCHEMA_CHARS,
  promptSchema,
  parentCallSchema,
  steerSchema,
  cancelSchema,
  approveSchema,
  inputAnswerSchema,
  MAX_HUMAN_TEXT_CHARS,
  toolCallRequestSchema,
  toolCallReplySchema,
  cancelRequestSchema,
  generateRequestSchema,
  generateChunkSchema,
} from './schemas.ts';
export type {
  Prompt,
  ParentCall,
  Steer,
  Cancel,
  Approve,
  InputAnswer,
  PromptReply,
  CommandReply,
  ToolCallRequest,
  ToolCallReply,
  CancelRequest,
  CancelAck,
  GenerateRequest,
  GenerateChunk,
  ChunkBody,
} from './schemas.ts';
export { ToolCallEventKind, ToolCallHeader, ToolWorkerMetadataKey, toolCallEventSchema } from './tool-call-events.ts';
export { PROVIDER_HEARTBEAT_EVENT, PROVIDER_HEARTBEAT_MS, ProviderCallHeader } from './provider-heartbeat.ts';
export type { ToolCallEvent } from './tool-call-events.ts';
export { ToolMetadataKey, parseToolMetadata } from './tool-metadata.ts';
export type { ToolDescriptor } from './tool-metadata.ts';
export {
  HookAction,
  HookPhase,
  afterHookReplySchema,
  afterHookRequestSchema,
  beforeHookReplySchema,
  beforeHookRequestSchema,
  decodeHookReply,
  hookFailureReplySchema,
} from './hooks.ts';
export type { AfterHookReply, AfterHookRequest, BeforeHookReply, BeforeHookRequest, HookFailureReply, HookReply } from './hooks.ts';
export { logEventSchema } from './log-schemas.ts';
export { TRACEPARENT_PATTERN, TraceHeader, traceContextSchema, traceIdOf } from './trace-context.ts';
export type { TraceContext } from './trace-context.ts';
export { liveEventSchema } from './live-schemas.ts';
export { decodeSessionEvent } from './session-event.ts';
export type { EventMessage } from './session-event.ts';
export { decodePrompt, decodeSteer, decodeCancel, decodeApprove, decodeInput, decodeDelete, decodeFork } from './ingress.ts';
export { ErrorCode, toErrorData, fromErrorData } from '../errors.ts';
export type { ErrorData } from '../errors.ts';
export { MemoryEventType, createMemorySubjects, memorySearchRequestSchema, sessionsListRequestSchema } from './memory.ts';
export type { MemoryHit, MemoryRebuildReply, MemorySearchReply, MemorySearchRequest, MemorySubjects, SessionSummary, SessionsListReply, SessionsListRequest } from './memory.ts';
export {
  DEFAULT_HISTORY_LIMIT,
  MAX_HISTORY_LIMIT,
  createHistorySubjects,
  deleteSessionSchema,
  forkSessionSchema,
  parseTombstoneKey,
  sessionHistoryRequestSchema,
  tombstoneKey,
  tombstoneSchema,
} from './sessions-data.ts';
export type { DeleteReply, ForkReply, ForkRequest, HistorySubjects, SessionHistoryReply, SessionHistoryRequest, Tombstone } from './sessions-data.ts';
export { EMBED_TIMEOUT_HEADER, MAX_EMBED_INPUTS, MAX_EMBED_INPUT_CHARS, embedRequestSchema } from './embed.ts';
export type { EmbedReply, EmbedRequest } from './embed.ts';
export { MAX_STATE_VALUE_BYTES, STATE_KEY_PATTERN, StateVerb, createStateSubjects, stateKeySchema, stateSaveSchema } from './state.ts';
export type { StateDeleteReply, StateLoadReply, StateSaveReply, StateSaveRequest, StateSubjects } from './state.ts';
