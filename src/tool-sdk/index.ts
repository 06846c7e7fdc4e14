export { defineTool, isToolDefinition } from './define-tool.ts';
export type { AnyToolDefinition, ToolContext, ToolDefinition, ToolProgress } from './define-tool.ts';
export { createToolWorker, DEFAULT_TOOL_SERVICE_NAME } from './tool-worker.ts';
export type { ToolWorker, ToolWorkerOptions } from './tool-worker.ts';
export { executeToolCall, errorReply, formatIssues } from './execute-tool-call.ts';
export type { ExecuteToolCallOptions } from './execute-tool-call.ts';
export { jsonSchemaParameters } from './json-schema-parameters.ts';
export type { JsonSchemaCheck, JsonSchemaCheckResult } from './json-schema-parameters.ts';
export { toToolMetadata, toolParametersSchema } from './tool-metadata.ts';
// The metadata's wire side is the bus contract's (src/protocol); re-exported so SDK users keep one import.
export { ToolMetadataKey, parseToolMetadata } from '../protocol/index.ts';
export type { ToolDescriptor } from '../protocol/index.ts';
export { createConcurrencyGate } from './concurrency-gate.ts';
export type { ConcurrencyGate } from './concurrency-gate.ts';
export { createHookWorker, DEFAULT_HOOK_SERVICE_NAME } from './hook-worker.ts';
export type { HookWorker, HookWorkerOptions } from './hook-worker.ts';
export { runHook, hookFailureReply } from './run-hook.ts';
export type { AfterHookDecision, AfterHookHandler, BeforeHookDecision, BeforeHookHandler, HookContext, HookJob, HookReplyBody } from './run-hook.ts';
