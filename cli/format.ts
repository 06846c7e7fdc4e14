import type { AgentEvent, EventDataMap } from '../src/protocol/index.ts';

function short(value: unknown, max = 80): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  const flat = (text ?? '').replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** One human line for an event, as `agentbus tail` prints it. */
export function formatEvent(event: AgentEvent): string {
  const time = new Date(event.ts).toISOString().slice(11, 23);
  const where = `${event.tenant}/${event.sessionId}`;
  return `${time} ${where} ${event.type.padEnd(18)} ${describeData(event)}`.trimEnd();
}

/** How a decision reads: approved, approved with edited args, answered in the tool's place, or denied; and by timeout. */
export function decisionWords(data: { readonly approved: boolean; readonly args?: unknown; readonly respond?: string; readonly timedOut?: boolean }): string {
  const what =
    data.respond !== undefined ? `answered in the tool's place: ${short(data.respond, 60)}` : data.approved ? (data.args !== undefined ? `approved with args ${short(data.args, 60)}` : 'approved') : 'denied';
  return data.timedOut ? `${what} (timed out)` : what;
}

/** The interesting part of an event's data, in a few words. */
export function describeData(event: AgentEvent): string {
  switch (event.type) {
    case 'session.created':
      return `by ${event.data.createdBy}${event.data.parent ? ` for ${event.data.parent.sessionId} (call ${event.data.parent.toolCallId})` : ''}`;
    case 'turn.handoff':
      return `to ${event.data.to}${event.data.from ? ` from ${event.data.from}` : ''}`;
    case 'session.forked':
      return `from ${event.data.parentSessionId} at seq ${event.data.parentSeq}`;
    case 'user.message':
      return `${event.data.steer ? '(steer) ' : ''}${short(event.data.text)}`;
    case 'assistant.message': {
      const tools = event.data.toolCalls.map((call) => call.name).join(', ');
      return `${short(event.data.text, 60)}${tools ? ` → tools: ${tools}` : ''} [${event.data.model}, ${event.data.usage.inputTokens}/${event.data.usage.outputTokens} tokens, $${event.data.cost.toFixed(6)}]`;
    }
    case 'tool.use':
      return `${event.data.name} ${short(event.data.args, 60)}`;
    case 'tool.result':
      return `${event.data.name} ${event.data.isError ? 'ERROR ' : 'ok '}${short(event.data.output, 60)} (${event.data.durationMs} ms)`;
    case 'approval.requested':
      return `${event.data.name} ${short(event.data.args, 60)} (toolCallId ${event.data.toolCallId})`;
    case 'approval.decided':
      return `${event.data.toolCallId} ${decisionWords(event.data)}${event.data.reason ? `: ${event.data.reason}` : ''}`;
    case 'tool.input_requested':
      return `${event.data.name} asks: ${short(event.data.question, 80)} (toolCallId ${event.data.toolCallId}, request ${event.data.requestId})`;
    case 'tool.input_answered':
      return `${event.data.toolCallId} answered ${short(event.data.answer, 60)}`;
    case 'turn.started':
      return `${event.data.model}, ${event.data.maxSteps} steps${event.data.maxCost === undefined ? '' : `, $${event.data.maxCost}`}, deadline ${new Date(event.data.deadline).toISOString()}`;
    case 'summary.created':
      return `${event.data.tokens} tokens through seq ${event.data.throughSeq}`;
    case 'summary.failed':
      return `through seq ${event.data.throughSeq}: ${event.data.error.code}: ${event.data.error.message}`;
    case 'turn.ended':
      return `${event.data.reason}${event.data.error ? ` (${event.data.error.code}: ${event.data.error.message})` : ''} after ${event.data.steps} step(s), $${event.data.cost.toFixed(6)}`;
    case 'assistant.delta':
      return JSON.stringify(event.data.text);
    case 'tool.progress': {
      const { progress, total } = event.data;
      const counted = progress === undefined ? '' : ` (${progress}${total === undefined ? '' : `/${total}`})`;
      return `${event.data.name}: ${event.data.message}${counted}`;
    }
    case 'progress':
      return event.data.message;
    case 'state':
      return `${event.data.machine} → ${event.data.value} (${event.data.event})`;
    case 'retry':
      return `attempt ${event.data.attempt}/${event.data.maxAttempts} in ${event.data.delayMs} ms: ${event.data.error.message}`;
    case 'error':
      return `${event.data.code}: ${event.data.message}`;
    case 'request.prepared':
      return `dry run: ${event.data.model}, ${event.data.messages.length} message(s), ${event.data.tools.length} tool(s)`;
  }
}

/**
 * What a dry run's first step would send, for a person: model and budgets, the tools with their schemas, then each
 * message whole under a `--- role ---` line.
 */
export function formatPreparedRequest(data: EventDataMap['request.prepared']): string {
  const lines = [
    `model: ${data.model}${data.fallbackModels?.length ? ` (then ${data.fallbackModels.join(', ')})` : ''}`,
    `budgets: maxSteps ${data.maxSteps}, maxCost ${data.maxCost === undefined ? 'none' : `$${data.maxCost}`}, maxOutputTokens ${data.maxOutputTokens}`,
  ];
  if (data.needsCompaction) lines.push('the step would first summarize the older history (not shown)');
  if (data.forceTool) lines.push(`forced call (the model is not asked): ${data.forceTool.name} ${JSON.stringify(data.forceTool.args)}`);
  lines.push(`tools (${data.tools.length}):`);
  for (const tool of data.tools) lines.push(`  ${tool.name}: ${short(tool.description, 100)}`, `    parameters: ${JSON.stringify(tool.parameters)}`);
  lines.push(`messages (${data.messages.length}):`);
  for (const message of data.messages) {
    const label = message.role === 'tool' ? `tool ${message.name} (${message.toolCallId})` : message.role;
    lines.push(`--- ${label} ---`, message.content);
    if (message.role === 'assistant' && message.toolCalls?.length) {
      for (const call of message.toolCalls) lines.push(`[tool call ${call.id}: ${call.name} ${JSON.stringify(call.args)}]`);
    }
  }
  return `${lines.join('\n')}\n`;
}
