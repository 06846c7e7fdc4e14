import { z } from 'zod';
import { InvalidInputError } from '../../src/errors.ts';
import { inputAnswerSchema, isToken, promptSchema, TOKEN_PATTERN } from '../../src/protocol/index.ts';
import type { Approve, InputAnswer } from '../../src/protocol/index.ts';

// The body `useChat` (ai 6, DefaultChatTransport) posts, and what agentbus does with it. Pure.

const partSchema = z.looseObject({ type: z.string() });
const messageSchema = z.looseObject({
  id: z.string().optional(),
  role: z.enum(['system', 'user', 'assistant']),
  parts: z.array(partSchema),
});
const chatRequestSchema = z.looseObject({
  id: z.string().refine(isToken, `the chat id must match ${TOKEN_PATTERN.source} (it is the agentbus session id)`),
  messages: z.array(messageSchema).min(1, 'messages must hold at least the new message'),
  trigger: z.enum(['submit-message', 'regenerate-message']).default('submit-message'),
  messageId: z.string().optional(),
  /** Answers to tools' questions (`data-agentbus-question`), sent with `sendMessage(undefined, { body: { answers } })`. */
  answers: z.array(inputAnswerSchema).min(1).max(16).optional(),
  /** A JSON Schema the turn's final answer must match (`useChat`'s `body`): the answer comes back as the `finish` metadata's `output`. */
  outputSchema: promptSchema.shape.outputSchema,
});

/**
 * What a chat request asks for: a new prompt in the session (typed when it gives an `outputSchema`), or what the
 * human says to its running turn: decisions on the approvals it awaits, answers to its tools' questions.
 */
export type ChatAction =
  | { readonly kind: 'prompt'; readonly sessionId: string; readonly text: string; readonly outputSchema?: Record<string, unknown> }
  | { readonly kind: 'respond'; readonly sessionId: string; readonly decisions: readonly Approve[]; readonly answers: readonly InputAnswer[] };

interface ToolPart {
  readonly toolCallId?: unknown;
  readonly state?: unknown;
  readonly approval?: { readonly approved?: unknown; readonly reason?: unknown };
}

/**
 * Reads a chat request. The session keeps the conversation, so only the last message counts: a user message's
 * text parts are the prompt (other parts, such as files, are refused rather than dropped); an assistant message
 * whose tool parts are in state `approval-responded` (`addToolApprovalResponse`) carries approval decisions, and the
 * body's `answers` (`[{ toolCallId, requestId?, answer }]`) answer tools' questions; `outputSchema` types a prompt.
 * `regenerate-message` is refused: regenerating needs a fork of the session. Throws {@link InvalidInputError}.
 */
export function readChatRequest(body: unknown): ChatAction {
  const parsed = chatRequestSchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new InvalidInputError(`chat request: ${issue.path.join('.') || '(body)'}: ${issue.message}`);
  }
  const { id: sessionId, messages, trigger, answers, outputSchema } = parsed.data;
  if (trigger === 'regenerate-message') throw new InvalidInputError('chat request: regenerate-message is not supported here (it needs a fork of the session): fork the session at the user message (agentbus.<t>.sessions.<id>.fork), switch the chat to the new session id, and send the message again; see docs/protocol.md#fork');
  const last = messages.at(-1)!;
  if (last.role === 'user') {
    const other = last.parts.find((part) => part.type !== 'text' && !part.type.startsWith('data-'));
    if (other) throw new InvalidInputError(`chat request: a user message part of type ${JSON.stringify(other.type)} is not supported; send text`);
    const text = last.parts.map((part) => (part.type === 'text' && typeof part['text'] === 'string' ? part['text'] : '')).join('');
    if (text.trim() === '') throw new InvalidInputError('chat request: the last user message has no text');
    if (answers) throw new InvalidInputError('chat request: answers go with the assistant message that asked (sendMessage() with no message), not with a new user message');
    return { kind: 'prompt', sessionId, text, ...(outputSchema ? { outputSchema } : {}) };
  }
  if (last.role === 'assistant') {
    const decisions: Approve[] = [];
    for (const part of last.parts as readonly ToolPart[]) {
      if (part.state !== 'approval-responded' || typeof part.toolCallId !== 'string' || typeof part.approval?.approved !== 'boolean') continue;
      const reason = typeof part.approval.reason === 'string' && part.approval.reason !== '' ? { reason: part.approval.reason } : {};
      decisions.push({ toolCallId: part.toolCallId, approved: part.approval.approved, ...reason });
    }
    if (decisions.length > 0 || answers) return { kind: 'respond', sessionId, decisions, answers: answers ?? [] };
  }
  throw new InvalidInputError('chat request: the last message must be a user message, or an assistant message with approval responses or answers');
}
