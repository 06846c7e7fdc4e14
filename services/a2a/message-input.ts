import { Role } from '@a2a-js/sdk';
import type { Message, SendMessageRequest } from '@a2a-js/sdk';
import { ContentTypeNotSupportedError, RequestMalformedError } from '@a2a-js/sdk/errors';
import { isToken, TOKEN_PATTERN } from '../../src/protocol/index.ts';

/** What a SendMessage asks of agentbus: the session, the prompt's text and the caller's message id. */
export interface MessageInput {
  /** The context: the session id (given, or made for a new context). */
  readonly sessionId: string;
  /** The task the caller names, when it names one. */
  readonly taskId?: string;
  readonly text: string;
  readonly messageId: string;
}

/**
 * The text of a user message: its text parts, and its data parts as JSON, in order, each on its own line. File parts
 * (`raw`, `url`) are refused with ContentTypeNotSupported (-32005): the card announces text only.
 */
export function messageText(message: Message): string {
  const lines: string[] = [];
  for (const part of message.parts ?? []) {
    const content = part.content;
    if (content?.$case === 'text') lines.push(content.value);
    else if (content?.$case === 'data') lines.push(JSON.stringify(content.value));
    else throw new ContentTypeNotSupportedError(`a ${content?.$case ?? 'empty'} part is not accepted: this agent takes text (and JSON data) parts`);
  }
  return lines.join('\n');
}

/**
 * Checks a SendMessage and reads what agentbus needs of it. Throws RequestMalformedError (-32602) for a missing or
 * empty message, a role other than user, or a context id that cannot be a session id (`[A-Za-z0-9_-]{1,64}`: UUIDs
 * are); `newSessionId` names the session of a message without a context.
 */
export function readMessageInput(params: SendMessageRequest, newSessionId: () => string): MessageInput {
  const message = params.message;
  if (!message) throw new RequestMalformedError('message is required');
  if (message.role !== Role.ROLE_USER) throw new RequestMalformedError('message.role must be ROLE_USER');
  if (!message.messageId) throw new RequestMalformedError('message.messageId is required');
  const text = messageText(message);
  if (text.trim() === '') throw new RequestMalformedError('message has no text');
  const sessionId = message.contextId || newSessionId();
  if (!isToken(sessionId)) throw new RequestMalformedError(`contextId must match ${TOKEN_PATTERN.source} (it is an agentbus session id), got ${JSON.stringify(String(sessionId).slice(0, 80))}`);
  return { sessionId, text, messageId: message.messageId, ...(message.taskId ? { taskId: message.taskId } : {}) };
}
