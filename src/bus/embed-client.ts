import type { NatsConnection } from '@nats-io/nats-core';
import { nuid } from '@nats-io/nats-core';
import { z } from 'zod';
import { fromErrorData } from '../errors.ts';
import { contentTypeOf, EMBED_TIMEOUT_HEADER, MAX_EMBED_INPUTS } from '../protocol/index.ts';
import type { Codec, EmbedRequest, Subjects } from '../protocol/index.ts';
import { createReplyMux } from './reply-mux.ts';
import type { ReplyMux } from './reply-mux.ts';
import { msgpackHeaders, request } from './request.ts';

/** Options of {@link createEmbedClient}. */
export interface EmbedClientOptions {
  readonly nc: NatsConnection;
  readonly codec: Codec;
  readonly subjects: Subjects;
  /** The provider whose `embed` endpoint answers (`openai`, `ollama`, `scripted`, …). */
  readonly provider: string;
  /** Longest wait of one request when a call names none; default 30 s. */
  readonly timeoutMs?: number;
  readonly replies?: ReplyMux;
}

/** Embeddings from the provider service. */
export interface EmbedClient {
  /**
   * One vector per text, in order; more than {@link MAX_EMBED_INPUTS} texts go in several requests, one after
   * another. Rejects with the provider's typed error (`unsupported` when it has no embedding model), a
   * `TimeoutError`, `NoRespondersError`, or the signal's reason.
   */
  embed(texts: readonly string[], options?: { signal?: AbortSignal; timeoutMs?: number; model?: string }): Promise<{ model: string; dimensions: number; vectors: number[][] }>;
}

const errorReply = z.object({ error: z.object({ code: z.string(), message: z.string(), retryable: z.boolean() }) });
const vectorsReply = z.object({ id: z.string(), model: z.string(), dimensions: z.int().nonnegative(), vectors: z.array(z.array(z.number())) });

/**
 * A client of `agentbus.provider.<provider>.embed`.
 *
 * @example
 * const embedder = createEmbedClient({ nc, codec, subjects, provider: 'openai' });
 * const { vectors } = await embedder.embed(['my favourite fruit'], { timeoutMs: 2_000, signal });
 */
export function createEmbedClient(options: EmbedClientOptions): EmbedClient {
  const { nc, codec } = options;
  const subject = options.subjects.providerEmbed(options.provider);
  const replies = options.replies ?? createReplyMux(nc);
  return {
    async embed(texts, callOptions = {}) {
      const vectors: number[][] = [];
      let model = '';
      for (let start = 0; start < texts.length; start += MAX_EMBED_INPUTS) {
        const input = texts.slice(start, start + MAX_EMBED_INPUTS);
        const body: EmbedRequest = { v: 1, id: nuid.next(), input: [...input], ...(callOptions.model ? { model: callOptions.model } : {}) };
        const timeoutMs = callOptions.timeoutMs ?? options.timeoutMs ?? 30_000;
        const headers = msgpackHeaders();
        headers.set(EMBED_TIMEOUT_HEADER, String(timeoutMs));
        const reply = await request(nc, subject, codec.encode(body), {
          timeoutMs,
          headers,
          replies,
          ...(callOptions.signal ? { signal: callOptions.signal } : {}),
        });
        const value = codec.decode(reply.data, contentTypeOf(reply));
        const failure = errorReply.safeParse(value);
        if (failure.success) throw fromErrorData(failure.data.error);
        const answer = codec.validate(vectorsReply, value, `reply of ${subject}`);
        if (answer.id !== body.id || answer.vectors.length !== input.length) {
          throw new Error(`${subject} answered ${answer.vectors.length} vectors for request ${answer.id}, not ${input.length} for ${body.id}`);
        }
        vectors.push(...answer.vectors);
        model = answer.model;
      }
      return { model, dimensions: vectors[0]?.length ?? 0, vectors };
    },
  };
}
