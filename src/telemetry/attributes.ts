/**
 * Span attribute names: the OpenTelemetry GenAI semantic conventions' where they have one (they live in the
 * unstable `incubating` entry of `@opentelemetry/semantic-conventions`, which says to copy them), agentbus's own
 * under `agentbus.*`.
 */
export const SpanAttribute = {
  operationName: 'gen_ai.operation.name',
  providerName: 'gen_ai.provider.name',
  conversationId: 'gen_ai.conversation.id',
  requestModel: 'gen_ai.request.model',
  requestMaxTokens: 'gen_ai.request.max_tokens',
  requestTemperature: 'gen_ai.request.temperature',
  responseModel: 'gen_ai.response.model',
  responseId: 'gen_ai.response.id',
  responseFinishReasons: 'gen_ai.response.finish_reasons',
  inputTokens: 'gen_ai.usage.input_tokens',
  outputTokens: 'gen_ai.usage.output_tokens',
  toolName: 'gen_ai.tool.name',
  toolCallId: 'gen_ai.tool.call.id',
  toolType: 'gen_ai.tool.type',
  errorType: 'error.type',
  tenant: 'agentbus.tenant',
  sessionId: 'agentbus.session.id',
  turnId: 'agentbus.turn.id',
  turnResumed: 'agentbus.turn.resumed',
  turnReason: 'agentbus.turn.reason',
  turnSteps: 'agentbus.turn.steps',
  cost: 'agentbus.cost',
  step: 'agentbus.step',
  callId: 'agentbus.tool.call_id',
  attempt: 'agentbus.tool.attempt',
  endpoint: 'agentbus.endpoint',
} as const;
export type SpanAttribute = (typeof SpanAttribute)[keyof typeof SpanAttribute];

/** The `gen_ai.operation.name` values agentbus's spans use. */
export const GenAiOperation = {
  invokeAgent: 'invoke_agent',
  chat: 'chat',
  executeTool: 'execute_tool',
  searchMemory: 'search_memory',
} as const;
export type GenAiOperation = (typeof GenAiOperation)[keyof typeof GenAiOperation];

/**
 * `<provider>:<model>` as the conventions split it: `gen_ai.provider.name` and `gen_ai.request.model`. A name
 * without a provider keeps its whole self as the model.
 *
 * @example
 * modelAttributes('openai:gpt-5.4-mini'); // { 'gen_ai.provider.name': 'openai', 'gen_ai.request.model': 'gpt-5.4-mini' }
 */
export function modelAttributes(model: string): Record<string, string> {
  const colon = model.indexOf(':');
  return colon <= 0
    ? { [SpanAttribute.requestModel]: model }
    : { [SpanAttribute.providerName]: model.slice(0, colon), [SpanAttribute.requestModel]: model.slice(colon + 1) };
}

/** The scope attributes of a request that names its session and turn; absent fields are left out. */
export function scopeAttributes(scope: { readonly tenant?: string | undefined; readonly sessionId?: string | undefined; readonly turnId?: string | undefined }): Record<string, string> {
  return {
    ...(scope.tenant ? { [SpanAttribute.tenant]: scope.tenant } : {}),
    ...(scope.sessionId ? { [SpanAttribute.sessionId]: scope.sessionId, [SpanAttribute.conversationId]: scope.sessionId } : {}),
    ...(scope.turnId ? { [SpanAttribute.turnId]: scope.turnId } : {}),
  };
}
