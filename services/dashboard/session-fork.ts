import type { NatsConnection } from '@nats-io/nats-core';
import { request } from '../../src/bus/request.ts';
import { createReplyMux } from '../../src/bus/reply-mux.ts';
import { AgentbusError, ErrorCode, fromErrorData } from '../../src/errors.ts';
import { HttpError } from '../../src/service/http-basics.ts';
import { SessionVerb, contentTypeOf, forkSessionSchema } from '../../src/protocol/index.ts';
import type { Codec, ForkReply, ForkRequest, Subjects } from '../../src/protocol/index.ts';

/** What the dashboard's fork button asks the runtime for, and the HTTP error each refusal becomes. */
export type ForkSession = (tenant: string, sessionId: string, request: ForkRequest) => Promise<{ sessionId: string; atSeq: number }>;

/** HTTP status of each error code a fork may be refused with. */
const STATUS: Record<string, number> = {
  [ErrorCode.invalidInput]: 400,
  [ErrorCode.notFound]: 404,
  [ErrorCode.conflict]: 409,
  [ErrorCode.sessionDeleted]: 410,
  [ErrorCode.rateLimited]: 429,
  [ErrorCode.noResponders]: 503,
  [ErrorCode.unavailable]: 503,
  [ErrorCode.timeout]: 504,
};

/**
 * Sends `fork` to the runtime (`<prefix>.<t>.sessions.<sid>.fork`, answered by the source's lease holder) and
 * turns its refusal into an {@link HttpError} with the runtime's code and message.
 */
export function createForkSession(deps: { nc: NatsConnection; codec: Codec; subjects: Subjects; timeoutMs?: number }): ForkSession {
  const replies = createReplyMux(deps.nc);
  return async (tenant, sessionId, body) => {
    try {
      const reply = await request(deps.nc, deps.subjects.session(tenant, sessionId, SessionVerb.fork), deps.codec.encode(body), { timeoutMs: deps.timeoutMs ?? 15_000, replies });
      const answer = deps.codec.decode(reply.data, contentTypeOf(reply)) as ForkReply;
      if (!answer.ok) throw fromErrorData(answer.error);
      return { sessionId: answer.sessionId, atSeq: answer.atSeq };
    } catch (error) {
      if (error instanceof AgentbusError) throw new HttpError(STATUS[error.code] ?? 502, error.code, error.message);
      throw error;
    }
  };
}

/** The body of the dashboard's `POST /api/sessions/<t>/<sid>/fork`: JSON `{ atSeq?, sessionId? }`. */
export function parseForkBody(codec: Codec, bytes: Uint8Array): ForkRequest {
  try {
    return bytes.byteLength === 0 ? {} : codec.validate(forkSessionSchema, codec.decode(bytes, 'application/json'), 'fork');
  } catch (error) {
    throw new HttpError(400, ErrorCode.invalidInput, (error as Error).message);
  }
}
