import { open } from 'node:fs/promises';
import { resolve } from 'node:path';
import { MAX_ATTACHMENT_CHARS, MAX_PROMPT_ATTACHMENTS, MAX_PROMPT_CHARS } from '../src/protocol/index.ts';
import { UsageError } from './context.ts';

/** The most bytes of one `--file` (an attachment holds at most this many characters). */
export const MAX_FILE_BYTES = MAX_ATTACHMENT_CHARS;
/** The most bytes of every `--file` of one prompt together: the prompt must still fit one bus message. */
export const MAX_FILES_BYTES = 512 * 1024;

const kib = (bytes: number) => `${Math.ceil(bytes / 1024)} KiB`;

/** Decodes `bytes` as UTF-8 text, refusing binary content (a NUL byte) and invalid UTF-8 with `what` named. */
function utf8Text(bytes: Uint8Array, what: string): string {
  if (bytes.includes(0)) throw new UsageError(`${what} looks binary (it holds NUL bytes); only text can be sent`);
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new UsageError(`${what} is not valid UTF-8 text; only text can be sent`);
  }
}

/**
 * Reads the prompt text from `stdin` (`agentbus ask -`), up to the prompt's own limit; an empty one is refused.
 * Stops at `signal`.
 */
export async function readPromptFromStdin(stdin: NodeJS.ReadableStream | undefined, signal: AbortSignal): Promise<string> {
  if (!stdin) throw new UsageError('ask - reads the prompt from stdin, and this command has none');
  const chunks: Buffer[] = [];
  let size = 0;
  // Every UTF-8 character is at least one byte: more bytes than the character limit times four cannot fit.
  const limit = MAX_PROMPT_CHARS * 4;
  const onAbort = () => (stdin as NodeJS.ReadableStream & { destroy?: (error?: Error) => void }).destroy?.(signal.reason as Error);
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    for await (const chunk of stdin) {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
      size += bytes.length;
      if (size > limit) throw new UsageError(`the prompt on stdin is over ${kib(limit)}`);
      chunks.push(bytes);
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
  signal.throwIfAborted();
  const text = utf8Text(Buffer.concat(chunks), 'the prompt on stdin').trim();
  if (text === '') throw new UsageError('the prompt on stdin is empty');
  if (text.length > MAX_PROMPT_CHARS) throw new UsageError(`the prompt on stdin is over ${MAX_PROMPT_CHARS} characters`);
  return text;
}

/**
 * Reads each `--file` as an attachment: its path as given is its name. Refuses (before reading it whole) a file
 * over {@link MAX_FILE_BYTES}, files over {@link MAX_FILES_BYTES} together, more than the prompt's limit of files,
 * and anything that is not UTF-8 text.
 */
export async function readAttachments(paths: readonly string[], cwd: string): Promise<{ name: string; content: string }[]> {
  if (paths.length > MAX_PROMPT_ATTACHMENTS) throw new UsageError(`--file may be given at most ${MAX_PROMPT_ATTACHMENTS} times, got ${paths.length}`);
  const attachments: { name: string; content: string }[] = [];
  let total = 0;
  for (const path of paths) {
    const what = `--file ${path}`;
    const file = await open(resolve(cwd, path), 'r').catch((error: NodeJS.ErrnoException) => {
      throw new UsageError(`${what}: ${error.code === 'ENOENT' ? 'no such file' : error.message}`);
    });
    try {
      const stats = await file.stat();
      if (!stats.isFile()) throw new UsageError(`${what}: not a regular file`);
      if (stats.size > MAX_FILE_BYTES) throw new UsageError(`${what} is ${kib(stats.size)}, over the limit of ${kib(MAX_FILE_BYTES)} per file`);
      total += stats.size;
      if (total > MAX_FILES_BYTES) throw new UsageError(`the files given with --file are over ${kib(MAX_FILES_BYTES)} together`);
      // Read to one byte past the limit: a file that grew since stat is still caught.
      const buffer = Buffer.alloc(MAX_FILE_BYTES + 1);
      const { bytesRead } = await file.read(buffer, 0, buffer.length, 0);
      if (bytesRead > MAX_FILE_BYTES) throw new UsageError(`${what} is over the limit of ${kib(MAX_FILE_BYTES)} per file`);
      attachments.push({ name: path, content: utf8Text(buffer.subarray(0, bytesRead), what) });
    } finally {
      await file.close();
    }
  }
  return attachments;
}
